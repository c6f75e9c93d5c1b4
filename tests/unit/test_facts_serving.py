"""The Serving probe run as the node runs it, against a server whose /ping and /health differ
(SGLang 0.5.23 while its /health generation is stuck: /ping 200, /health 503)."""

import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sglang_deploy.facts.serving import Serving


class Handler(BaseHTTPRequestHandler):
    answers = {"/ping": 200, "/health": 503}

    def do_GET(self):
        if self.path == "/v1/models":
            body = json.dumps({"data": [{"id": "tiny"}]}).encode()
            self.send_response(200)
        else:
            body = b""
            self.send_response(self.answers.get(self.path, 404))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def port():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


@pytest.mark.parametrize("path, ready", [("/ping", True), ("/health", False)])
def test_the_probe_asks_the_health_path_it_is_given(port, path, ready):
    fact = Serving()
    out = subprocess.run(
        ["bash", "-c", fact.command(port=port, served_name="tiny", health_path=path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    found = fact.process(out)
    assert found == {"health": 200 if ready else 503, "models": ["tiny"], "ready": ready}
