"""A controller killed (kill -9) in the middle of a restart, on sandbox node1: the restart cycle
runs on the node detached from the deploy's SSH session (node/detach.py), so it ends there on
its own: the node serves the new configuration (its gate passed) or the old one (rolled back),
and — behind a router — is back in rotation. The next run says what happened and carries on.

    make sandbox NODES=1 && python3 -m pytest -m e2e tests/e2e/test_controller_dies.py
    python3 sandbox/sandbox.py up --nodes 3 --routers 1 && python3 -m pytest -m fleet tests/e2e/test_controller_dies.py
"""

import time

import pytest

from sglang_deploy.node.lib import result

from .sandbox import (  # noqa: F401 (a fixture)
    deploy,
    env_values,
    profile_dir,
    ssh,
    start_deploy,
    wait_for_output,
    wipe,
    write_profile,
)

pytestmark = pytest.mark.e2e

NODE = {"node1": "sandbox"}
LAST_GOOD = "python3 /opt/sglang-deploy/node/lastgood.py show --dir /var/lib/sglang-deploy/sglang/last-good"
CYCLES = "systemctl list-units --all --plain --no-legend 'sglang-deploy-cycle-sglang-*'"
# name: (the deploy's output line to kill it at, the profile's additions, whether its gate passes)
MOMENTS = {
    "after_stop": ("systemctl stop returned", "env:\n  SGLANG_STANDIN_LOAD_SECONDS: 8\n", True),
    "loading": ("phase: loading weights", "env:\n  SGLANG_STANDIN_LOAD_SECONDS: 12\n", True),
    "mid_gate": ("phase: HTTP server started", "env:\n  SGLANG_STANDIN_WARMUP_SECONDS: 8\n", True),
    "mid_gate_failing": (
        "phase: loading weights",
        "env:\n  SGLANG_STANDIN_LOAD_SECONDS: 6\n  SGLANG_STANDIN_FAIL: cuda-oom\n",
        False,
    ),
    # 400 tokens a request at the stand-in's rate: the decode check lasts some 15 s.
    "mid_decode_check": (
        "variables ok",
        "env:\n  NCCL_NTHREADS: 128\nthroughput:\n  requests: 3\n  warmup_requests: 1\n  max_tokens: 400\n",
        True,
    ),
}


@pytest.fixture(scope="module")
def converged():
    wipe("node1")
    run = deploy(NODE, limit="node1")
    assert run.returncode == 0, run.output[-5000:]


def last_good():
    return result.parse(ssh("node1", LAST_GOOD).splitlines())["manifest"]["profile"]


def wait_cycle_ended(timeout=300):
    """Until no restart cycle unit of the service is left on node1 (it ran to its end)."""
    deadline = time.monotonic() + timeout
    while ssh("node1", CYCLES, check=False).strip():
        assert time.monotonic() < deadline, ssh("node1", CYCLES, check=False)
        time.sleep(1)


def kill_at(profiles, marker, limit="node1"):
    """Start a deploy, kill -9 it when ``marker`` shows in its output; what it printed."""
    run = start_deploy(profiles, limit=limit)
    try:
        seen = wait_for_output(run, marker, timeout=300)
    finally:
        run.kill()  # SIGKILL: the laptop's lid closed
        run.wait()
    assert "runs in this SSH session" not in seen, "the cycle did not run detached"
    return seen


# Three moments here (the node stopped, a start that fails after it, the check after the gate);
# bench/controller_dies.py kills at every moment, behind the router, under load.
@pytest.mark.parametrize("moment", ["after_stop", "mid_gate_failing", "mid_decode_check"])
def test_a_controller_killed_mid_restart_leaves_the_node_serving(converged, profile_dir, moment):
    marker, body, passes = MOMENTS[moment]
    name = f"dies-{moment.replace('_', '-')}"
    changed = write_profile(profile_dir, name, "extends: {profiles}/sandbox.yml\n" + body)
    kill_at({"node1": changed}, marker)
    wait_cycle_ended()
    assert ssh("node1", "systemctl is-active sglang.service").strip() == "active"
    served = name if passes else "sandbox"
    assert last_good() == served
    assert "SGLANG_STANDIN_FAIL" not in env_values("node1")  # a rollback put the old files back
    # The next run says what happened, then carries on: unchanged on what serves.
    rerun = deploy({"node1": changed if passes else "sandbox"}, limit="node1")
    assert rerun.returncode == 0, rerun.output[-5000:]
    said = "finished while no controller watched: " + (
        f"served {name}" if passes else "rolled back: serves sandbox"
    )
    assert said in rerun.output, rerun.output[-5000:]
    assert rerun.changed == 0, rerun.output[-5000:]
    again = deploy({"node1": changed if passes else "sandbox"}, limit="node1")
    assert "no controller watched" not in again.output  # said once
    assert deploy(NODE, limit="node1").returncode == 0


def test_a_rerun_during_a_detached_cycle_waits_for_it(converged, profile_dir):
    changed = write_profile(
        profile_dir,
        "dies-waited",
        "extends: {profiles}/sandbox.yml\nenv:\n  SGLANG_STANDIN_LOAD_SECONDS: 20\n",
    )
    kill_at({"node1": changed}, "phase: loading weights")
    rerun = deploy({"node1": changed}, limit="node1")  # the cycle still loads
    assert rerun.returncode == 0, rerun.output[-5000:]
    assert "still runs on the node: waiting up to" in rerun.output, rerun.output[-5000:]
    assert "ended while this run waited for it: served dies-waited" in rerun.output
    assert last_good() == "dies-waited"
    assert deploy(NODE, limit="node1").returncode == 0


@pytest.mark.fleet
def test_behind_the_router_the_node_is_back_in_rotation(profile_dir):
    from .test_fleet import fleet, fleet_deploy, router_view

    names, ports, router, router_port = fleet()
    assert fleet_deploy("sandbox", names, router).returncode == 0
    changed = write_profile(
        profile_dir,
        "dies-fleet",
        "extends: {profiles}/sandbox.yml\nenv:\n  SGLANG_STANDIN_LOAD_SECONDS: 12\n",
    )
    profiles = {**{n: changed for n in names}, router: "sandbox"}
    run = start_deploy(profiles)
    try:
        seen = wait_for_output(run, "phase: loading weights", timeout=300)
    finally:
        run.kill()
        run.wait()
    restarting = next(
        n for n in names if f"[{n}]" in seen.split("phase: loading weights")[-2].splitlines()[-1]
    )
    deadline = time.monotonic() + 300
    while ssh(restarting, CYCLES, check=False).strip():
        assert time.monotonic() < deadline
        time.sleep(1)
    view = router_view(router_port)
    assert view and sorted(view.values()) == [True] * len(names), view  # back in rotation
    rerun = fleet_deploy(changed, names, router)
    assert rerun.returncode == 0, rerun.output[-5000:]
    assert (
        f"[{restarting}]" in rerun.output
        and "finished while no controller watched: served dies-fleet" in rerun.output
    )
    assert sorted(router_view(router_port).values()) == [True] * len(names)
    assert fleet_deploy("sandbox", names, router).returncode == 0
