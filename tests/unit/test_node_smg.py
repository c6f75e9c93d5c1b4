"""node/rotation.py, node/lib/routers.py and node/router_gate.py against routers that answer
like smg 1.13.0 (its answers captured in captured/smg-1.13.0/): worker states, a removal that
lists a ready worker "draining" for its drain settle time, queued updates, 409 for a URL it
still lists, /readiness 503 with a reason, a separate probe port."""

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from test_node_rotation import WORKER, FakeServer, _command, _found, _ran, server  # noqa: F401 (fixture)

from sglang_deploy.node import rotation, router_gate
from sglang_deploy.node.lib import status
from sglang_deploy.node.lib.routers import DRAIN_LABEL, last_routable, parse_workers, state_of

CAPTURED = Path(__file__).parent / "captured"
PEER = "http://10.0.0.12:30000"


class Smg:
    """One fake smg: its registry, the requests it was sent, and hooks."""

    def __init__(self):
        self.workers = {}  # url -> {"id", "model_id", "status", "labels", "settle"}
        self.requests = []  # (method, path, body)
        self.gateway_draining = False
        self.on_delete = None  # called with the url a DELETE removes
        self.lock = threading.Lock()

    def add(self, url, state="ready"):
        self.workers[url] = {
            "id": str(uuid.uuid4()),
            "model_id": "tiny",
            "status": state,
            "labels": {},
            "settle": 5,
        }

    def later(self, seconds, action):
        threading.Timer(seconds, action).start()

    def listed(self, url):
        w = self.workers[url]
        return {
            "id": w["id"],
            "model_id": w["model_id"],
            "url": url,
            "labels": dict(w["labels"]),
            "is_healthy": w["status"] == "ready",
            "status": w["status"],
            "load": 0,
        }

    def by_id(self, wid):
        return next((url for url, w in self.workers.items() if w["id"] == wid), None)


def handler(smg):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self):
            length = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(length)) if length else None

        def do_GET(self):
            smg.requests.append(("GET", self.path, None))
            if self.path == "/health":
                return self._send(200, "OK")
            if self.path == "/readiness":
                if smg.gateway_draining:
                    return self._send(503, {"status": "not ready", "reason": "draining"})
                ready = sum(w["status"] == "ready" for w in smg.workers.values())
                if not ready:
                    return self._send(503, {"status": "not ready", "reason": "insufficient healthy workers"})
                return self._send(
                    200, {"status": "ready", "healthy_workers": ready, "total_workers": len(smg.workers)}
                )
            if self.path == "/workers":
                with smg.lock:
                    listed = [smg.listed(url) for url in smg.workers]
                return self._send(200, {"workers": listed, "total": len(listed), "stats": {}})
            self._send(404, {})

        def do_PATCH(self):
            body = self._body()
            smg.requests.append(("PATCH", self.path, body))
            url = smg.by_id(self.path.rsplit("/", 1)[1])
            if url is None:
                return self._send(404, {"error": "not found", "code": "WORKER_NOT_FOUND"})

            def apply():  # queued: the update lands a little later
                with smg.lock:
                    w = smg.workers.get(url)
                    if w is not None:
                        w["labels"].update(body.get("labels") or {})
                        w["settle"] = (body.get("health") or {}).get("drain_settle_secs", w["settle"])

            smg.later(0.2, apply)
            self._send(
                202, {"status": "accepted", "message": "Worker update queued for background processing"}
            )

        def do_DELETE(self):
            smg.requests.append(("DELETE", self.path, None))
            url = smg.by_id(self.path.rsplit("/", 1)[1])
            if url is None:
                return self._send(404, {"error": "not found", "code": "WORKER_NOT_FOUND"})
            with smg.lock:
                w = smg.workers[url]
                settle = w["settle"] if w["status"] == "ready" else 0
                w["status"] = "draining" if settle else w["status"]
            if smg.on_delete:
                smg.on_delete(url)
            smg.later(settle, lambda: smg.workers.pop(url, None))
            self._send(
                202, {"status": "accepted", "message": "Worker removal queued for background processing"}
            )

        def do_POST(self):
            body = self._body()
            smg.requests.append(("POST", self.path, body))
            if body["url"] in smg.workers:
                return self._send(409, {"error": "Worker already exists", "code": "WORKER_ALREADY_EXISTS"})
            smg.add(body["url"], state="pending")
            smg.later(0.2, lambda: smg.workers[body["url"]].update(status="ready"))
            self._send(202, {"status": "accepted", "worker_id": smg.workers[body["url"]]["id"]})

    return Handler


def serve(smg):
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler(smg))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}"


@pytest.fixture
def smgs():
    made = []

    def make(peer_state="ready"):
        smg = Smg()
        smg.add(WORKER)
        smg.add(PEER, peer_state)
        httpd, url = serve(smg)
        made.append(httpd)
        smg.url = url
        return smg

    yield make
    for httpd in made:
        httpd.shutdown()


def _args(port, *routers, settle="1", healthy="3"):
    args = ["--worker-url", WORKER, "--local-port", str(port), "--drain-timeout", "5"]
    args += ["--healthy-timeout", healthy, "--drain-settle", settle]
    for smg in routers:
        args += ["--router", smg.url]
    return args


def _rotate(tmp_path, port, *routers, **kw):
    cycle = _command(tmp_path, "cycle", {"status": 0, "outcome": "served", "steps": []})
    restore = _command(tmp_path, "restore", {"status": 0})
    return rotation.main([*_args(port, *routers, **kw), "--cycle", cycle, "--restore", restore])


def _sent(smg, method):
    return [(path, body) for m, path, body in smg.requests if m == method]


# -- captured answers -------------------------------------------------------------------------


def test_captured_answers_say_who_is_routable():
    smg = parse_workers((CAPTURED / "smg-1.13.0" / "workers_one_draining.json").read_text())
    states = {url: state_of(w) for url, w in smg.items()}
    assert states == {"http://127.0.0.1:41002": "healthy", "http://127.0.0.1:41001": "draining"}
    assert not smg["http://127.0.0.1:41001"]["routable"] and smg["http://127.0.0.1:41002"]["state"] == "ready"
    # The draining one has left: the ready one is the model's last routable worker.
    assert last_routable(smg, "http://127.0.0.1:41002") == (
        "http://127.0.0.1:41002 is the last routable worker of tiny (http://127.0.0.1:41001 draining)"
    )
    assert last_routable(smg, "http://127.0.0.1:41001") is None  # it routes nothing: nothing to protect
    both = parse_workers((CAPTURED / "smg-1.13.0" / "workers_two_ready.json").read_text())
    assert last_routable(both, "http://127.0.0.1:41001") is None
    # A worker without smg's status (sglang-router, its former name, listed none) is refused.
    with pytest.raises(ValueError, match="not smg's /workers answer: a worker without 'status'"):
        parse_workers({"workers": [{"url": "http://127.0.0.1:41001", "is_healthy": True}]})
    # One worker of its model alone: no other to protect (a model served by one node restarts).
    alone = {url: w for url, w in both.items() if url.endswith("41001")}
    assert last_routable(alone, "http://127.0.0.1:41001") is None


# -- draining through smg's Draining state ----------------------------------------------------


def test_a_node_drains_through_smgs_draining_state(smgs, server, tmp_path, capsys):  # noqa: F811
    smg = smgs()
    seen_while_draining = []
    real_get_load = FakeServer.do_GET

    def watch(handler):  # the router's view of the node while the node's own drain waits
        if handler.path == "/get_load":
            w = smg.workers.get(WORKER)
            seen_while_draining.append(w and w["status"])
        return real_get_load(handler)

    FakeServer.do_GET = watch
    try:
        code = _rotate(tmp_path, server, smg)
    finally:
        FakeServer.do_GET = real_get_load
    found = _found(capsys)
    assert code == status.READY and found["outcome"] == "served" and _ran(tmp_path) == ["cycle"]
    # The drain's request: the settle time set (and seen applied) before the removal.
    ((patch_path, body),) = _sent(smg, "PATCH")
    assert body["health"] == {"drain_settle_secs": 1} and DRAIN_LABEL in body["labels"]
    methods = [m for m, path, _ in smg.requests if m != "GET"]
    assert methods == ["PATCH", "DELETE", "POST"] and _sent(smg, "DELETE")[0][0] == patch_path
    # smg listed the node draining (not routable) while its requests finished.
    assert seen_while_draining and seen_while_draining[0] == "draining"
    # Back only once the draining entry was gone (smg answers 409 for a URL it lists).
    assert smg.workers[WORKER]["status"] == "ready"
    assert all(body["url"] == WORKER for _, body in _sent(smg, "POST"))


def test_a_removal_waits_for_the_settle_update_to_land(smgs, server, tmp_path, capsys):  # noqa: F811
    smg = smgs()
    assert _rotate(tmp_path, server, smg, settle="2") == status.READY
    patched = next(i for i, (m, _, _) in enumerate(smg.requests) if m == "PATCH")
    deleted = next(i for i, (m, _, _) in enumerate(smg.requests) if m == "DELETE")
    # Between them the node read /workers until its label showed the update applied.
    assert any(m == "GET" and p == "/workers" for m, p, _ in smg.requests[patched + 1 : deleted])


# -- never the last routable worker of a model ------------------------------------------------


def test_the_last_routable_worker_of_a_model_is_not_taken_out(smgs, server, tmp_path, capsys):  # noqa: F811
    smg = smgs(peer_state="pending")  # the peer is back in the router but not routable yet
    started = time.monotonic()
    code = _rotate(tmp_path, server, smg, healthy="1")
    found = _found(capsys)
    assert code == status.PREFLIGHT_FAILED and found["outcome"] == "last_in_rotation"
    assert "is the last routable worker of tiny (http://10.0.0.12:30000 pending)" in found["cause"]
    assert time.monotonic() - started >= 1  # it waited for the peer first
    assert _ran(tmp_path) == ["restore"] and found["restored"]  # files back, nothing restarted
    assert [m for m, _, _ in smg.requests if m != "GET"] == []  # nothing taken out
    assert smg.workers[WORKER]["status"] == "ready"


def test_a_peer_that_becomes_routable_while_waited_for_lets_the_node_go(smgs, server, tmp_path, capsys):  # noqa: F811
    smg = smgs(peer_state="pending")
    smg.later(0.5, lambda: smg.workers[PEER].update(status="ready"))
    assert _rotate(tmp_path, server, smg, healthy="3") == status.READY
    assert _found(capsys)["outcome"] == "served" and _ran(tmp_path) == ["cycle"]


def test_a_peer_lost_between_two_routers_puts_the_node_back(smgs, server, tmp_path, capsys):  # noqa: F811
    # The race: both routers listed the peer routable when the node looked; the node leaves the
    # first, and meanwhile the second stops routing to the peer. Right before leaving the second
    # the node looks again: it stays there, goes back into the first, and nothing restarts.
    first, second = smgs(), smgs()
    first.on_delete = lambda url: second.workers[PEER].update(status="not_ready")
    code = _rotate(tmp_path, server, first, second, healthy="3")
    found = _found(capsys)
    assert code == status.PREFLIGHT_FAILED and found["outcome"] == "last_in_rotation"
    assert (
        f"router {second.url}: " in found["cause"] and "put back in the routers it had left" in found["cause"]
    )
    assert _ran(tmp_path) == ["restore"]
    assert [m for m, _, _ in second.requests if m != "GET"] == []
    assert [m for m, _, _ in first.requests if m != "GET"] == ["PATCH", "DELETE", "POST"]
    assert first.workers[WORKER]["status"] == "ready"


# -- the router gate --------------------------------------------------------------------------


def test_the_gate_asks_readiness_on_the_probe_port_and_says_why_not(smgs, capsys):
    smg, probe = smgs(), smgs()
    args = [
        "--url",
        smg.url,
        "--probe-url",
        probe.url,
        "--worker",
        WORKER,
        "--worker",
        PEER,
        "--timeout",
        "0",
    ]
    assert router_gate.main(args) == status.READY
    assert ("GET", "/readiness", None) in probe.requests and ("GET", "/readiness", None) not in smg.requests
    probe.gateway_draining = True  # an old gateway still finishing its requests
    assert router_gate.main(args) == status.TIMEOUT
    assert "/readiness on its probe port answered 503 (draining)" in capsys.readouterr().out
    smg.workers[PEER]["status"] = "draining"
    probe.gateway_draining = False
    assert router_gate.main(args) == status.TIMEOUT
    assert f"{PEER} draining" in capsys.readouterr().out
