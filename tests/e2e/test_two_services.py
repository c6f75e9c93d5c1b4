"""Two services on one sandbox node: inventory hosts `node1` (service sglang, the sandbox
profile) and `node1-b` (the same SSH target, service sglang-b on a port of its own, a model
directory of its own). Each has its own engine link and venvs (plan/shared_nodes.py), so B's
first deploy, its no-op re-run, a change of its engine and environment, and A's re-run never
touch the other: same main process, same start, same link target; a plain `systemctl restart`
of A still serves A's engine. Both in one run: refused before anything changes.

    python3 sandbox/sandbox.py up --nodes 3 --bare 1 && python3 -m pytest -m e2e tests/e2e/test_two_services.py -q -s
"""

import json
import subprocess
import time
import urllib.request

import pytest

from sglang_deploy.plan.wheelhouse import lock_wheels_dir
from sglang_deploy.profile.schema import load_profile

from .sandbox import (  # noqa: F401 (a fixture)
    REPO_ROOT,
    DeployRun,
    _deploy_command,
    lock_offline,
    nodes,
    profile_dir,
    ssh,
    wipe,
    write_profile,
)

pytestmark = pytest.mark.e2e

NODE, B = "node1", "node1-b"
A_UNIT, B_UNIT = "sglang.service", "sglang-b.service"
A_LINK, A_VENVS = "/opt/sglang/venv", "/opt/sglang/venvs"
B_HOME = "/opt/sglang/services/sglang-b"
B_LINK, B_VENVS = f"{B_HOME}/venv", f"{B_HOME}/venvs"
B_MODEL = "/models/tiny-standin-b"
MARK = "SGLANG_DEPLOY_E2E_SERVICE"  # an env variable only B's profile sets (its start-up hook's)
# B's port: node1's server port plus this. A sandbox's nodes serve on 30000 + 100*K + i (K: its
# id, i: the node's number), so this stays inside node1's own sandbox block, on no node's port.
PORT_OFFSET = 50

# The sandbox inventory with a second host on node1's SSH target: service sglang-b, its profile.
INVENTORY = """\
import copy

from sglang_deploy.plan.hosts import sandbox_hosts

sandbox = []
for name, data in sandbox_hosts():
    sandbox.append((name, data))
    if name == {node!r}:
        second = copy.deepcopy(data)
        second["profile"] = {profile!r}
        second["profile_overrides"] = {{"service": {{"name": "sglang-b", "port": {port}}}}}
        sandbox.append(({b!r}, second))
"""

B_PROFILE = """\
description: the stand-in as a second service of its node
extends: {{profiles}}/sandbox.yml
{engine}model:
  path: {model}
env:
  {mark}: "{value}"
"""


def b_port():
    return nodes()[1][NODE]["server_port"] + PORT_OFFSET


def run(profile_b, directory, limit):
    """pyinfra with the two-service inventory, B serving ``profile_b``; ``limit``: the hosts."""
    inventory = directory / "two_services_inventory.py"
    inventory.write_text(INVENTORY.format(node=NODE, b=B, profile=profile_b, port=b_port()))
    command, env = _deploy_command({name: "sandbox" for name in limit}, None, None, ())
    command[command.index("inventory/sandbox.py")] = str(inventory)
    started = time.monotonic()
    done = subprocess.run(
        command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL
    )
    return DeployRun(done.returncode, done.stdout + done.stderr, time.monotonic() - started)


def state(unit, link):
    """What changes when a service is restarted or switched: its main process, when it became
    active, its invocation, and where its engine link points."""
    show = ssh(NODE, f"systemctl show -p MainPID,ActiveEnterTimestamp,InvocationID {unit}")
    props = dict(line.split("=", 1) for line in show.splitlines() if "=" in line)
    props["link"] = ssh(NODE, f"readlink -f {link}").strip()
    return props


def served_version(port, wait_s=0.0):
    """The engine version the server on ``port`` answers with (/server_info), waiting up to
    ``wait_s`` for it to answer."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=3) as answer:
                return json.loads(answer.read())["version"]
        except OSError:
            if time.monotonic() > deadline:
                return None
            time.sleep(0.5)


def hooked(link):
    """What the venv behind ``link`` sets MARK to at interpreter start (its start-up hook)."""
    return ssh(NODE, f"{link}/bin/python -c 'import os; print(os.environ.get(\"{MARK}\"))'").strip()


def forget_b():
    """Service B and what it left on node1 (the sandbox's wipe knows service sglang only)."""
    ssh(
        NODE,
        f"systemctl disable --now {B_UNIT} 2>/dev/null; systemctl reset-failed {B_UNIT} 2>/dev/null; "
        f"rm -rf /etc/systemd/system/{B_UNIT} {B_HOME} {B_MODEL} {B_MODEL}.sglang-deploy-*; "
        "systemctl daemon-reload",
    )


@pytest.fixture(scope="module")
def profiles(profile_dir):
    """B's profiles: the sandbox engine, then the next stand-in (locked here, offline, as
    tests/e2e/test_engine_venvs.py does) with another value of MARK."""
    sandbox_wheels = lock_wheels_dir(load_profile("sandbox").engine)
    next_engine = (
        "engine:\n  packages: [sglang==0.5.24+sandbox]\n"
        f"  find_links: [{REPO_ROOT}/build/wheels-next, {sandbox_wheels}]\n"
    )
    found = {
        "b": write_profile(
            profile_dir, "service-b", B_PROFILE.format(engine="", model=B_MODEL, mark=MARK, value="b")
        ),
        "b-next": write_profile(
            profile_dir,
            "service-b-next",
            B_PROFILE.format(engine=next_engine, model=B_MODEL, mark=MARK, value="b-next"),
        ),
    }
    written = lock_offline(found["b-next"])
    yield found
    written.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def deployed(profiles, profile_dir):
    """A deployed alone, then B alone; what A was before B's first deploy."""
    forget_b()
    wipe(NODE)
    first = run(profiles["b"], profile_dir, [NODE])
    assert first.returncode == 0, first.output[-5000:]
    before_b = state(A_UNIT, A_LINK)
    second = run(profiles["b"], profile_dir, [B])
    assert second.returncode == 0, second.output[-5000:]
    yield before_b
    forget_b()
    wipe(NODE)
    for path in REPO_ROOT.glob(f"reports/*/{B}.*"):
        path.unlink(missing_ok=True)


def test_b_first_deploy_serves_beside_a_and_leaves_a_alone(deployed):
    assert state(A_UNIT, A_LINK) == deployed
    assert deployed["link"].startswith(f"{A_VENVS}/sglang-0.5.23+sandbox-")
    b = state(B_UNIT, B_LINK)
    assert b["link"].startswith(f"{B_VENVS}/sglang-0.5.23+sandbox-"), b
    port_a = nodes()[1][NODE]["server_port"]
    assert served_version(port_a) == served_version(b_port()) == "0.5.23+sandbox"
    # One lock, two venvs: each with its own start-up hook (B's variable in B's only).
    assert (hooked(A_LINK), hooked(B_LINK)) == ("None", "b")


def test_both_services_of_the_node_in_one_run_are_refused_before_anything_changes(
    profiles, profile_dir, deployed
):
    a, b = state(A_UNIT, A_LINK), state(B_UNIT, B_LINK)
    done = run(profiles["b"], profile_dir, [NODE, B])
    assert done.returncode != 0, done.output[-5000:]
    assert f"{NODE} and {B} are one node" in done.output and "deploy one of them per run" in done.output
    assert (state(A_UNIT, A_LINK), state(B_UNIT, B_LINK)) == (a, b)


def test_a_rerun_of_either_changes_nothing_on_the_other(profiles, profile_dir, deployed):
    a, b = state(A_UNIT, A_LINK), state(B_UNIT, B_LINK)
    again_b = run(profiles["b"], profile_dir, [B])
    assert again_b.returncode == 0 and again_b.changed == 0, again_b.output[-5000:]
    again_a = run(profiles["b"], profile_dir, [NODE])
    assert again_a.returncode == 0 and again_a.changed == 0, again_a.output[-5000:]
    assert (state(A_UNIT, A_LINK), state(B_UNIT, B_LINK)) == (a, b)
    print(f"\nno-op re-runs: B {again_b.seconds:.1f}s, A {again_a.seconds:.1f}s")


def test_a_new_engine_and_environment_for_b_leave_a_serving_its_own(profiles, profile_dir, deployed):
    a, b = state(A_UNIT, A_LINK), state(B_UNIT, B_LINK)
    changed = run(profiles["b-next"], profile_dir, [B])
    assert changed.returncode == 0, changed.output[-5000:]
    after_b = state(B_UNIT, B_LINK)
    assert after_b["MainPID"] != b["MainPID"] and after_b["link"].startswith(
        f"{B_VENVS}/sglang-0.5.24+sandbox-"
    )
    assert served_version(b_port()) == "0.5.24+sandbox" and hooked(B_LINK) == "b-next"
    assert state(A_UNIT, A_LINK) == a
    # A restarted by hand runs through its own link: A's engine, A's hook.
    ssh(NODE, f"systemctl restart {A_UNIT}")
    assert served_version(nodes()[1][NODE]["server_port"], wait_s=60) == "0.5.23+sandbox"
    restarted = state(A_UNIT, A_LINK)
    assert restarted["MainPID"] != a["MainPID"] and restarted["link"] == a["link"]
    pid = restarted["MainPID"]
    assert ssh(NODE, f"readlink /proc/{pid}/exe").strip().startswith(f"{A_VENVS}/sglang-0.5.23+sandbox-")
    assert hooked(A_LINK) == "None"
    print(f"\nB's engine and environment changed in {changed.seconds:.1f}s; A untouched")
