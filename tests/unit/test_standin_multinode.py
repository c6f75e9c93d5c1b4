"""The stand-in across nodes, as SGLang 0.5.23 behaves with --nnodes 2: two stand-in "nodes" as
local processes on 127.0.0.1 (different API ports, one --dist-init-addr), no systemd.

Rank 0 waits in "Init parallel" (API port closed) until the follower joined; the follower serves
only a dummy /health on its --port once its schedulers are ready, ignores SIGTERM and stops on
rank 0's shutdown broadcast (a SIGTERM to every process, as systemctl stop sends it, kills the
schedulers instead); a follower that never joins, or fails, makes rank 0 fail with
torch's words (tests/unit/captured/torch_2.13_*). Every process started here is killed at
teardown.
"""

import os
import re
import signal
import socket
import time
from pathlib import Path

import pytest
from test_standin_server import Standin, cmdline, free_port, standins, with_hook  # noqa: F401 (fixture)

from sglang_deploy.node import group_join
from sglang_deploy.node.lib import env_records, sglang_log

FAST = {"SGLANG_STANDIN_LOAD_SECONDS": "0.4", "SGLANG_STANDIN_WARMUP_SECONDS": "0.2"}


def node_args(rank, dist_port, nnodes=2):
    return ["--nnodes", str(nnodes), "--node-rank", str(rank), "--dist-init-addr", f"127.0.0.1:{dist_port}"]


def status_of(s, path="/health"):
    """The HTTP status of GET path, or None while the port is closed."""
    if not s.port_open():
        return None
    try:
        return s.request("GET", path, timeout=5)[0]
    except OSError:
        return None


@pytest.fixture
def nodes(standins):
    def start(rank, dist_port, env=None, **kwargs):
        return standins(node_args(rank, dist_port), env=dict(FAST, **(env or {})), **kwargs)

    return start


# ====================================================================== a group that serves
@pytest.fixture(scope="module")
def group(tmp_path_factory):
    """Rank 0 started alone; the follower joins a moment later (started by the first test)."""
    workdir = tmp_path_factory.mktemp("group")
    dist_port = free_port()
    rank0 = Standin(workdir, node_args(0, dist_port), env=FAST, tp=4)
    found = {"rank0": rank0, "dist_port": dist_port, "workdir": workdir}
    yield found
    for s in (found.get("follower"), rank0):
        if s is not None:
            s.kill()


def test_rank0_waits_for_the_follower_with_its_port_closed(group):
    rank0 = group["rank0"]
    assert rank0.wait_log("TP0] Init parallel begin.")
    time.sleep(0.8)  # longer than the whole load: rank 0 is still waiting
    assert "Load weight begin" not in rank0.log()
    assert not rank0.port_open()
    # A port probe (what dist_reach.py does) is no rank: rank 0 keeps waiting, unharmed.
    with socket.create_connection(("127.0.0.1", group["dist_port"]), timeout=2):
        pass
    assert rank0.proc.poll() is None
    found = group_join.assess(rank0.log().splitlines(), nnodes=2, tp_size=4)
    assert (found["state"], found["missing"]) == ("waiting", [1])

    hooked, group["records"] = with_hook(
        group["workdir"], {"STANDIN_TEST_MARKER": "follower-unit-env", "CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    )
    follower = group["follower"] = Standin(
        group["workdir"],
        node_args(1, group["dist_port"]),
        tp=4,
        env=dict(FAST, STANDIN_TEST_MARKER="follower-unit-env", **hooked),
    )
    assert rank0.wait_log("TP0] Load weight begin", timeout=15)
    assert follower.wait_log("TP3] Load weight begin", timeout=5)
    # The follower's dummy /health turns 200 before rank 0 serves: it proves nothing about the group.
    assert follower.wait_for(lambda: status_of(follower) == 200, timeout=15, interval=0.01)
    assert status_of(rank0) in (None, 503)
    assert rank0.wait_log("The server is fired up and ready to roll!", timeout=15)
    assert group_join.assess(rank0.log().splitlines(), 2, 4)["state"] == "joined"


def test_follower_serves_only_the_dummy_health_endpoints(group):
    follower = group["follower"]
    for path in ("/health", "/health_generate", "/ping"):
        assert follower.request("GET", path)[0] == 200
    assert follower.request("GET", "/v1/models")[0] == 404
    # --tp-size 4 over 2 nodes: global ranks 2 and 3 here, spawned with the launcher's environment.
    schedulers = {cmdline(pid): pid for pid in follower.descendants() if "scheduler" in cmdline(pid)}
    assert set(schedulers) == {"sglang::scheduler_TP2", "sglang::scheduler_TP3"}
    assert "sglang::detokenizer" not in {cmdline(pid) for pid in follower.descendants()}
    for pid in schedulers.values():
        assert not Path(f"/proc/{pid}/environ").read_bytes().strip(b"\0")  # titled: blank, as on SGLang
        environ = env_records.read(group["records"], pid)
        assert environ["STANDIN_TEST_MARKER"] == "follower-unit-env"
        assert environ["CUDA_DEVICE_MAX_CONNECTIONS"] == "8"  # the launcher's, over the hook's
    log = follower.log()
    assert f"Dummy health check server started in background thread at 127.0.0.1:{follower.port}" in log
    assert "Uvicorn running on" not in log and '"GET /health HTTP/1.1"' not in log  # log level warning
    assert "The server is fired up" not in log


def test_sigterm_to_the_follower_is_ignored(group):
    follower = group["follower"]
    follower.proc.send_signal(signal.SIGTERM)
    assert follower.wait_log(
        "SIGTERM received on node_rank 1; waiting for the rank-0 ShutdownReq "
        "broadcast to stop the schedulers."
    )
    time.sleep(1.0)
    assert follower.proc.poll() is None and follower.request("GET", "/health")[0] == 200


def test_sigterm_to_rank0_stops_both(group):
    """SIGTERM to rank 0's launcher alone: its next 5-s look, the ShutdownReq broadcast, and
    every scheduler of both nodes exits 0."""
    rank0, follower = group["rank0"], group["follower"]
    started = time.monotonic()
    rank0.proc.send_signal(signal.SIGTERM)
    assert rank0.wait_exit(timeout=10) == 0
    assert follower.wait_exit(timeout=10) == 0
    took = time.monotonic() - started
    assert took < 6.0, f"stopping the group through rank 0 took {took:.2f} s"
    assert "Gracefully exiting... Remaining number of requests 0." in rank0.log()
    assert len(re.findall(r"Scheduler or DataParallelController \d+ terminated with 0", follower.log())) == 2
    assert f"kill_process_tree called: parent_pid={follower.pid}, include_parent=False" in follower.log()
    assert not rank0.leftovers() and not follower.leftovers()


def test_systemctl_stop_of_rank0_fails_the_follower(nodes):
    """KillMode=control-group (the deploy's unit before; its stop now reaches the launcher only:
    test_sigterm_to_rank0_stops_both): rank 0's schedulers die of the stop's SIGTERM before any
    ShutdownReq, so the follower loses its peer instead of being told to stop."""
    dist_port = free_port()
    rank0, follower = nodes(0, dist_port), nodes(1, dist_port)
    assert rank0.wait_log("fired up", timeout=20)
    started = time.monotonic()
    os.killpg(rank0.pid, signal.SIGTERM)
    assert rank0.wait_exit(timeout=5) == -signal.SIGKILL  # its SIGQUIT handler, as SGLang's
    assert follower.wait_exit(timeout=5) == -signal.SIGKILL
    assert time.monotonic() - started < 2.0
    assert re.search(r"Subprocess scheduler_0 \(pid=\d+\) crashed with exit code -15", rank0.log())
    assert "Connection reset by peer" in follower.log()
    assert "Received sigquit from a child process" in follower.log()
    assert not rank0.leftovers() and not follower.leftovers()


def test_systemctl_stop_of_the_follower_ends_it_at_once_and_fails_rank0(nodes):
    """KillMode=control-group: the follower's launcher ignores SIGTERM but its schedulers (no
    handler, as in SGLang) die of it; the launcher returns (exit 0), rank 0 loses the rank."""
    dist_port = free_port()
    rank0, follower = nodes(0, dist_port), nodes(1, dist_port)
    assert rank0.wait_log("fired up", timeout=20)
    started = time.monotonic()
    os.killpg(follower.pid, signal.SIGTERM)
    assert follower.wait_exit(timeout=5) == 0
    assert time.monotonic() - started < 1.0
    log = follower.log()
    assert "SIGTERM received on node_rank 1; waiting for the rank-0 ShutdownReq" in log
    assert re.search(r"Scheduler or DataParallelController \d+ terminated with -15", log)
    assert rank0.wait_exit(timeout=5) == -signal.SIGKILL
    assert "Connection closed by peer" in rank0.log()
    assert not rank0.leftovers() and not follower.leftovers()


# ====================================================================== failures
def test_follower_whose_port_is_taken_still_joins_without_a_health_endpoint(nodes):
    # 0.5.23 runs the dummy server in a thread: uvicorn's bind error ends the thread, not the node.
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        dist_port = free_port()
        rank0 = nodes(0, dist_port)
        follower = nodes(1, dist_port, port=blocker.getsockname()[1])
        assert rank0.wait_log("The server is fired up and ready to roll!", timeout=20)
        assert follower.wait_log(f"Dummy health check server stopped at 127.0.0.1:{follower.port}")
        assert "error while attempting to bind on address" in follower.log()
        assert follower.proc.poll() is None


def test_follower_that_never_joins_fails_rank0_after_the_timeout(nodes):
    rank0 = nodes(0, free_port(), env={"SGLANG_STANDIN_DIST_TIMEOUT_SECONDS": "1"})
    assert rank0.wait_log("TP0] Init parallel begin.")
    started = time.monotonic()
    assert rank0.wait_exit(timeout=10) == 1
    assert 1.5 < time.monotonic() - started < 4.0  # torch waits the timeout + 1 s
    log = rank0.log()
    assert "Scheduler hit an exception: Traceback" in log
    assert (
        "torch.distributed.DistStoreError: Timed out after 2 seconds waiting for clients. 1/2 clients joined."
    ) in log
    assert "Received sigquit from a child process. It usually means the child failed." in log
    assert "Load weight begin" not in log and not rank0.leftovers()
    found = group_join.assess(log.splitlines(), nnodes=2, tp_size=2)
    assert found["cause"] == "rank 0 gave up after 2 s, 1/2 ranks joined: node-rank 1 has not joined"
    assert sglang_log.cause_of(log.splitlines())[0] == "group-incomplete"


def test_without_dist_init_addr_the_nodes_never_meet(tmp_path):
    # 0.5.23 accepts the argv; each node's ranks wait at their own --host:<random port>.
    env = dict(FAST, SGLANG_STANDIN_DIST_TIMEOUT_SECONDS="1")
    argv = ["--nnodes", "2", "--host", "0.0.0.0"]
    rank0 = Standin(tmp_path, argv + ["--node-rank", "0"], env=env)
    follower = Standin(tmp_path, argv + ["--node-rank", "1"], env=env)
    try:
        assert rank0.wait_exit(timeout=10) == 1 and follower.wait_exit(timeout=10) == 1
        assert "1/2 clients joined." in rank0.log()
        assert re.search(
            r"DistNetworkError: The client socket has timed out after 1000ms while "
            r"trying to connect to \(0\.0\.0\.0, \d+\)\.",
            follower.log(),
        )
    finally:
        rank0.kill()
        follower.kill()


def test_follower_without_rank0_fails_after_the_timeout(nodes):
    dist_port = free_port()
    follower = nodes(1, dist_port, env={"SGLANG_STANDIN_DIST_TIMEOUT_SECONDS": "1"})
    assert follower.wait_exit(timeout=10) == 1
    assert (
        "torch.distributed.DistNetworkError: The client socket has timed out after 1000ms while "
        f"trying to connect to (127.0.0.1, {dist_port})."
    ) in follower.log()
    assert not follower.port_open()
    assert (
        group_join.follower_evidence(follower.log().splitlines(), 1, 1)
        == f"unreachable: 127.0.0.1:{dist_port}"
    )


def test_failure_injected_on_rank1_is_reported_by_rank0(nodes):
    # Both nodes get the same environment, as from one profile; only node rank 1 fails.
    env = {"SGLANG_STANDIN_FAIL": "crash-load", "SGLANG_STANDIN_FAIL_RANK": "1"}
    dist_port = free_port()
    rank0, follower = nodes(0, dist_port, env=env), nodes(1, dist_port, env=env)
    assert follower.wait_exit(timeout=15) == 1
    assert "safetensors_rust.SafetensorError" in follower.log()
    assert rank0.wait_exit(timeout=15) == 1
    log = rank0.log()
    assert "SafetensorError" not in log
    assert re.search(
        r"RuntimeError: \[\S+gloo/transport/tcp/pair\.cc:553\] Connection closed by peer "
        r"\[127\.0\.0\.1\]:\d+\. This is typically caused by a remote worker crashing\.",
        log,
    )
    assert "Rank 0 scheduler died during initialization (exit code: 1)" in log
    assert not rank0.port_open() and not rank0.leftovers()
    found = group_join.assess(log.splitlines(), 2, 2, follower_hosts={1: "127.0.0.1"})
    assert (found["state"], found["missing"]) == ("lost", [1])
    assert sglang_log.cause_of(log.splitlines())[0] == "group-peer-lost"


def test_follower_scheduler_dying_after_ready_fails_rank0(nodes):
    env = {
        "SGLANG_STANDIN_FAIL": "scheduler-dies-after-ready",
        "SGLANG_STANDIN_FAIL_RANK": "1",
        "SGLANG_STANDIN_FAIL_AFTER_SECONDS": "0.5",
    }
    dist_port = free_port()
    rank0, follower = nodes(0, dist_port, env=env), nodes(1, dist_port, env=env)
    assert rank0.wait_exit(timeout=20) == -signal.SIGKILL
    assert "Connection closed by peer" in rank0.log()
    # The wording says whether the warmup's first request had come (running-phase handler).
    assert re.search(
        r"SIGQUIT received\. signum=None, frame=None\. It usually means one child failed\."
        r"|Received sigquit from a child process\. It usually means the child failed\.",
        rank0.log(),
    )
    # 0.5.23's follower logs its scheduler's end and returns: exit 0 even for a SIGKILL.
    assert follower.wait_exit(timeout=10) == 0
    assert re.search(r"Scheduler or DataParallelController \d+ terminated with -9", follower.log())


def test_rank0_stopped_while_loading_takes_the_follower_down(nodes):
    dist_port = free_port()
    env = {"SGLANG_STANDIN_LOAD_SECONDS": "3"}
    rank0, follower = nodes(0, dist_port, env=env), nodes(1, dist_port, env=env)
    assert follower.wait_log("TP1] Load weight begin", timeout=15)
    rank0.proc.send_signal(signal.SIGTERM)
    assert rank0.wait_exit(timeout=5) == -signal.SIGTERM  # no SIGTERM handler while loading
    # No ShutdownReq before ready: the follower loses its peer at its next collective.
    assert follower.wait_exit(timeout=10) == 1
    assert "Connection reset by peer" in follower.log()
    assert "Received sigquit from a child process" in follower.log()
