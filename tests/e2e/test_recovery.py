"""Recovering from what a deploy can leave behind on a sandbox node: a deploy killed while its
gate waited, and a server port held by something the node cannot see."""

import socket

import pytest

from sglang_deploy.node.lib import result

from .sandbox import (  # noqa: F401 (a fixture)
    deploy,
    env_values,
    nodes,
    profile_dir,
    ssh,
    start_deploy,
    unit_start,
    wait_for_output,
    wipe,
    write_profile,
)

pytestmark = pytest.mark.e2e

NODE = {"node1": "sandbox"}
LAST_GOOD = "python3 /opt/sglang-deploy/node/lastgood.py show --dir /var/lib/sglang-deploy/sglang/last-good"


@pytest.fixture(scope="module")
def converged():
    wipe("node1")
    run = deploy(NODE, limit="node1")
    assert run.returncode == 0, run.output[-5000:]
    return run


def last_good():
    return result.parse(ssh("node1", LAST_GOOD).splitlines())["manifest"]["profile"]


def test_a_rerun_after_a_killed_deploy_records_what_serves(converged, profile_dir):
    assert last_good() == "sandbox"
    slow = write_profile(
        profile_dir,
        "recovered",
        """
        extends: {profiles}/sandbox.yml
        env:
          SGLANG_STANDIN_LOAD_SECONDS: 15
    """,
    )
    first = start_deploy({"node1": slow}, limit="node1")
    try:
        wait_for_output(first, "phase: loading weights", timeout=90)
    finally:
        first.kill()  # mid-gate, as an operator's laptop might die
        first.wait()
    started = unit_start("node1")
    rerun = deploy({"node1": slow}, limit="node1")
    assert rerun.returncode == 0, rerun.output[-5000:]
    assert unit_start("node1") == started, "the re-run restarted the server"
    # The killed run's restart cycle, detached from its session, went on: the re-run waits
    # for it (following its progress: gate, decode check, record) and says how it ended.
    assert "served recovered" in rerun.output and "the restart of the previous run" in rerun.output, (
        rerun.output[-5000:]
    )
    assert "decode check: " in rerun.output  # measured before it became the last known good
    assert last_good() == "recovered"
    # Recorded once: a further re-run changes nothing.
    again = deploy({"node1": slow}, limit="node1")
    assert again.returncode == 0 and again.changed == 0, again.output[-5000:]
    # A failing change now rolls back to the recovered configuration, not the older one.
    crashing = write_profile(
        profile_dir,
        "crash",
        """
        extends: {profiles}/sandbox.yml
        env:
          SGLANG_STANDIN_FAIL: cuda-oom
    """,
    )
    run = deploy({"node1": crashing}, limit="node1")
    assert run.returncode != 0
    assert "rolled back: serving recovered again" in run.output, run.output[-5000:]
    env = env_values("node1")
    assert env["SGLANG_STANDIN_LOAD_SECONDS"] == "15" and "SGLANG_STANDIN_FAIL" not in env
    assert deploy(NODE, limit="node1").returncode == 0


def test_a_port_held_outside_the_node_fails_preflight_in_seconds(converged, profile_dir):
    # The sandbox nodes share the host's network: a socket of this test process is a listener
    # that no process on node1 owns, as another container's or namespace's would be.
    port = nodes()[1]["node1"]["server_port"]
    ssh("node1", "systemctl stop sglang.service")
    before = unit_start("node1")
    changed = write_profile(
        profile_dir,
        "changed",
        """
        extends: {profiles}/sandbox.yml
        env:
          NCCL_NTHREADS: 128
    """,
    )
    with socket.socket() as held:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind(("127.0.0.1", port))
        held.listen()
        run = deploy({"node1": changed}, limit="node1")
    assert run.returncode != 0
    assert "[node1] preflight failed" in run.output, run.output[-5000:]
    assert (
        f"port {port} is listening but no process on this node owns it "
        "(another network namespace or container?)"
    ) in run.output, run.output[-5000:]
    assert run.seconds < 60, f"took {run.seconds:.0f}s"
    print(f"preflight refused a foreign port holder: {run.seconds:.1f}s")
    assert unit_start("node1") == before, "the server was touched"
    assert env_values("node1").get("NCCL_NTHREADS") != "128"
    assert deploy(NODE, limit="node1").returncode == 0
