"""From a bare OS to serving, on the sandbox's bare node (`sandbox.py up --nodes 3 --bare 1`:
node3 has no python3-venv, curl, pciutils, rsync, iproute2 or model directory), with no route
to the Python package index (its names resolve to a closed port): an unsupported OS is refused
with nothing changed; the deploy installs the OS prerequisites with apt, the engine from the
controller's wheelhouse, stages the model from the controller, then serves, and `make verify`
passes; a re-run changes nothing and makes no apt call.

    python3 sandbox/sandbox.py up --nodes 3 --bare 1 && python3 -m pytest -m e2e tests/e2e/test_bare_node.py -q -s
"""

import json
import re
import time

import pytest

from sglang_deploy.facts.gpu import ACS_UNIT

from .sandbox import (  # noqa: F401 (a fixture)
    REPO_ROOT,
    nodes,
    profile_dir,
    ssh,
    start_deploy,
    verify,
    write_profile,
)

pytestmark = pytest.mark.e2e

NODE = "node3"
APT_LOG = "/var/log/apt-invocations.log"
# Every apt-get/apt call on the node is logged (time, arguments) before the real one runs:
# /usr/local/sbin comes before /usr/bin on root's PATH.
APT_SHIM = f"""#!/bin/sh
echo "$(date +%s.%N) start $(basename "$0") $*" >> {APT_LOG}
"/usr/bin/$(basename "$0")" "$@"; status=$?
echo "$(date +%s.%N) end $(basename "$0")" >> {APT_LOG}
exit $status
"""
# The Python package index, unreachable from the node (apt's mirror stays reachable).
NO_INDEX = "127.0.0.1 pypi.org files.pythonhosted.org  # sglang-deploy e2e: no index\n"
INDEX_PROBE = (
    'python3 -c "import socket\n'
    "try:\n socket.create_connection(('pypi.org', 443), 5); print('reachable')\n"
    "except OSError as e:\n print('unreachable', e)\""
)
STEP = re.compile(r"--> Starting operation: (?:.+ \| )?(.+?)\s*$")  # without the recipe's name


def timed_deploy(profiles, limit):
    """A deploy whose output lines are time-stamped as they arrive: (returncode, output,
    seconds, {operation name: seconds from its start to the next one's})."""
    started = time.monotonic()
    process = start_deploy(profiles, limit)
    lines, marks = [], []
    for line in process.stdout:
        lines.append(line)
        found = STEP.search(re.sub(r"\x1b\[[0-9;]*m", "", line))
        if found:
            marks.append((found.group(1), time.monotonic()))
    process.wait(timeout=600)
    ended = time.monotonic()
    marks.append(("end", ended))
    steps = {name: t2 - t1 for (name, t1), (_, t2) in zip(marks, marks[1:])}
    return process.returncode, "".join(lines), ended - started, steps


def apt_calls():
    """The apt-get/apt invocations the node logged: [(start time, end time, arguments)]."""
    calls, started = [], {}
    for line in ssh(NODE, f"cat {APT_LOG} 2>/dev/null || true").splitlines():
        stamp, what, rest = line.split(" ", 2)
        if what == "start":
            started = {"start": float(stamp), "args": rest}
        else:
            calls.append((started["start"], float(stamp), started["args"]))
    return calls


@pytest.fixture(scope="module")
def bare(profile_dir):
    """The bare node as booted, with the apt shim, and its profile (ACS unit opted in)."""
    _, all_nodes = nodes()
    assert all_nodes[NODE].get("bare") is True, "boot with: sandbox.py up --nodes 3 --bare 1"
    for tool in ("apt-get", "apt"):
        ssh(NODE, f"cat > /usr/local/sbin/{tool} && chmod 755 /usr/local/sbin/{tool}", stdin=APT_SHIM)
    ssh(NODE, "grep -q 'no index' /etc/hosts || cat >> /etc/hosts", stdin=NO_INDEX)
    profile = write_profile(
        profile_dir,
        "bare",
        """
        extends: {profiles}/sandbox.yml
        pcie:
          disable_acs: true
        """,
    )
    yield {NODE: profile}
    # Later modules may need the index; rewritten in place (nspawn may bind-mount /etc/hosts).
    ssh(NODE, "grep -v 'sglang-deploy e2e: no index' /etc/hosts > /root/hosts; cat /root/hosts > /etc/hosts")


def test_node_boots_bare(bare):
    missing = ssh(
        NODE,
        "for p in python3-venv curl pciutils rsync iproute2; do "
        "[ \"$(dpkg-query -W -f '${db:Status-Status}' $p 2>/dev/null)\" = "
        "installed ] || echo $p; done; "
        "test -e /models || echo no-models",
    )
    assert missing.split() == ["python3-venv", "curl", "pciutils", "rsync", "iproute2", "no-models"]


def test_the_node_has_no_route_to_the_python_index(bare):
    assert ssh(NODE, INDEX_PROBE).startswith("unreachable"), "the bare node must provision offline"


def test_unsupported_os_stops_before_anything_changes(bare):
    ssh(
        NODE,
        "cp -a /etc/os-release /root/os-release.saved && rm /etc/os-release && "
        'printf \'NAME="Fedora Linux"\\nID=fedora\\nPRETTY_NAME="Fedora Linux 40"\\n\' '
        "> /etc/os-release",
    )
    try:
        code, output, _, _ = timed_deploy(bare, NODE)
    finally:
        ssh(NODE, "rm /etc/os-release && mv /root/os-release.saved /etc/os-release")
    assert code != 0, output[-3000:]
    assert "unsupported OS: Fedora Linux 40" in output, output[-3000:]
    assert f"sglang-deploy: {NODE}: failed (at 'OS prerequisites'" in output, output[-3000:]
    assert apt_calls() == []
    assert "sglang-deploy" not in ssh(NODE, "ls /opt")


@pytest.fixture(scope="module")
def served(bare):
    # The node has no model directory: the deploy stages it from the controller
    # (profiles/sandbox.yml model.source), after apt installed what the copy needs.
    assert ssh(NODE, "test -e /models/tiny-standin || echo absent").strip() == "absent"
    code, output, seconds, steps = timed_deploy(bare, NODE)
    assert code == 0, output[-5000:]
    return output, seconds, steps


def test_bare_node_to_serving_and_verified(bare, served):
    output, seconds, steps = served
    calls = apt_calls()
    assert [args.split()[-1] for _, _, args in calls if "update" in args.split()] == ["update"]
    installs = [args for _, _, args in calls if " install " in f" {args} "]
    # The OS prerequisites; no node exporter in a sandbox without a monitoring node.
    assert len(installs) == 1 and "python3-venv" in installs[0] and "pciutils" in installs[0]
    assert ssh(NODE, "systemctl is-active sglang.service").strip() == "active"
    assert ssh(NODE, INDEX_PROBE).startswith("unreachable")  # served with no index all along
    assert ssh(NODE, f"systemctl is-enabled {ACS_UNIT}").strip() == "enabled"
    assert "no PCI bridges: nothing to clear" in ssh(NODE, f"journalctl -o cat -u {ACS_UNIT}")
    manifest = json.loads(ssh(NODE, "cat /models/tiny-standin/.sglang-deploy-manifest.json"))
    assert "config.json" in json.dumps(manifest), manifest
    verified = verify(bare)
    assert verified.returncode == 0, verified.stdout[-5000:]
    apt_s = sum(end - start for start, end, _ in calls)
    venv_s = steps.get("Engine venv and pinned packages", 0)
    start_s = steps.get("Restart (configuration changed)", 0) + steps.get("Serving", 0)
    model_s = sum(v for k, v in steps.items() if k.startswith("Model "))
    print(
        f"\nbare node -> serving: {seconds:.1f}s; apt {apt_s:.1f}s ({apt_s / seconds:.0%}), "
        f"venv {venv_s:.1f}s ({venv_s / seconds:.0%}), model staging {model_s:.1f}s "
        f"({model_s / seconds:.0%}), start {start_s:.1f}s "
        f"({start_s / seconds:.0%}); steps: " + json.dumps({k: round(v, 1) for k, v in steps.items()})
    )


def test_rerun_changes_nothing_and_calls_no_apt(bare, served):
    before = len(apt_calls())
    code, output, seconds, _ = timed_deploy(bare, NODE)
    assert code == 0, output[-5000:]
    assert f"sglang-deploy: {NODE}: unchanged" in output, output[-3000:]
    assert len(apt_calls()) == before
    print(f"\nno-op re-run: {seconds:.1f}s, apt invocations: {len(apt_calls()) - before}")
