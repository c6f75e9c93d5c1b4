"""node/rotation.py on its own: a node's restart out of rotation against a router that answers
like smg with no drain settle time (test_node_routers.FakeRouter) and a server that answers /ping and
/get_load like SGLang; the restart cycle and the restore are small commands."""

import argparse
import json
import shlex
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from test_node_routers import FakeRouter, router  # noqa: F401 (fixture)

from sglang_deploy.node import rotation
from sglang_deploy.node.lib import result, status, textfile
from sglang_deploy.plan.fleet_hosts import Rotation
from sglang_deploy.plan.hosts import deploy_defaults
from sglang_deploy.plan.settings import settings_of

WORKER = "http://10.0.0.11:30000"


class FakeServer(BaseHTTPRequestHandler):
    """The node's own server: /ping, and /get_load counting down the requests in flight."""

    in_flight = [0]  # requests in flight, answer by answer (the last repeats); None: see `unread`
    unread = (404, b"")  # what /get_load answers for a None: a status and a body
    loads_seen = 0

    def log_message(self, *args):
        pass

    def do_GET(self):
        code = 200 if self.path in ("/ping", "/get_load") else 404
        body = b""
        if self.path == "/get_load":
            FakeServer.loads_seen += 1
            left = FakeServer.in_flight.pop(0) if len(FakeServer.in_flight) > 1 else FakeServer.in_flight[0]
            if left is None:
                code, body = FakeServer.unread
            else:
                body = json.dumps([{"num_reqs": left, "num_waiting_reqs": 0}]).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(autouse=True)
def peer_routable(router):  # noqa: F811
    """The node's peer (the same model) routable: the node may leave rotation."""
    FakeRouter.workers["http://10.0.0.12:30000"]["is_healthy"] = True


def _serving(host):
    FakeServer.in_flight, FakeServer.loads_seen, FakeServer.unread = [2, 1, 0], 0, (404, b"")
    httpd = ThreadingHTTPServer((host, 0), FakeServer)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address[1]
    httpd.shutdown()


@pytest.fixture
def server():
    yield from _serving("127.0.0.1")


@pytest.fixture
def bound_server():
    """The node's server bound to one address, a loopback alias: it listens on 127.0.0.2 only."""
    yield from _serving("127.0.0.2")


def _command(tmp_path, name, line):
    """A command that notes it ran (and whether the router listed the worker then) and prints
    ``line`` as its result."""
    code = (
        f"import json, sys; open({str(tmp_path / 'ran')!r}, 'a').write({name!r} + '\\n'); "
        f"line = {json.dumps(line)!r}; print(line); sys.exit(json.loads(line)['status'])"
    )
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}"


def _args(router_url, port, *extra):
    return [
        "--worker-url",
        WORKER,
        "--local-port",
        str(port),
        *(["--router", router_url] if router_url else []),
        "--drain-timeout",
        "5",
        "--healthy-timeout",
        "5",
        *extra,
    ]


def _ran(tmp_path):
    path = tmp_path / "ran"
    return path.read_text().split() if path.exists() else []


def _found(capsys):
    return result.parse(capsys.readouterr().out.splitlines())


def test_a_serving_node_is_taken_out_drained_restarted_and_put_back(router, server, tmp_path, capsys):  # noqa: F811
    cycle = _command(tmp_path, "cycle", {"status": 0, "outcome": "served", "steps": []})
    code = rotation.main(
        _args(router, server, "--cycle", cycle, "--restore", _command(tmp_path, "restore", {"status": 0}))
    )
    found = _found(capsys)
    assert code == status.READY and found["outcome"] == "served" and _ran(tmp_path) == ["cycle"]
    assert found["rotation"]["drained"] and FakeServer.loads_seen >= 3  # waited for 2, 1, 0
    assert FakeRouter.workers[WORKER]["is_healthy"]  # back in


def test_an_unreachable_router_takes_nothing_out_and_puts_the_files_back(server, tmp_path, capsys):
    code = rotation.main(
        _args(
            "http://127.0.0.1:9",
            server,
            "--cycle",
            _command(tmp_path, "cycle", {"status": 0}),
            "--restore",
            _command(tmp_path, "restore", {"status": 0}),
        )
    )
    found = _found(capsys)
    assert code == status.PREFLIGHT_FAILED and found["outcome"] == "router_unreachable"
    assert _ran(tmp_path) == ["restore"] and found["restored"] is True
    assert "nothing was taken out of rotation" in found["cause"]


def test_out_only_drains_and_restarts_nothing(router, server, capsys):  # noqa: F811
    code = rotation.main(_args(router, server, "--only", "out"))
    found = _found(capsys)
    assert code == status.READY and found["outcome"] == "out"
    assert found["rotation"]["was_serving"] and found["rotation"]["drained"]
    assert WORKER not in FakeRouter.workers  # out of the router
    assert rotation.main(_args(router, server, "--only", "back")) == status.READY
    assert FakeRouter.workers[WORKER]["is_healthy"]


def test_out_only_refuses_with_an_unreachable_router_and_restores_nothing(server, tmp_path, capsys):
    code = rotation.main(_args("http://127.0.0.1:9", server, "--only", "out"))
    found = _found(capsys)
    assert code == status.PREFLIGHT_FAILED and found["outcome"] == "router_unreachable"
    assert "restored" not in found


def test_a_node_that_does_not_serve_is_in_no_rotation(router, tmp_path, capsys):  # noqa: F811
    code = rotation.main(_args(router, 9, "--only", "out"))
    found = _found(capsys)
    assert code == status.READY and found["rotation"]["was_serving"] is False
    assert WORKER in FakeRouter.workers  # nothing removed


def test_back_only_names_a_router_that_does_not_take_it_back(server, capsys):
    code = rotation.main(
        [
            "--worker-url",
            WORKER,
            "--local-port",
            str(server),
            "--router",
            "http://127.0.0.1:9",
            "--healthy-timeout",
            "1",
            "--only",
            "back",
        ]
    )
    found = _found(capsys)
    assert code == status.TIMEOUT and "http://127.0.0.1:9" in found["cause"]


def test_back_only_leaves_a_node_that_does_not_serve_out_of_rotation(router, capsys):  # noqa: F811
    del FakeRouter.workers[WORKER]
    code = rotation.main(_args(router, 9, "--only", "back"))
    assert code == status.FAILED_START and "left out of rotation" in _found(capsys)["cause"]
    assert WORKER not in FakeRouter.workers


def test_the_whole_rotation_needs_its_cycle_and_restore():
    with pytest.raises(SystemExit):
        rotation.main(["--worker-url", WORKER, "--local-port", "9"])


@pytest.mark.parametrize(
    "unread, why",
    [
        ((404, b""), "/get_load answered HTTP 404"),
        ((503, b"busy"), "/get_load answered HTTP 503"),
        ((200, b"{}"), "/get_load: no num_reqs in the answer: {}"),
        ((200, b"<html>"), "/get_load answered no JSON"),
    ],
)
def test_a_load_that_cannot_be_read_is_not_drained(router, server, tmp_path, capsys, unread, why):  # noqa: F811
    # Waited for up to the drain timeout (requests get the time the operator allowed them), then
    # said and restarted anyway, as with requests still in flight.
    FakeServer.in_flight, FakeServer.unread = [None], unread
    cycle = _command(tmp_path, "cycle", {"status": 0, "outcome": "served", "steps": []})
    restore = _command(tmp_path, "restore", {"status": 0})
    code = rotation.main(
        _args(router, server, "--drain-timeout", "1", "--cycle", cycle, "--restore", restore)
    )
    out = capsys.readouterr().out.splitlines()
    found = result.parse(out)
    turn = found["rotation"]
    assert turn["drained"] is False and turn["in_flight_left"] is None and turn["load_unknown"] == why
    assert turn["drain_s"] >= 1.0 and FakeServer.loads_seen > 1  # asked again until the timeout
    assert "rotation: load unknown: %s (for 1s): restarting anyway" % why in result.progress(out)
    assert code == status.READY and _ran(tmp_path) == ["cycle"]
    assert FakeRouter.workers[WORKER]["is_healthy"]  # back in once it serves


def test_a_load_unreadable_for_a_moment_is_waited_for(server):
    FakeServer.in_flight = [None, None, 1, 0]
    waited, left, unknown = rotation.drain(server, timeout=5, interval=0.05)
    assert left == 0 and unknown is None and FakeServer.loads_seen == 4


def test_a_server_bound_to_one_address_is_asked_and_drained_there(router, bound_server, capsys):  # noqa: F811
    """service.host 127.0.0.2 (127.0.0.1 refuses): with the command lines the controller builds
    (Rotation, given service.probe_host) the node's /ping and /get_load are asked there: it is
    serving, taken out, drained, and put back."""
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", bound_server), timeout=2).close()
    turn = Rotation(
        WORKER, bound_server, [router], settings_of(deploy_defaults()).rolling, local_host="127.0.0.2"
    )
    code = rotation.main(shlex.split(turn.out("/opt/d/node"))[2:])
    found = _found(capsys)
    assert code == status.READY and found["rotation"]["was_serving"] and found["rotation"]["drained"]
    assert FakeServer.loads_seen >= 3 and WORKER not in FakeRouter.workers  # waited for 2, 1, 0
    assert rotation.main(shlex.split(turn.back("/opt/d/node"))[2:]) == status.READY
    assert FakeRouter.workers[WORKER]["is_healthy"]
    waited, left, unknown = rotation.drain(bound_server, timeout=1, interval=0.05, host="127.0.0.2")
    assert left == 0 and unknown is None


def test_a_load_nobody_answers_is_unknown():
    waited, left, unknown = rotation.drain(9, timeout=0.3, interval=0.05)
    assert left is None and "refused" in unknown.lower() and waited >= 0.3


def test_in_flight_counts_only_answers_with_a_load():
    assert rotation.in_flight([{"dp_rank": 0, "num_reqs": 2, "num_waiting_reqs": 1, "num_tokens": 0}]) == 3
    for answer in ({}, [], "ok", [{"dp_rank": 0}]):
        with pytest.raises(ValueError):
            rotation.in_flight(answer)


# ------------------------------------------------- the in-rotation sample (node/lib/textfile.py)


def _exported(tmp_path):
    """rotation.py's flags for the node's in-rotation sample, in tmp_path/textfile."""
    return [
        "--textfile-service",
        "sglang",
        "--textfile-port",
        "30000",
        "--textfile-dir",
        str(tmp_path / "textfile"),
    ]


def _sample(tmp_path):
    """The in-rotation sample the node exports ("absent" without its file)."""
    path = tmp_path / "textfile" / "sglang-deploy-sglang@rotation.prom"
    if not path.exists():
        return "absent"
    (line,) = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    assert line.startswith('sglang_deploy_in_rotation{engine_port="30000",service="sglang"} ')
    return float(line.split()[-1])


def _seeing(tmp_path, line):
    """A restart cycle that notes the in-rotation sample exported while it runs, then prints ``line``."""
    path = tmp_path / "textfile" / "sglang-deploy-sglang@rotation.prom"
    code = (
        f"import json, os, sys; p = {str(path)!r}; "
        "seen = open(p).read().split()[-1] if os.path.exists(p) else 'absent'; "
        f"open({str(tmp_path / 'ran')!r}, 'a').write('cycle:' + seen + '\\n'); "
        f"line = {json.dumps(line)!r}; print(line); sys.exit(json.loads(line)['status'])"
    )
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}"


def _rotate(tmp_path, router_url, port, outcome, status_code=0):
    cycle = _seeing(tmp_path, {"status": status_code, "outcome": outcome, "steps": []})
    restore = _command(tmp_path, "restore", {"status": 0})
    return rotation.main(
        [*_args(router_url, port, "--cycle", cycle, "--restore", restore), *_exported(tmp_path)]
    )


def test_the_sample_is_out_while_it_restarts_and_in_once_back(router, server, tmp_path):  # noqa: F811
    assert _rotate(tmp_path, router, server, "served") == status.READY
    assert _ran(tmp_path) == ["cycle:0.0"]  # out of rotation, said before the restart
    assert _sample(tmp_path) == 1.0 and FakeRouter.workers[WORKER]["is_healthy"]


@pytest.mark.parametrize(
    "case",
    [
        ("rolled_back", status.FAILED_START, 1.0),  # serves the last known good: back in
        ("preflight_failed", status.PREFLIGHT_FAILED, 1.0),  # never stopped: back in
        ("regressed", status.THROUGHPUT_REGRESSION, 1.0),
        ("failed", status.FAILED_START, 0.0),  # serves nothing: left out
        ("rollback_failed", status.FAILED_START, 0.0),
    ],
)
def test_after_the_cycle_the_sample_says_whether_it_went_back(router, server, tmp_path, case):  # noqa: F811
    outcome, code, after = case
    _rotate(tmp_path, router, server, outcome, code)
    assert _ran(tmp_path) == ["cycle:0.0"] and _sample(tmp_path) == after
    assert (WORKER in FakeRouter.workers) == (after == 1.0)


def test_a_cycle_that_prints_no_result_leaves_the_sample_out(router, server, tmp_path):  # noqa: F811
    cycle = f"{shlex.quote(sys.executable)} -c 'import sys; sys.exit(3)'"
    restore = _command(tmp_path, "restore", {"status": 0})
    rotation.main([*_args(router, server, "--cycle", cycle, "--restore", restore), *_exported(tmp_path)])
    assert _sample(tmp_path) == 0.0 and WORKER not in FakeRouter.workers


def _left_sample(tmp_path, value):
    """The sample as an earlier rotation left it."""
    args = argparse.Namespace(
        textfile_service="sglang", textfile_port=30000, textfile_dir=str(tmp_path / "textfile")
    )
    assert textfile.export(args, "in_rotation", value) is True


def test_a_refused_rotation_changes_no_sample(server, tmp_path):
    _rotate(tmp_path, "http://127.0.0.1:9", server, "served")  # unreachable: nothing left a router
    assert _sample(tmp_path) == "absent" and _ran(tmp_path) == ["restore"]
    _left_sample(tmp_path, 1)  # in rotation before: still in, and still said so
    _rotate(tmp_path, "http://127.0.0.1:9", server, "served")
    assert _sample(tmp_path) == 1.0


def test_the_last_routable_worker_of_its_model_keeps_its_sample(router, server, tmp_path):  # noqa: F811
    FakeRouter.workers["http://10.0.0.12:30000"]["is_healthy"] = False
    cycle = _seeing(tmp_path, {"status": 0, "outcome": "served", "steps": []})
    restore = _command(tmp_path, "restore", {"status": 0})
    argv = _args(router, server, "--healthy-timeout", "0.3", "--cycle", cycle, "--restore", restore)
    assert rotation.main([*argv, *_exported(tmp_path)]) == status.PREFLIGHT_FAILED
    assert _sample(tmp_path) == "absent" and _ran(tmp_path) == ["restore"]


def test_a_node_that_did_not_serve_is_out_until_it_serves(router, tmp_path):  # noqa: F811
    # Port 9 answers no /ping: the node serves nothing, so it is in no rotation.
    _rotate(tmp_path, router, 9, "failed", status.FAILED_START)
    assert _ran(tmp_path) == ["cycle:0.0"] and _sample(tmp_path) == 0.0


def test_out_only_and_back_only_say_out_then_in(router, server, tmp_path):  # noqa: F811
    assert rotation.main([*_args(router, server, "--only", "out"), *_exported(tmp_path)]) == status.READY
    assert _sample(tmp_path) == 0.0
    assert rotation.main([*_args(router, server, "--only", "back"), *_exported(tmp_path)]) == status.READY
    assert _sample(tmp_path) == 1.0


def test_back_only_that_a_router_refuses_or_that_does_not_serve_stays_out(router, server, tmp_path):  # noqa: F811
    rotation.main([*_args(router, server, "--only", "out"), *_exported(tmp_path)])
    unreachable = _args("http://127.0.0.1:9", server, "--healthy-timeout", "0.5", "--only", "back")
    assert rotation.main([*unreachable, *_exported(tmp_path)]) == status.TIMEOUT
    assert _sample(tmp_path) == 0.0
    (tmp_path / "textfile" / "sglang-deploy-sglang@rotation.prom").unlink()
    assert rotation.main([*_args(router, 9, "--only", "back"), *_exported(tmp_path)]) == status.FAILED_START
    assert _sample(tmp_path) == 0.0


def test_behind_no_router_there_is_no_sample_and_one_left_from_routers_goes(server, tmp_path):
    _left_sample(tmp_path, 0)  # out of a router the inventory no longer names
    assert _rotate(tmp_path, None, server, "served") == status.READY
    assert _sample(tmp_path) == "absent"
    assert _rotate(tmp_path, None, server, "failed", status.FAILED_START) == status.FAILED_START
    assert _sample(tmp_path) == "absent"  # nor a 0 that would alert


def test_without_its_flags_rotation_writes_no_sample(router, server, tmp_path):  # noqa: F811
    cycle = _command(tmp_path, "cycle", {"status": 0, "outcome": "served", "steps": []})
    restore = _command(tmp_path, "restore", {"status": 0})
    argv = _args(router, server, "--cycle", cycle, "--restore", restore)
    assert rotation.main([*argv, "--textfile-dir", str(tmp_path / "textfile")]) == status.READY
    assert not (tmp_path / "textfile").exists()
