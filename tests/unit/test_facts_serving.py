"""The Serving probe run as the node runs it, against a server whose /ping and /health differ
(SGLang 0.5.23 while its /health generation is stuck: /ping 200, /health 503); the facts that
ask the node's own server, against one bound to a single address."""

import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sglang_deploy.facts.fleet import ServingView
from sglang_deploy.facts.metrics import EngineMetrics
from sglang_deploy.facts.serving import Serving
from sglang_deploy.profile.schema import Service


class Handler(BaseHTTPRequestHandler):
    answers = {"/ping": 200, "/health": 503, "/metrics": 200}

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


@pytest.fixture
def bound_port():
    """The server bound to one address, a loopback alias: it listens on 127.0.0.2 only."""
    server = ThreadingHTTPServer(("127.0.0.2", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def _on_node(fact, **kwargs):
    out = subprocess.run(["bash", "-c", fact.command(**kwargs)], capture_output=True, text=True, check=True)
    return fact.process(out.stdout.splitlines())


def test_the_facts_ask_a_server_bound_to_one_address_there(bound_port, tmp_path):
    """service.host 127.0.0.2: the serving fact, a rolling node's view and a canary's scrape ask
    the server at service.probe_host, where it listens."""
    service = Service(host="127.0.0.2", port=bound_port)
    found = _on_node(
        Serving(), port=service.port, served_name="tiny", health_path="/ping", host=service.probe_host
    )
    assert found == {"health": 200, "models": ["tiny"], "ready": True}
    view = _on_node(
        ServingView(),
        worker_url="http://127.0.0.2:%d" % service.port,
        local_port=service.port,
        last_good_dir=str(tmp_path),
        local_host=service.probe_host,
    )
    assert view == {"routers": {}, "ping": True, "last_good": False}
    scrape = _on_node(EngineMetrics(), port=service.port, host=service.probe_host)
    assert scrape.error is None and scrape.text is not None
