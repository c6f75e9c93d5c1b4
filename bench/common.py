"""What bench/readiness.py and bench/throughput.py share: one node of an inventory, SSH to it,
deploys whose output is read line by line with arrival times, the journal with journald's own
timestamps, throwaway profiles that extend a real one, and a report that also goes to a file.

Times are wall-clock seconds (time.time() on the controller, __REALTIME_TIMESTAMP on the
node): on sandbox nodes both read the same clock. On real nodes they are as close as the two
machines' NTP sync.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sglang_deploy.facts.serving import UnitState  # noqa: E402
from sglang_deploy.node.lib import result  # noqa: E402
from sglang_deploy.plan.commands import lock_command  # noqa: E402
from sglang_deploy.plan.hosts import SANDBOX_PROFILES_VAR, inventory_hosts, ssh_argv  # noqa: E402
from sglang_deploy.profile.schema import load_profile  # noqa: E402

SANDBOX_INVENTORY = "inventory/sandbox.py"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


# -- The node --------------------------------------------------------------------------------


@dataclass
class Node:
    name: str
    data: dict
    inventory: str

    @property
    def is_sandbox(self):
        return Path(self.inventory).resolve() == (REPO / SANDBOX_INVENTORY).resolve()

    def ssh_argv(self, command):
        """ssh running ``command`` as root: through `sudo -n` on a host logged into as a sudo
        user (hosts.yml `sudo: true`, the sandbox's --sudo-user nodes)."""
        if self.data.get("_sudo") or self.data.get("sudo") is True:
            command = f"sudo -n sh -c {shlex.quote(command)}"
        return ssh_argv(self.name, self.data, command)

    def ssh_line(self, command):
        """The same, as one shell command line (for pipelines run on the controller)."""
        return " ".join(shlex.quote(arg) for arg in self.ssh_argv(command))

    def ssh(self, command, timeout=120, check=True):
        done = subprocess.run(self.ssh_argv(command), capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise RuntimeError(f"{self.name}: {command}: exit {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def profile(self, ref):
        """The profile ``ref`` as this host would deploy it (its profile_overrides applied)."""
        return load_profile(ref, overrides=self.data.get("profile_overrides") or None)

    def http_host(self):
        return self.data.get("ssh_hostname", self.name)


def node_of(inventory, name):
    hosts = dict(inventory_hosts(inventory))
    if name not in hosts:
        raise SystemExit(f"{inventory}: no host {name!r} (hosts: {', '.join(hosts) or 'none'})")
    return Node(name, hosts[name], inventory)


# -- Throwaway profiles ----------------------------------------------------------------------


def resolve_profile(ref):
    """A profile name (profiles/<name>.yml) or a path, as an absolute path for `extends:`."""
    path = Path(ref)
    if path.suffix in (".yml", ".yaml") and path.is_file():
        return str(path.resolve())
    named = REPO / "profiles" / f"{ref}.yml"
    if not named.is_file():
        raise SystemExit(f"no profile {ref!r} (neither a file nor profiles/{ref}.yml)")
    return str(named)


def write_profile(directory, name, extends, env):
    """profiles-like file ``<directory>/<name>.yml``: ``extends`` plus ``env`` values. The file
    name is the profile name the deploy reports (e.g. "rolled back: serving <name> again")."""
    lines = [
        f"# Written by bench/ for one run; extends {extends}.",
        f"extends: {json.dumps(resolve_profile(extends))}",
    ]
    if env:
        lines.append("env:")
        lines += [f"  {key}: {json.dumps(str(value))}" for key, value in env.items()]
    path = Path(directory) / f"{name}.yml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


# -- Deploys, read as they stream ------------------------------------------------------------


@dataclass
class DeployRun:
    returncode: int
    lines: list = field(default_factory=list)  # (arrival time.time(), text without ANSI)
    started: float = 0.0
    ended: float = 0.0

    def first(self, needle, after=0.0):
        """(time, text) of the first line containing ``needle`` that arrived after ``after``."""
        for when, text in self.lines:
            if when >= after and needle in text:
                return when, text
        return None

    def all(self, needle):
        return [(when, text) for when, text in self.lines if needle in text]

    def tail(self, n=40):
        return "\n".join(text for _, text in self.lines[-n:])


def deploy(node, profile_path, extra_args=(), timeout=900):
    """Run `python -m pyinfra -y INVENTORY deploy.py --limit NODE` with ``profile_path`` for
    that node, stamping every output line with the controller's clock as it arrives."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "pyinfra", "-y", node.inventory, "deploy.py", "--limit", node.name]
    if node.is_sandbox:
        env[SANDBOX_PROFILES_VAR] = f"{node.name}={profile_path}"
    else:
        command += ["--data", f"profile={profile_path}"]
    command += list(extra_args)
    run = DeployRun(returncode=-1, started=time.time())
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    deadline = time.monotonic() + timeout
    for line in process.stdout:
        run.lines.append((time.time(), ANSI.sub("", line.rstrip("\n"))))
        if time.monotonic() > deadline:
            process.kill()
            break
    run.returncode = process.wait()
    run.ended = time.time()
    return run


INVOCATION = re.compile(r"started (\S+): main pid (\d+), invocation ([0-9a-f]+)")


def invocations(run):
    """[(arrival time, invocation id)] of every start the deploy's restart step reported."""
    out = []
    for when, text in run.lines:
        m = INVOCATION.search(text)
        if m:
            out.append((when, m.group(3)))
    return out


# -- The journal -----------------------------------------------------------------------------


def journal(node, invocation):
    """[(wall seconds, message)] of one start of a unit: its own lines and systemd's lines
    about it, stamped by journald (__REALTIME_TIMESTAMP, microseconds)."""
    out = node.ssh(
        f"journalctl -o json --no-pager _SYSTEMD_INVOCATION_ID={invocation} + INVOCATION_ID={invocation}"
    )
    entries = []
    for line in out.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        message = entry.get("MESSAGE")
        if isinstance(message, list):  # non-UTF-8 bytes
            message = bytes(message).decode("utf-8", "replace")
        entries.append((int(entry["__REALTIME_TIMESTAMP"]) / 1e6, message or ""))
    entries.sort(key=lambda e: e[0])
    return entries


def journal_first(entries, pattern):
    rx = re.compile(pattern)
    for when, message in entries:
        if rx.search(message):
            return when, message
    return None


def wait_journal(node, invocation, pattern, timeout=60.0):
    """The first line of that start matching ``pattern``, waiting for it to be written."""
    deadline = time.monotonic() + timeout
    while True:
        found = journal_first(journal(node, invocation), pattern)
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def unit_show(node, unit, *props):
    fact = UnitState()
    return fact.process(node.ssh(fact.command(unit, props)).splitlines())


# -- The node's deploy lock, held by the bench while it restarts the unit by hand -------------


class DeployLock:
    """Hold the node's deploy lock (the deploy's own lock.py) so that no deploy runs while the
    bench restarts the unit by hand; released when the SSH session closes."""

    def __init__(self, node, service, wait_s=600.0):
        self.node, self.wait_s = node, wait_s
        self.path = f"{node.data['run_dir']}/{service}.lock"
        self.process = None

    def __enter__(self):
        holder = f"bench pid {os.getpid()}"
        scripts_dir = f"{self.node.data['sglang_deploy_dir']}/node"
        command = lock_command(self.path, self.wait_s, holder, directory=scripts_dir)
        self.process = subprocess.Popen(
            self.node.ssh_argv(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for line in self.process.stdout:
            if any(event["event"] == "locked" for event in result.events([line])):
                return self
        raise RuntimeError(f"could not take the deploy lock {self.path} on {self.node.name}")

    def __exit__(self, *exc):
        self.process.stdin.close()
        self.process.wait(timeout=30)


# -- Output ----------------------------------------------------------------------------------


class Report:
    """print() that also keeps the text, to be written to a results file."""

    def __init__(self):
        self.lines = []

    def __call__(self, text=""):
        print(text, flush=True)
        self.lines.extend(str(text).split("\n"))

    def table(self, header, rows, aligns=None):
        cells = [[str(c) for c in header]] + [[str(c) for c in row] for row in rows]
        widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
        aligns = aligns or ["<"] + [">"] * (len(header) - 1)
        for n, row in enumerate(cells):
            self("  ".join(f"{c:{a}{w}}" for c, a, w in zip(row, aligns, widths)).rstrip())
            if n == 0:
                self("  ".join("-" * w for w in widths))

    def save(self, path):
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(self.lines) + "\n")


def median(values):
    return statistics.median(values) if values else float("nan")


def fmt_s(value, digits=2):
    return "-" if value is None or value != value else f"{value:.{digits}f}"


def stamp(when):
    """HH:MM:SS.mmm of a wall-clock time."""
    return time.strftime("%H:%M:%S", time.localtime(when)) + f".{int((when % 1) * 1000):03d}"
