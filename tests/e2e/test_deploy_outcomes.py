"""A re-run that changes nothing says so, and a run's last lines say what became of each host:
env reordered, wheels rebuilt, `make plan` on running nodes, one node's sshd stopped."""

import os
import re
import subprocess
import textwrap
import time

import pytest

from sglang_deploy.cli import EXIT_UNREACHABLE

from .sandbox import REPO_ROOT, DeployRun, deploy, ssh, unit_start

pytestmark = pytest.mark.e2e

PROFILES = {"node1": "sandbox", "node2": "sandbox-eagle3"}
# The sandbox profile is locked: its wheels are in the lock's wheelhouse on the node.
WHEEL_GLOB = "/opt/sglang-deploy/wheelhouse/*/sglang-*.whl"


@pytest.fixture(scope="module")
def converged():
    run = deploy(PROFILES)
    assert run.returncode == 0, run.output[-5000:]
    return run


def write_profile(tmp_path, body):
    path = tmp_path / "reordered" / "envorder.yml"  # one name: the profile's name is its file's
    path.parent.mkdir(exist_ok=True)
    path.write_text(textwrap.dedent(body).format(profiles=REPO_ROOT / "profiles"))
    return str(path)


def make(target, profiles):
    env = {
        **os.environ,
        "INVENTORY": "inventory/sandbox.py",
        "LIMIT": ",".join(profiles),
        "SGLANG_DEPLOY_SANDBOX_PROFILES": ",".join(f"{n}={p}" for n, p in profiles.items()),
    }
    started = time.monotonic()
    done = subprocess.run(
        ["make", "-s", target],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    return DeployRun(done.returncode, done.stdout + done.stderr, time.monotonic() - started)


def last_lines(run, n):
    return [line.strip() for line in run.output.strip().splitlines()[-n:]]


def test_converged_run_ends_with_one_line_per_host(converged):
    lines = last_lines(converged, 3)
    assert lines[0].startswith("sglang-deploy: node1: ") and lines[1].startswith("sglang-deploy: node2: "), (
        converged.output[-3000:]
    )
    assert lines[2].startswith("sglang-deploy: exit status 0: "), converged.output[-3000:]


def test_reordering_env_keys_rewrites_nothing_and_restarts_nothing(converged, tmp_path):
    ordered = write_profile(
        tmp_path,
        """
        extends: {profiles}/sandbox.yml
        env:
          SANDBOX_A_FIRST: "1"
          SANDBOX_B_SECOND: "2"
    """,
    )
    first = deploy({"node1": ordered}, limit="node1")
    assert first.returncode == 0, first.output[-5000:]
    before = unit_start("node1")
    reordered = write_profile(
        tmp_path,
        """
        extends: {profiles}/sandbox.yml
        env:
          SANDBOX_B_SECOND: "2"
          SANDBOX_A_FIRST: "1"
    """,
    )
    run = deploy({"node1": reordered}, limit="node1")
    assert run.returncode == 0, run.output[-5000:]
    assert run.changed == 0, run.output[-5000:]
    assert unit_start("node1") == before
    assert last_lines(run, 2)[0] == "sglang-deploy: node1: unchanged", run.output[-2000:]


def test_make_plan_exits_0_on_running_nodes_with_a_changed_wheel(converged):
    ssh("node1", f"for w in {WHEEL_GLOB}; do printf '\\377' >> $w; done")  # not UTF-8 either
    env_before = ssh("node1", "sha1sum /etc/sglang/sglang.env")
    run = make("plan", PROFILES)
    assert run.returncode == 0, run.output[-5000:]
    assert "UnicodeDecodeError" not in run.output
    assert "sglang-deploy: node1: would change" in run.output, run.output[-3000:]
    assert ssh("node1", "sha1sum /etc/sglang/sglang.env") == env_before


def test_make_deploy_twice_with_a_wheel_rebuild_between_changes_nothing_the_second_time(converged):
    first = make("deploy", PROFILES)  # puts node1 back on its profile and wheel
    assert first.returncode == 0, first.output[-5000:]
    before = {node: unit_start(node) for node in PROFILES}
    second = make("deploy", PROFILES)  # `make deploy` rebuilds the wheels first
    assert second.returncode == 0, second.output[-5000:]
    assert second.changed == 0, second.output[-5000:]
    assert {node: unit_start(node) for node in PROFILES} == before
    # `make deploy LIMIT=node1,node2`: one outcome line per node, each unchanged.
    outcomes = [line for line in last_lines(second, 10) if re.match(r"sglang-deploy: node\d+:", line)]
    assert outcomes == ["sglang-deploy: node1: unchanged", "sglang-deploy: node2: unchanged"], outcomes
    print(f"make deploy with nothing to change, 2 nodes: {second.seconds:.1f}s")


def test_an_unreachable_node_is_named_in_the_last_lines_and_the_exit_status(converged):
    # sshd comes back by itself: later tests (and the teardown) need the node.
    ssh(
        "node2",
        "systemd-run --on-active=45s systemctl start ssh.service >/dev/null 2>&1; systemctl stop ssh.service",
        check=False,
    )
    try:
        run = deploy(PROFILES)
        assert run.returncode == EXIT_UNREACHABLE, run.output[-5000:]
        node1, node2, status = last_lines(run, 3)
        assert node1 == "sglang-deploy: node1: unchanged", run.output[-3000:]
        assert node2.startswith("sglang-deploy: node2: unreachable ("), run.output[-3000:]
        assert status.startswith(f"sglang-deploy: exit status {EXIT_UNREACHABLE}: "), status
        print("\n".join(last_lines(run, 3)))
    finally:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                ssh("node2", "true")
                break
            except AssertionError:
                time.sleep(3)
