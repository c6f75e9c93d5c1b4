"""facts/fleet.ServingView's command, run here against a fake router and a fake server: how
each router lists the node, /ping, and whether a last known good exists."""

import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sglang_deploy.facts.fleet import ServingView


def serve(answers):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            code, body = answers.get(self.path, (404, ""))
            self.send_response(code)
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def servers():
    started = []
    yield lambda answers: started.append(serve(answers)) or started[-1]
    for server in started:
        server.shutdown()


def test_the_view_names_each_routers_listing_ping_and_last_good(servers, tmp_path):
    node = servers({"/ping": (200, "")})
    port = node.server_address[1]
    worker = f"http://127.0.0.1:{port}"
    listed = lambda healthy: json.dumps(
        {
            "workers": [
                {
                    "id": "w1",
                    "url": worker + "/",
                    "is_healthy": healthy,
                    "status": "ready" if healthy else "not_ready",
                }
            ]
        }
    )  # noqa: E731
    healthy = servers({"/workers": (200, listed(True))})
    sick = servers({"/workers": (200, listed(False))})
    empty = servers({"/workers": (200, json.dumps({"workers": []}))})
    routers = [f"http://127.0.0.1:{s.server_address[1]}" for s in (healthy, sick, empty)]
    dead = "http://127.0.0.1:9"  # discard port: nothing listens
    (tmp_path / "manifest.json").write_text("{}")
    fact = ServingView()
    command = fact.command(worker, port, str(tmp_path), (*routers, dead))
    output = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60).stdout
    view = fact.process(output.splitlines())
    assert view == {
        "routers": {
            routers[0]: "healthy",
            routers[1]: "unhealthy",
            routers[2]: "absent",
            dead: "unreachable",
        },
        "ping": True,
        "last_good": True,
    }
    fresh = fact.process(
        subprocess.run(
            ["sh", "-c", fact.command(worker, 9, str(tmp_path / "none"))], capture_output=True, text=True
        ).stdout.splitlines()
    )
    assert fresh == {"routers": {}, "ping": False, "last_good": False}
    assert fact.process([]) is None
