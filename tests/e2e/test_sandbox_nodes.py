"""The sandbox nodes are real systemd hosts over SSH, with Debian's python3 as the deploy meets it.

Needs nodes already up (`python3 sandbox/sandbox.py up`); reads `.sandbox/state.json`
(or $SANDBOX_DIR/state.json).
"""

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO_ROOT = Path(__file__).resolve().parents[2]
STATE_FILE = Path(os.environ.get("SANDBOX_DIR") or REPO_ROOT / ".sandbox") / "state.json"
SSH_OPTS = [
    "-o",
    "StrictHostKeyChecking=no",
    "-o",
    "UserKnownHostsFile=/dev/null",
    "-o",
    "LogLevel=ERROR",
    "-o",
    "BatchMode=yes",
    "-o",
    "IdentitiesOnly=yes",
    "-o",
    "ConnectTimeout=5",
]


def load_state():
    if not STATE_FILE.is_file():
        pytest.skip(f"no sandbox nodes: {STATE_FILE} is absent (run `python3 sandbox/sandbox.py up` first)")
    state = json.loads(STATE_FILE.read_text())
    if not state.get("nodes"):
        pytest.skip(f"no sandbox nodes recorded in {STATE_FILE}")
    return state


def recorded_nodes():
    """Node entries for parametrization; [None] (a skip) when there are none."""
    try:
        return json.loads(STATE_FILE.read_text())["nodes"] or [None]
    except (OSError, ValueError, KeyError):
        return [None]


@pytest.fixture(params=recorded_nodes(), ids=lambda n: n["name"] if n else "no-nodes")
def node(request):
    state = load_state()
    return dict(request.param, key=state["key"])


def ssh_argv(node, command):
    return [
        "ssh",
        "-p",
        str(node["ssh_port"]),
        "-i",
        node["key"],
        *SSH_OPTS,
        f"{node['ssh_user']}@{node['ssh_host']}",
        command,
    ]


def sh(node, command, check=True):
    """Run a shell command on the node as root over real SSH; returns stdout, stripped."""
    res = subprocess.run(
        ssh_argv(node, command), capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )
    if check and res.returncode != 0:
        raise AssertionError(
            f"{command!r} on {node['name']} exited {res.returncode}:\n{res.stdout}{res.stderr}"
        )
    return res.stdout.strip()


def test_systemd_is_pid1_and_running(node):
    assert sh(node, "ps -o comm= -p 1") == "systemd"
    assert sh(node, "systemctl is-system-running", check=False) == "running"
    assert sh(node, "hostname") == node["name"]


def test_sshd_listens_on_its_loopback_port(node):
    listeners = sh(node, "ss -Hltn")
    assert f"127.0.0.1:{node['ssh_port']} " in listeners + " "


def test_tiny_model_is_staged(node):
    config = json.loads(sh(node, "cat /models/tiny-standin/config.json"))
    assert config["model_type"] == "llama"
    assert sh(node, "test -f /models/tiny-standin/tokenizer_config.json && echo ok") == "ok"


def test_venv_sitecustomize_is_shadowed_but_pth_runs(node):
    """Debian's sitecustomize shadows a venv's; a .pth in site-packages runs regardless."""
    venv = "/tmp/v"
    site = sh(
        node,
        f"rm -rf {venv} && python3 -m venv {venv} && "
        f"{venv}/bin/python -c 'import sysconfig; print(sysconfig.get_path(\"purelib\"))'",
    )
    assert site.startswith(venv)
    sh(node, f'echo \'import os; os.environ["SANDBOX_VENV_SITECUSTOMIZE"] = "1"\' > {site}/sitecustomize.py')
    sh(node, f'echo \'import os; os.environ["SANDBOX_PTH_RAN"] = "1"\' > {site}/sandbox_test.pth')
    probe = (
        "import json, os, sitecustomize; print(json.dumps({'file': sitecustomize.__file__, "
        "'venv_sc': os.environ.get('SANDBOX_VENV_SITECUSTOMIZE'), "
        "'pth': os.environ.get('SANDBOX_PTH_RAN')}))"
    )
    seen = json.loads(sh(node, f"{venv}/bin/python -c {shlex.quote(probe)}"))
    sh(node, f"rm -rf {venv}")
    assert seen["file"] == "/usr/lib/python3.11/sitecustomize.py"
    assert seen["venv_sc"] is None
    assert seen["pth"] == "1"


def test_same_named_units_on_two_nodes_do_not_race():
    """Each node has cgroups of its own. Nodes started from one shared cgroup shared
    `payload/system.slice/<unit>`: one node removed it while the other attached to it, and
    units failed "at step CGROUP" when the same unit started on several nodes at once."""
    state = load_state()
    if len(state["nodes"]) < 2:
        pytest.skip("needs two sandbox nodes")
    loop = (
        "fails=0; for i in $(seq 1 40); do systemd-run --wait --quiet --collect "
        "--unit=sandbox-race-probe true || fails=$((fails+1)); done; echo $fails"
    )
    procs = [
        subprocess.Popen(
            ssh_argv(dict(n, key=state["key"]), loop),
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        for n in state["nodes"][:2]
    ]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert [out.strip().splitlines()[-1] for out in outputs] == ["0", "0"], outputs
