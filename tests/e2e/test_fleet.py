"""A fleet behind SGLang's router: 3 serving nodes and a router node.

python3 sandbox/sandbox.py up --nodes 3 --routers 1 && python3 -m pytest -m fleet tests/e2e
"""

import json
import subprocess
import sys
import threading
import time

import pytest

from .sandbox import (  # noqa: F401 (a fixture)
    REPO_ROOT,
    deploy,
    nodes,
    profile_dir,
    ssh,
    unit_start,
    write_profile,
)

sys.path.insert(0, str(REPO_ROOT / "bench"))
from fleet_load import Watcher, router_view, run_load  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.fleet]
MODEL = "tiny-standin"


def fleet():
    """(serving node names, {name: server port}, router name, router port)."""
    _, found = nodes()
    roles = {name: node.get("role", "node") for name, node in found.items()}
    serving = sorted(n for n in found if roles[n] == "node")
    routers = [n for n in found if roles[n] == "router"]
    if not routers or len(serving) < 3:
        pytest.skip("needs 3 nodes and a router: E2E_NODES=3 E2E_SANDBOX_ARGS='--routers 1'")
    return (
        serving,
        {n: found[n]["server_port"] for n in serving},
        routers[0],
        found[routers[0]]["server_port"],
    )


def sandbox_with_env(directory, name, **env):
    """Profile ``name``: the sandbox profile with these env values added (a changed configuration)."""
    return write_profile(
        directory,
        name,
        "extends: {profiles}/sandbox.yml\nenv:\n"
        + "".join(f"  {key}: {json.dumps(value)}\n" for key, value in env.items()),
    )


def under_load(router_port, run_deploy):
    """(the deploy's run, the load's result): streaming chat requests through the router, three
    at a time (every 5th a long one), for as long as the deploy runs."""
    stop, load = threading.Event(), {}
    client = threading.Thread(
        target=lambda: load.update(
            r=run_load(
                router_port,
                MODEL,
                count=10_000,
                concurrency=3,
                short_tokens=8,
                long_tokens=120,
                long_every=5,
                stop=stop,
            )
        )
    )
    client.start()
    try:
        run = run_deploy()
    finally:
        stop.set()
        client.join()
    return run, load["r"]


def fleet_deploy(profile, names, router, **kwargs):
    profiles = {name: profile for name in names}
    return deploy({**profiles, router: "sandbox"}, **kwargs)


@pytest.fixture(scope="module")
def deployed():
    subprocess.run(["make", "-s", "router-wheels"], cwd=REPO_ROOT, check=True)
    names, ports, router, router_port = fleet()
    run = fleet_deploy("sandbox", names, router)
    assert run.returncode == 0, run.output[-4000:]
    view = router_view(router_port)
    assert view and sorted(view.values()) == [True] * len(names), view
    return names, ports, router, router_port


def test_noop_run_touches_no_router_membership(deployed):
    names, ports, router, router_port = deployed
    before = _worker_ids(router_port)
    run = fleet_deploy("sandbox", names, router)
    assert run.returncode == 0 and run.changed == 0, run.output[-3000:]
    assert "out of rotation" not in run.output
    assert _worker_ids(router_port) == before


def test_rolling_change_loses_no_request(deployed, profile_dir):  # noqa: F811
    names, ports, router, router_port = deployed
    changed = sandbox_with_env(profile_dir, "rolled", SGLANG_STANDIN_LOAD_SECONDS=4)
    starts = {name: unit_start(name) for name in names}
    watcher = Watcher(router_port, ports)
    watcher.start()
    run, result = under_load(router_port, lambda: fleet_deploy(changed, names, router))
    watcher.stop.set()
    watcher.join()
    print(
        f"\nrolling: {result.sent} requests, {result.failed} failed; min serving "
        f"{watcher.min_serving}/{len(names)}, min in router {watcher.min_in_router}; "
        f"out of rotation {watcher.out_s}; deploy {run.seconds:.1f}s"
    )
    assert run.returncode == 0, run.output[-4000:]
    assert all(unit_start(name) != starts[name] for name in names), "every node restarted"
    assert result.sent > 0 and result.failed == 0, result.failures
    assert watcher.min_serving >= len(names) - 1
    assert sorted(router_view(router_port).values()) == [True] * len(names)


def test_crashing_config_stops_the_rollout(deployed, profile_dir):  # noqa: F811
    names, ports, router, router_port = deployed
    crashing = sandbox_with_env(
        profile_dir, "crashing", SGLANG_STANDIN_FAIL="crash-load", SGLANG_STANDIN_FAIL_AFTER_SECONDS=1
    )
    starts = {name: unit_start(name) for name in names}
    run = fleet_deploy(crashing, names, router)
    assert run.returncode != 0
    # Exactly one node tried the new configuration (batch 1): rolled back and back in the router.
    tried = [
        n
        for n in names
        if f"sglang-deploy: {n}: failed" in run.output
        and "rolled back: serves" in _outcome_line(run.output, n)
    ]
    assert len(tried) == 1, run.output[-4000:]
    first, rest = tried[0], [n for n in names if n != tried[0]]
    assert f"rollout stopped at {first}" in run.output
    for name in rest:
        assert unit_start(name) == starts[name], f"{name} was restarted after the rollout stopped"
        assert "not restarted: serves" in _outcome_line(run.output, name)
    assert sorted(router_view(router_port).values()) == [True] * len(names)
    # Their files went back too: the next run of the profile they serve restarts nothing.
    served = profile_dir / "rolled.yml"
    again = fleet_deploy(str(served) if served.exists() else "sandbox", names, router)
    assert again.returncode == 0, again.output[-3000:]
    assert "out of rotation" not in again.output


def test_router_down_takes_no_node_out_of_rotation(deployed, profile_dir):  # noqa: F811
    names, ports, router, router_port = deployed
    changed = sandbox_with_env(profile_dir, "unrouted", SGLANG_STANDIN_WARMUP_SECONDS=2)
    ssh(router, "systemctl stop sglang-router.service")
    starts = {name: unit_start(name) for name in names}
    run = fleet_deploy(changed, names, router)
    assert run.returncode != 0
    assert "nothing was taken out of rotation" in run.output, run.output[-4000:]
    assert all(unit_start(name) == starts[name] for name in names)
    # The router's own steps still ran: it is back, with every node healthy.
    assert sorted(router_view(router_port).values()) == [True] * len(names)


def test_a_stopped_node_starts_in_the_first_wave_and_the_others_roll(deployed, profile_dir):  # noqa: F811
    names, ports, router, router_port = deployed
    stopped, serving = names[0], names[1:]
    changed = sandbox_with_env(profile_dir, "after-stop", SGLANG_STANDIN_LOAD_SECONDS=3)
    ssh(stopped, "systemctl stop sglang.service")
    # The load starts once the router no longer sends to the stopped node (its health check).
    deadline = time.monotonic() + 60
    while sorted((router_view(router_port) or {}).values()) != [False] + [True] * len(serving):
        assert time.monotonic() < deadline, router_view(router_port)
        time.sleep(0.5)
    starts = {name: unit_start(name) for name in serving}
    run, result = under_load(router_port, lambda: fleet_deploy(changed, names, router))
    assert run.returncode == 0, run.output[-4000:]
    # systemctl stop drains SGLang 0.5.23 and leaves its unit inactive (docs/sglang-shutdown.md).
    assert f"first wave (serving nothing: {stopped} unit stopped): {stopped} starts" in run.output, (
        run.output[-4000:]
    )
    rolled = next(line.strip() for line in run.output.splitlines() if "then rolling 1 at a time: " in line)
    assert sorted(rolled.split("then rolling 1 at a time: ")[1].split(" | ")) == serving, rolled
    assert all(unit_start(name) != starts[name] for name in serving), "the serving nodes rolled"
    assert result.sent > 0 and result.failed == 0, result.failures
    assert sorted(router_view(router_port).values()) == [True] * len(names)


def _outcome_line(output, name):
    return next((line for line in output.splitlines() if line.startswith(f"sglang-deploy: {name}: ")), "")


def _worker_ids(router_port):
    import urllib.request

    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
        f"http://127.0.0.1:{router_port}/workers", timeout=3
    ) as answer:
        return sorted((w["url"], w["id"]) for w in json.loads(answer.read())["workers"])


def test_verify_covers_the_router(deployed):
    names, ports, router, router_port = deployed
    routers_run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "tests/host/test_router_host.py",
            "--inventory",
            "inventory/sandbox.py",
            "--limit",
            router,
            "-v",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert routers_run.returncode == 0, routers_run.stdout[-3000:]
    for check in ("router-packages", "router-unit", "router-workers"):
        assert f"test_router_check[{router}-{check}] PASSED" in routers_run.stdout
    table = subprocess.run(
        [sys.executable, "-m", "sglang_deploy.verify.summary", "inventory/sandbox.py", "--limit", router],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert table.returncode == 0 and f"http://127.0.0.1:{router_port}" in table.stdout, table.stdout


GROUP = {"SGLANG_DEPLOY_SANDBOX_GROUPS": "g1=node1+node2"}
GROUP_PROFILE = """\
extends: {profiles}/sandbox.yml
server_args:
  nnodes: 2
env:
  SGLANG_DEPLOY_TEST_TURN: "%s"
"""


def test_a_serving_group_behind_the_router_restarts_out_of_rotation_and_loses_no_request(
    deployed, profile_dir
):  # noqa: F811
    # node1 + node2 serve one model as group g1 (rank 0 node1, the router's worker); node3 alone.
    names, ports, router, router_port = deployed
    if names[:3] != ["node1", "node2", "node3"]:
        pytest.skip("needs node1-node3 as serving nodes")

    def group_deploy(turn):
        profile = write_profile(profile_dir, f"group-{turn}", GROUP_PROFILE % turn)
        return deploy(
            {"node1": profile, "node2": profile, "node3": "sandbox", router: "sandbox"}, extra_env=GROUP
        )

    formed = group_deploy("formed")
    assert formed.returncode == 0, formed.output[-4000:]
    assert sorted(router_view(router_port)) == [f"http://127.0.0.1:{ports[n]}" for n in ("node1", "node3")]
    starts = {name: unit_start(name) for name in names}
    run, result = under_load(router_port, lambda: group_deploy("changed"))
    print(
        f"\ngroup behind the router: {result.sent} requests, {result.failed} failed; deploy {run.seconds:.1f}s"
    )
    assert run.returncode == 0, run.output[-4000:]
    assert "rotation: out of" in run.output and "rotation: healthy in" in run.output, run.output[-4000:]
    assert unit_start("node1") != starts["node1"] and unit_start("node2") != starts["node2"]
    assert unit_start("node3") == starts["node3"]
    assert result.sent > 0 and result.failed == 0, result.failures
    assert sorted(router_view(router_port).values()) == [True, True]
