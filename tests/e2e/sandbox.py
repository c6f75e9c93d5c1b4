"""Driving deploys against the sandbox nodes from tests: run pyinfra, read its results table,
read a unit's state over SSH."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from sglang_deploy.plan.hosts import sandbox_state_file

REPO_ROOT = Path(__file__).resolve().parents[2]
STATE_FILE = sandbox_state_file()  # $SANDBOX_DIR/state.json, else .sandbox/state.json
TOTALS = re.compile(r"Grand total\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)")


def nodes():
    if not STATE_FILE.is_file():
        raise RuntimeError(f"{STATE_FILE} missing: boot nodes with `make sandbox NODES=2` first")
    state = json.loads(STATE_FILE.read_text())
    return state["key"], {node["name"]: node for node in state["nodes"]}


@dataclass
class DeployRun:
    returncode: int
    output: str
    seconds: float

    def _total(self, column):
        match = TOTALS.search(self.output)
        assert match, f"no results table in pyinfra output:\n{self.output[-3000:]}"
        value = match.group(column)
        return 0 if value == "-" else int(value)

    @property
    def changed(self):
        return self._total(2)

    @property
    def errors(self):
        return self._total(3)


def _deploy_command(profiles, limit, extra_env, args, yes=True):
    env = {
        **os.environ,
        **(extra_env or {}),
        "SGLANG_DEPLOY_SANDBOX_PROFILES": ",".join(f"{n}={p}" for n, p in profiles.items()),
    }
    command = [
        sys.executable,
        "-m",
        "pyinfra",
        *(["-y"] if yes else []),
        "inventory/sandbox.py",
        "deploy.py",
        *args,
    ]
    # Only the scenario's nodes, whatever else the sandbox runs.
    for name in [limit] if limit else profiles:
        command += ["--limit", name]
    return command, env


def deploy(profiles: dict, limit=None, extra_env=None, args=(), yes=True) -> DeployRun:
    """Run `pyinfra inventory/sandbox.py deploy.py` with a profile per node (`yes=False` for
    `--dry --diff`, which shows diffs only without -y)."""
    command, env = _deploy_command(profiles, limit, extra_env, args, yes)
    started = time.monotonic()
    done = subprocess.run(
        command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL
    )
    return DeployRun(done.returncode, done.stdout + done.stderr, time.monotonic() - started)


def start_deploy(profiles: dict, limit=None, extra_env=None, args=()) -> subprocess.Popen:
    """The same deploy, in the background; its output is read with wait_for_output."""
    command, env = _deploy_command(profiles, limit, extra_env, args)
    return subprocess.Popen(
        command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def wait_for_output(process: subprocess.Popen, text, timeout: float) -> str:
    """Read a background deploy's output until ``text`` (or any of a tuple of texts) appears."""
    deadline = time.monotonic() + timeout
    texts = (text,) if isinstance(text, str) else tuple(text)
    seen = []
    for line in process.stdout:
        seen.append(line)
        if any(t in line for t in texts):
            return "".join(seen)
        assert time.monotonic() < deadline, f"no {text!r} within {timeout}s:\n{''.join(seen)}"
    raise AssertionError(f"deploy ended without {text!r}:\n{''.join(seen)}")


def env_values(node_name, service="sglang") -> dict:
    """The node's env file as {name: value}, secrets left out: what a test compares, and so
    what an assertion may show (never the file itself, which holds the secrets)."""
    from sglang_deploy.node.lib.envfile import parse_env_file

    text = ssh(node_name, f"cat /etc/sglang/{service}.env")
    return {k: v for k, v in parse_env_file(text).items() if k not in SECRET_NAMES}


SECRET_NAMES = ("HF_TOKEN",)  # the profiles' secrets (profiles/*.yml `secrets:`)


def host_tests_argv(limit, *args) -> list[str]:
    """`pytest tests/host` as `make verify` runs it, on the sandbox inventory's ``limit``."""
    return [
        sys.executable,
        *("-m", "pytest", "-p", "no:cacheprovider", "tests/host"),
        *("--inventory", "inventory/sandbox.py", "--limit", limit, *args),
    ]


def ssh_argv(node_name, command, as_login=False) -> list[str]:
    """ssh to the node running ``command`` as root: through `sudo -n` on a node reached as a
    sudo user (`sandbox.py up --sudo-user`), unless ``as_login`` (as the login user itself)."""
    key, all_nodes = nodes()
    node = all_nodes[node_name]
    if node.get("sudo") and not as_login:
        command = f"sudo -n sh -c {shlex.quote(command)}"
    return [
        "ssh",
        "-i",
        key,
        "-p",
        str(node["ssh_port"]),
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "LogLevel=ERROR",
        "-o",
        "BatchMode=yes",
        f"{node['ssh_user']}@{node['ssh_host']}",
        command,
    ]


def ssh(node_name, command, check=True, stdin=None, as_login=False) -> str:
    """Run a shell command on the node over real SSH, as root (see ssh_argv); its stdout."""
    done = subprocess.run(
        ssh_argv(node_name, command, as_login),
        capture_output=True,
        timeout=120,
        input=stdin,
        text=stdin is None or isinstance(stdin, str),
    )
    output = done.stdout if isinstance(done.stdout, str) else done.stdout.decode()
    if check:
        assert done.returncode == 0, f"{node_name}: {command}: {done.stderr}"
    return output


def unit_start(node_name, unit="sglang.service"):
    """(MainPID, ExecMainStartTimestampMonotonic, NRestarts): changes whenever it restarts."""
    out = ssh(node_name, f"systemctl show -p MainPID,ExecMainStartTimestampMonotonic,NRestarts {unit}")
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return props["MainPID"], props["ExecMainStartTimestampMonotonic"], props["NRestarts"]


def verify(profiles: dict) -> subprocess.CompletedProcess:
    """`make verify` against the sandbox with the same per-node profiles."""
    env = {**os.environ, "SGLANG_DEPLOY_SANDBOX_PROFILES": ",".join(f"{n}={p}" for n, p in profiles.items())}
    return subprocess.run(
        host_tests_argv(",".join(profiles), "-q"),
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


# Everything a deploy puts on a node, so a scenario can start from a node as provisioned.
DEPLOYED_PATHS = (
    "/opt/sglang",
    "/opt/sglang-deploy",
    "/etc/sglang",
    "/var/lib/sglang-deploy",
    "/etc/systemd/system/sglang.service",
    "/etc/systemd/system/multi-user.target.wants/sglang.service",
)


def wipe(node_name):
    """Stop and remove whatever an earlier deploy left on the node."""
    ssh(
        node_name,
        "systemctl stop sglang.service 2>/dev/null; systemctl reset-failed sglang.service "
        f"2>/dev/null; rm -rf {' '.join(DEPLOYED_PATHS)}; systemctl daemon-reload",
    )


@pytest.fixture(scope="module")
def profile_dir(tmp_path_factory):
    """A directory for a module's throwaway profiles (they `extends:` shipped ones)."""
    return tmp_path_factory.mktemp("profiles")


def lock_offline(profile_path) -> Path:
    """Lock a test profile at test time with `make lock`'s code, from its find-links alone (a
    stand-in wheel built here and the sandbox lock's wheelhouse: no index), and fill its
    wheelhouse from them; the lock written under locks/, which the caller removes."""
    done = subprocess.run(
        [sys.executable, "-m", "sglang_deploy.plan.locks", "lock", "--no-index", str(profile_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    written = REPO_ROOT / re.search(r"^(locks/\S+\.txt):", done.stdout, re.M)[1]
    filled = subprocess.run(
        [sys.executable, "-m", "sglang_deploy.plan.wheelhouse", str(profile_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert filled.returncode == 0, filled.stdout + filled.stderr
    return written


def write_profile(directory, name, body):
    """Write profile ``name`` into ``directory``; ``{profiles}`` in body is profiles/."""
    path = directory / f"{name}.yml"
    path.write_text(textwrap.dedent(body).format(profiles=REPO_ROOT / "profiles"))
    return str(path)
