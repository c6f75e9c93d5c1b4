"""A serving group on sandbox nodes: node1 (rank 0) and node2 (rank 1) serve one model together
(--nnodes 2). Converge, a no-op re-run, a coordinated restart, a follower that fails its start,
a follower that cannot reach rank 0, a change that moves the dist-init port, and what a naive
stop of a follower costs.

    python3 sandbox/sandbox.py up --nodes 3 --bare 1 && python3 -m pytest -m e2e tests/e2e/test_serving_group.py -q -s
"""

import json
import os
import re
import subprocess
import time
import urllib.request

import pytest

from sglang_deploy.plan.hosts import SANDBOX_DIST_INIT_OFFSET

from .sandbox import (  # noqa: F401 (a fixture)
    REPO_ROOT,
    DeployRun,
    _deploy_command,
    deploy,
    env_values,
    nodes,
    profile_dir,
    ssh,
    unit_start,
    wipe,
    write_profile,
)

pytestmark = pytest.mark.e2e

GROUP = {"SGLANG_DEPLOY_SANDBOX_GROUPS": "g1=node1+node2"}
MEMBERS = ("node1", "node2")
TIMINGS = {}

PROFILE = """\
description: the stand-in on two nodes, one scheduler each
extends: {profiles}/sandbox.yml
server_args:
  nnodes: 2
env:
  NCCL_BUFFSIZE: "%s"
%s
service:
  timeout_stop_sec: 15   # a follower stopped alone waits this long for systemd's SIGKILL
"""


def group_profile(directory, buffsize="4194304", extra=""):
    return write_profile(directory, "group", PROFILE % (buffsize, extra))


def run(profile, args=()):
    return deploy({name: profile for name in MEMBERS}, extra_env=GROUP, args=args)


# The sandbox inventory with the group's dist-init port moved by one (the port a profile's
# `service.dist_init_port` sets; the sandbox sets it per group in profile_overrides).
MOVED_PORT_INVENTORY = """\
from sglang_deploy.plan.hosts import sandbox_hosts

sandbox = []
for name, data in sandbox_hosts():
    service = data["profile_overrides"]["service"]
    if "dist_init_port" in service:
        service["dist_init_port"] += 1
    sandbox.append((name, data))
"""


def run_with_moved_port(profile, directory):
    inventory = directory / "moved_port_inventory.py"
    inventory.write_text(MOVED_PORT_INVENTORY)
    command, env = _deploy_command({name: profile for name in MEMBERS}, None, GROUP, ())
    command[command.index("inventory/sandbox.py")] = str(inventory)
    started = time.monotonic()
    done = subprocess.run(
        command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL
    )
    return DeployRun(done.returncode, done.stdout + done.stderr, time.monotonic() - started)


def get(node, path):
    port = nodes()[1][node]["server_port"]
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read()
    except OSError as exc:
        return getattr(exc, "code", None), b""


def argv(node):
    pid = ssh(node, "systemctl show -p MainPID --value sglang.service").strip()
    return ssh(node, f"tr '\\0' ' ' < /proc/{pid}/cmdline", check=False)


def dist_init_port():
    """The group's dist-init port: rank 0's server port plus the sandbox inventory's offset."""
    return nodes()[1]["node1"]["server_port"] + SANDBOX_DIST_INIT_OFFSET


def lines_with(output, *words):
    return [line for line in output.splitlines() if any(word in line for word in words)]


def test_converge_serves_from_rank_0_with_each_rank_on_its_node(profile_dir):
    for node in MEMBERS:
        wipe(node)
    done = run(group_profile(profile_dir))
    TIMINGS["converge"] = done.seconds
    assert done.returncode == 0, done.output[-5000:]
    assert f"--nnodes 2 --node-rank 0 --dist-init-addr 127.0.0.1:{dist_init_port()}" in argv("node1")
    assert f"--nnodes 2 --node-rank 1 --dist-init-addr 127.0.0.1:{dist_init_port()}" in argv("node2")
    status, body = get("node1", "/v1/models")
    assert status == 200 and "tiny-standin" in body.decode()
    assert "sglang-deploy: node2: deployed" in done.output
    assert "group g1 node-rank 1 of 2: group serves" in done.output
    print("\n".join(lines_with(done.output, "group g1", "Group preflight")))


def test_a_rerun_changes_nothing(profile_dir):
    before = {node: unit_start(node) for node in MEMBERS}
    done = run(group_profile(profile_dir))
    TIMINGS["no-op"] = done.seconds
    assert done.returncode == 0, done.output[-5000:]
    assert done.changed == 0, done.output[-5000:]
    assert {node: unit_start(node) for node in MEMBERS} == before
    assert "group g1 node-rank 0 of 2" in done.output


def test_one_nccl_value_changed_restarts_the_group_as_one_rank_0_first(profile_dir):
    before = {node: unit_start(node) for node in MEMBERS}
    done = run(group_profile(profile_dir, buffsize="8388608"))
    TIMINGS["coordinated restart"] = done.seconds
    assert done.returncode == 0, done.output[-5000:]
    after = {node: unit_start(node) for node in MEMBERS}
    assert all(after[node] != before[node] for node in MEMBERS)
    said = lines_with(done.output, "group g1:")
    print("\n".join(lines_with(done.output, "group g1:", "ready in", "note:", "phase:")))
    order = [
        line
        for line in said
        if "stopping rank 0 node1 first" in line
        or "group stopped" in line
        or "starting every member" in line
        or "serves; followers" in line
    ]
    assert len(order) == 4, said
    assert "did not end on rank 0's shutdown" not in "\n".join(said)
    stop = re.search(
        r"group stopped in ([\d.]+)s \(rank 0 ([\d.]+)s, followers ([\d.]+)s after it\)", done.output
    )
    TIMINGS["coordinated stop"] = float(stop.group(1))
    TIMINGS["follower end after rank 0"] = float(stop.group(3))
    for node in MEMBERS:
        assert env_values(node)["NCCL_BUFFSIZE"] == "8388608"


def test_make_verify_shows_each_members_rank_and_the_groups_verdict(profile_dir):
    env = {
        **os.environ,
        **GROUP,
        "SGLANG_DEPLOY_SANDBOX_PROFILES": ",".join(
            f"{node}={group_profile(profile_dir, buffsize='8388608')}" for node in MEMBERS
        ),
    }
    done = subprocess.run(
        ["make", "-s", "verify", "LIMIT=node1,node2"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    print(done.stdout[-3000:])
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
    # The full table row of each host is in the JSON (the terminal shows a block per host).
    rows = {
        r["host"]: r["table"]
        for r in json.loads((REPO_ROOT / "reports/verify.json").read_text())
        if "table" in r
    }
    cells = {host: " ".join(str(cell) for cell in row.values()) for host, row in rows.items()}
    assert "g1 rank 0/2: ok" in cells["node1"] and "g1 rank 1/2: ok" in cells["node2"], rows


def test_a_follower_that_fails_its_start_is_named_and_the_group_rolls_back(profile_dir):
    failing = group_profile(
        profile_dir,
        buffsize="8388608",
        extra='  SGLANG_STANDIN_FAIL: cuda-oom\n  SGLANG_STANDIN_FAIL_RANK: "1"',
    )
    done = run(failing)
    said = "\n".join(lines_with(done.output, "group g1", "node-rank 1"))
    print(said)
    assert done.returncode != 0
    assert "node2 (node-rank 1) died while the group started: cuda-oom" in done.output
    assert "rolled back: serving group again" in done.output
    died = re.search(r"\[\s*([\d.]+)s\] group g1: node2 \(node-rank 1\) died", done.output)
    started = re.search(r"\[\s*([\d.]+)s\] group g1: starting every member", done.output)
    TIMINGS["follower death named after start"] = float(died.group(1)) - float(started.group(1))
    assert TIMINGS["follower death named after start"] < 15
    assert "sglang-deploy: node2: failed" in done.output
    for node in MEMBERS:
        assert "SGLANG_STANDIN_FAIL" not in env_values(node)
    assert get("node1", "/v1/models")[0] == 200


def test_a_follower_that_cannot_reach_rank_0_is_named_by_preflight_and_nothing_stops(profile_dir):
    before = {node: unit_start(node) for node in MEMBERS}
    # Rank 0's address on the cluster network, as a follower would have it wrong: TEST-NET-1.
    done = run(group_profile(profile_dir, buffsize="8388608"), args=["--data", "cluster_address=192.0.2.1"])
    print("\n".join(lines_with(done.output, "group", "cannot reach")))
    assert done.returncode != 0
    assert f"node-rank 1 cannot reach 192.0.2.1:{dist_init_port()}" in done.output
    assert "stopping rank 0" not in done.output
    assert {node: unit_start(node) for node in MEMBERS} == before
    assert get("node1", "/v1/models")[0] == 200
    assert f"--dist-init-addr 127.0.0.1:{dist_init_port()}" in ssh(
        "node1", "cat /etc/systemd/system/sglang.service"
    )


def test_a_change_that_moves_the_dist_init_port_is_probed_where_rank_0_listens_now(profile_dir):
    before = {node: unit_start(node) for node in MEMBERS}
    port = dist_init_port()
    done = run_with_moved_port(group_profile(profile_dir, buffsize="8388608"), profile_dir)
    TIMINGS["dist-init port moved (deploy)"] = done.seconds
    print("\n".join(lines_with(done.output, "Group preflight", "listens on port", "reach")))
    assert done.returncode == 0, done.output[-5000:]
    assert (
        f"group g1 node-rank 1 of 2: rank 0 node1 listens on port {port} until the group restarts "
        f"onto {port + 1}: reached on {port}"
    ) in done.output
    for node in MEMBERS:
        assert unit_start(node) != before[node]
        assert f"--dist-init-addr 127.0.0.1:{port + 1}" in argv(node)
    assert get("node1", "/v1/models")[0] == 200


def test_a_naive_stop_of_a_follower_first_leaves_it_running():
    """Followers first, with SIGTERM (what a per-host restart does to SGLang's follower): it
    ignores it and keeps running until rank 0's shutdown, or until it is killed."""
    ssh("node2", "systemctl kill --kill-who=main --signal=SIGTERM sglang.service")
    started = time.monotonic()
    time.sleep(5)
    assert ssh("node2", "systemctl is-active sglang.service", check=False).strip() == "active"
    assert "waiting for the rank-0 ShutdownReq" in ssh("node2", "journalctl -u sglang.service -o cat")
    TIMINGS["naive: follower still running after SIGTERM (s, at least)"] = time.monotonic() - started
    # systemctl stop signals the whole cgroup (KillMode=control-group): the schedulers have no
    # SIGTERM handler (0.5.23 as the stand-in) and die of it, and the launcher then returns.
    started = time.monotonic()
    ssh("node2", "systemctl stop sglang.service")
    TIMINGS["naive: systemctl stop of the follower"] = time.monotonic() - started
    print(json.dumps({key: round(value, 1) for key, value in TIMINGS.items()}, indent=1))
    ssh("node1", "systemctl stop sglang.service")
