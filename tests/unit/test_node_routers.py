"""node/lib/routers.py and node/router_gate.py against a small HTTP server that answers like
smg's worker API with no drain settle time (queued additions, a removal at once, worker states,
/readiness); smg's own answers, Draining included: test_node_smg.py."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sglang_deploy.node import router_gate
from sglang_deploy.node.lib.routers import Router, RouterError


class FakeRouter(BaseHTTPRequestHandler):
    workers = {}  # url -> {"id", "is_healthy", "model_id"}: listed "ready" or "not_ready"
    queued = set()  # urls whose addition is queued, not listed yet (smg)

    def log_message(self, *args):
        pass

    def _send(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            return self._send(200, "OK")
        if self.path == "/readiness":
            healthy = sum(w["is_healthy"] for w in self.workers.values())
            return self._send(200 if healthy else 503, {"status": "ready" if healthy else "not ready"})
        if self.path == "/workers":
            listed = [
                dict(w, url=u, load=0, status="ready" if w["is_healthy"] else "not_ready")
                for u, w in self.workers.items()
            ]
            return self._send(200, {"workers": listed})
        self._send(404, {})

    def do_PATCH(self):  # an update of labels and health settings, applied at once
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        wid = self.path.rsplit("/", 1)[1]
        for worker in self.workers.values():
            if worker["id"] == wid:
                worker["labels"] = {**worker.get("labels", {}), **(body.get("labels") or {})}
                return self._send(202, {"status": "accepted"})
        self._send(404, {"error": "not found", "code": "WORKER_NOT_FOUND"})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if body["url"] in self.queued:  # smg 1.13.0's answer, word for word but the ids
            wid = "01a23597-2555-705c-8c39-53d563654da6"
            return self._send(
                409,
                {
                    "error": f"Worker creation already in progress for URL '{body['url']}' with ID {wid}. "
                    f"Poll GET /workers/{wid}.",
                    "code": "WORKER_CREATE_IN_PROGRESS",
                },
            )
        if body["url"] in self.workers:
            return self._send(409, {"error": f"Worker {body['url']} already exists", "code": "WORKER_EXISTS"})
        self.workers[body["url"]] = {"id": f"id-{len(self.workers)}", "is_healthy": True, "model_id": "tiny"}
        self._send(202, {"status": "accepted"})

    def do_DELETE(self):
        wid = self.path.rsplit("/", 1)[1]
        for url, worker in list(self.workers.items()):
            if worker["id"] == wid:
                del self.workers[url]
                return self._send(202, {"status": "accepted"})
        self._send(404, {"error": "not found"})


@pytest.fixture
def router():
    FakeRouter.queued = set()
    FakeRouter.workers = {
        "http://10.0.0.11:30000": {"id": "a", "is_healthy": True, "model_id": "tiny"},
        "http://10.0.0.12:30000": {"id": "b", "is_healthy": False, "model_id": "tiny"},
    }
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeRouter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_remove_then_add_back(router):
    client = Router(router)
    assert client.remove("http://10.0.0.11:30000") is True
    client.wait_for("http://10.0.0.11:30000", "absent", timeout=2)
    assert client.remove("http://10.0.0.11:30000") is False  # not listed: nothing to remove
    client.add("http://10.0.0.11:30000/")
    client.wait_for("http://10.0.0.11:30000", "healthy", timeout=2)


def test_an_addition_already_queued_counts_as_queued(router):
    # smg queues the workers of its unit's --worker-urls at start and checks each every
    # --worker-startup-check-interval; a node that serves before that check adds itself: 409.
    FakeRouter.queued = {"http://10.0.0.13:30000"}
    Router(router).add("http://10.0.0.13:30000")


def test_an_addition_refused_otherwise_is_named(router):
    with pytest.raises(RouterError, match=r"adding http://10.0.0.11:30000 answered 409: .*already exists"):
        Router(router).add("http://10.0.0.11:30000")


def test_wait_names_what_it_saw(router):
    with pytest.raises(RouterError, match="10.0.0.12:30000 still not_ready after 0s"):
        Router(router).wait_for("http://10.0.0.12:30000", "healthy", timeout=0)


def test_unreachable_router_is_named():
    with pytest.raises(RouterError, match=r"router http://127.0.0.1:9: unreachable"):
        Router("http://127.0.0.1:9", timeout=1).health()


def test_router_gate_names_unhealthy_and_missing_workers(router, capsys):
    code = router_gate.main(
        [
            "--url",
            router,
            "--timeout",
            "0",
            "--worker",
            "http://10.0.0.11:30000",
            "--worker",
            "http://10.0.0.12:30000",
            "--worker",
            "http://10.0.0.13:30000",
        ]
    )
    found = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 4
    assert "http://10.0.0.12:30000 not_ready, http://10.0.0.13:30000 not listed" in found["cause"]
    FakeRouter.workers["http://10.0.0.12:30000"]["is_healthy"] = True
    assert (
        router_gate.main(
            [
                "--url",
                router,
                "--timeout",
                "0",
                "--worker",
                "http://10.0.0.11:30000",
                "--worker",
                "http://10.0.0.12:30000",
            ]
        )
        == 0
    )
