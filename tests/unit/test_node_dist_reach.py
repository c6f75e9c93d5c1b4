"""dist_reach.py: a follower's real TCP connect to rank 0's --dist-init-addr, one result line."""

import errno
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sglang_deploy.node import dist_reach
from sglang_deploy.node.lib import status

SCRIPT = Path(dist_reach.__file__)


def run(*args):
    """The script as the node runs it: python3 dist_reach.py ... -> (exit status, result, lines)."""
    out = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=30)
    lines = out.stdout.splitlines()
    return out.returncode, json.loads(lines[-1]), lines[:-1]


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket is closed


def test_a_listening_port_is_reached():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        code, res, lines = run("--addr", f"127.0.0.1:{port}", "--node-rank", "1")
    assert code == status.READY == res["status"] and res["cause"] is None
    assert res["reachable"] is True and res["attempts"] == 1 and res["port"] == port
    assert lines == [lines[0]] and lines[0].startswith(f"node-rank 1 reaches 127.0.0.1:{port} (")


def test_a_closed_port_is_refused_until_the_timeout():
    port = closed_port()
    started = time.monotonic()
    code, res, lines = run(
        "--addr", f"127.0.0.1:{port}", "--node-rank", "1", "--timeout", "0.6", "--interval", "0.1"
    )
    assert 0.6 <= time.monotonic() - started < 5
    assert code == status.PREFLIGHT_FAILED == res["status"]
    assert res["cause"] == f"node-rank 1 cannot reach 127.0.0.1:{port}: connection refused after 0.6 s"
    assert res["reachable"] is False and res["attempts"] > 3 and res["error"] == "connection refused"
    assert lines == [res["cause"]]


def test_rank0_coming_up_within_the_timeout_is_reached():
    port = closed_port()
    listener = socket.socket()

    def listen_later():
        time.sleep(0.4)
        listener.bind(("127.0.0.1", port))
        listener.listen()

    threading.Thread(target=listen_later, daemon=True).start()
    try:
        error, attempts, elapsed = dist_reach.reach("127.0.0.1", port, timeout=5, interval=0.1)
    finally:
        listener.close()
    assert error is None and attempts > 1 and 0.3 < elapsed < 5


def test_causes_in_words():
    assert dist_reach.reason_of(TimeoutError("timed out")).startswith("timed out (no answer")
    assert dist_reach.reason_of(OSError(errno.EHOSTUNREACH, "No route to host")) == "no route to host"
    assert (
        dist_reach.reason_of(socket.gaierror(-2, "Name or service not known"))
        == "cannot resolve the host name (Name or service not known)"
    )


def test_an_unresolvable_host_fails_at_once():
    code, res, _ = run("--addr", "no-such-host.invalid:5000", "--node-rank", "2", "--timeout", "5")
    assert code == status.PREFLIGHT_FAILED and res["attempts"] == 1
    assert res["cause"].startswith("node-rank 2 cannot reach no-such-host.invalid:5000: cannot resolve")


@pytest.mark.parametrize(
    "addr, expected", [("10.0.0.1:5000", ("10.0.0.1", 5000)), ("[fd00::1]:5000", ("fd00::1", 5000))]
)
def test_split_addr(addr, expected):
    assert dist_reach.split_addr(addr) == expected


@pytest.mark.parametrize("addr", ["10.0.0.1", "10.0.0.1:", ":5000", "h:99999", "h:port"])
def test_a_bad_addr_is_a_usage_error(addr):
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--addr", addr, "--node-rank", "1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == status.USAGE and "--addr: not HOST:PORT" in out.stderr


def test_a_moved_port_is_probed_where_rank_0_listens_now_and_said_so():
    """The change moves the dist-init port: nothing listens on the new one until the group
    restarts onto it; rank 0's host is probed on the port it listens on now."""
    new = closed_port()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        now = listener.getsockname()[1]
        code, res, lines = run("--addr", f"127.0.0.1:{new}", "--node-rank", "1", "--listening-port", str(now))
    assert code == status.READY == res["status"]
    assert (res["port"], res["planned_port"], res["reachable"]) == (now, new, True)
    assert lines[0] == (
        f"rank 0 listens on port {now} until the group restarts onto port {new}: "
        f"probing {now} (port {new} is first reached by the group's start)"
    )
    assert lines[1].startswith(f"node-rank 1 reaches 127.0.0.1:{now} (")


def test_a_moved_port_rank_0_does_not_listen_on_fails_naming_both_ports():
    new, now = closed_port(), closed_port()
    code, res, _ = run(
        "--addr", f"127.0.0.1:{new}", "--node-rank", "1", "--listening-port", str(now), "--timeout", "0.3"
    )
    assert code == status.PREFLIGHT_FAILED
    assert res["cause"].startswith(
        f"node-rank 1 cannot reach 127.0.0.1:{now} (rank 0's dist-init port "
        f"until the restart moves it to {new}): connection refused"
    )


def test_the_same_port_is_probed_as_planned():
    port = closed_port()
    code, res, _ = run(
        "--addr", f"127.0.0.1:{port}", "--node-rank", "1", "--listening-port", str(port), "--timeout", "0.2"
    )
    assert code == status.PREFLIGHT_FAILED and res["port"] == port and "planned_port" not in res
    assert res["cause"].startswith(f"node-rank 1 cannot reach 127.0.0.1:{port}: connection refused")


@pytest.mark.parametrize(
    "argv, port",
    [
        (
            ["python3", "-m", "sglang.launch_server", "--nnodes", "2", "--dist-init-addr", "10.0.0.1:20000"],
            20000,
        ),
        (["sglang", "serve", "--dist-init-addr=[fd00::1]:31001"], 31001),
        (["python3", "-m", "sglang.launch_server", "--port", "30000"], None),
        (["python3", "--dist-init-addr"], None),
        (["python3", "--dist-init-addr", "10.0.0.1"], None),
    ],
)
def test_the_dist_init_port_of_a_running_argv(argv, port):
    assert dist_reach.dist_init_port_of(argv) == port
