#!/usr/bin/env python3
"""`make test-e2e`: the end-to-end suite in shards that run side by side, each on a sandbox of
its own (sandbox/sandbox.py up --id K).

    python3 sandbox/e2e_shards.py [--jobs N] [--only NAME,...] [--times FILE]
    python3 sandbox/e2e_shards.py --down     take every workspace's sandbox down (after a kill -9)

The time is mostly waiting (the stand-in's load and warmup, gates, drains), so shards side by
side take about as long as the longest one. Each shard runs in a workspace of its own,
build/e2e/<name>/: a copy of the working tree (what `make test` tests, build/ with its wheels
included) whose reports/ (manifests, throughput, passports, failed hosts, verify.json, all
keyed by host name, and every shard has a node1) and locks/ (a test's own profile locks) no
other shard writes, and whose sandbox is in its .sandbox/ with id K (ports 100*K up, machine
names sandbox<K>-node<i>). A shard: sandbox up, pytest with its marker and files, sandbox down
(always, also when interrupted); its output goes to reports/e2e/<name>.log, printed at the end
one shard after another; its wall time (up to down) to --times, as make test prints it; its
tests' times to reports/e2e-durations/<name>.json (tests/e2e/conftest.py).

Exit status: 0 when every shard passed; else the first failing shard's (1 when its sandbox did
not come up); 5 (pytest's "no tests collected") only when no shard failed otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
WORKSPACES = REPO_ROOT / "build" / "e2e"
LOGS = REPO_ROOT / "reports" / "e2e"
DURATIONS = REPO_ROOT / "reports" / "e2e-durations"
NO_TESTS = 5  # pytest's exit status when nothing was selected


@dataclass(frozen=True)
class Shard:
    """One sandbox and the tests run on it: ``marker`` (pytest -m) over ``files``, or over
    tests/e2e without the files the other shards of the same marker take (``files`` empty)."""

    name: str  # reports/e2e-durations/<name>.json, reports/e2e/<name>.log, build/e2e/<name>/
    sandbox: str  # sandbox.py up arguments
    marker: str
    files: tuple[str, ...] = ()


MAIN = "e2e and not fleet"
MAIN_SANDBOX = "--nodes 3 --bare 1"
FLEET_SANDBOX = "--nodes 3 --routers 1 --monitoring 1 --sudo-user"


def e2e_files(*names):
    return tuple(f"tests/e2e/test_{name}.py" for name in names)


# 1. nodes 1-2 as the sandbox image boots them, node 3 bare (no python3-venv, no model): the
#    deploy provisions it from nothing; in three shards, split by files, balanced by their tests'
#    times (reports/e2e-durations/), each file's tests in one shard and in the order `pytest
#    tests/e2e` runs them. test_sandbox_nodes.py checks every node as test_bare_node.py's deploy
#    left node 3 (python3-venv, the model): both in one shard, in that order;
# 2. the fleet: 3 nodes behind a router node (with a router in the inventory every restart goes
#    through it, so the fleet gets a sandbox of its own), reached as a login user with sudo as
#    real fleets are: rolling changes, a controller killed mid-restart, all through sudo; and a
#    monitoring node (tests/e2e/test_monitoring.py; the other fleet tests leave it out with
#    --limit, and their nodes run a node exporter for it all the same); in two shards, as 1.
#    test_controller_dies.py's fleet test converges the fleet in its call, quick only after a
#    module left it converged (test_canary.py): both in one shard, in that order;
# 3. a login user with sudo (`deploy`), node 2 bare: the main scenarios, and the token searched
#    for on the node's whole filesystem (tests/e2e/test_sudo_login.py).
# Long ones first (about 12-15 min each side by side; sudo 4 min): with fewer jobs than shards
# (--jobs), they start in this order.
SHARDS = (
    Shard("e2e-a", MAIN_SANDBOX, MAIN, e2e_files("bare_node", "deploy", "fanout", "sandbox_nodes")),
    Shard(
        "e2e-b",
        MAIN_SANDBOX,
        MAIN,
        e2e_files("controller_dies", "deploy_outcomes", "engine_venvs", "serving_group"),
    ),
    Shard("e2e-c", MAIN_SANDBOX, MAIN),
    Shard(
        "fleet-a",
        FLEET_SANDBOX,
        "fleet",
        e2e_files("canary", "controller_dies", "monitoring"),
    ),
    Shard("fleet-b", FLEET_SANDBOX, "fleet"),
    Shard("sudo", "--nodes 2 --bare 1 --sudo-user", "sudo"),
)


def pytest_args(shard, shards=SHARDS):
    """pytest's selection for ``shard``: its marker over its files, or over tests/e2e without
    the files of the other shards with the same marker (so together they select what the marker
    selects over tests/e2e, each test once)."""
    if shard.files:
        return ["-m", shard.marker, *shard.files]
    taken = [f for other in shards if other.marker == shard.marker and other.files for f in other.files]
    return ["-m", shard.marker, "tests/e2e", *(f"--ignore={f}" for f in taken)]


def combined_status(statuses):
    """One exit status for the shards' (in shard order): 0 when all passed, the first failure's
    otherwise, NO_TESTS when the only trouble was a shard that selected nothing."""
    failed = [s for s in statuses if s not in (0, NO_TESTS)]
    if failed:
        return failed[0]
    return NO_TESTS if NO_TESTS in statuses else 0


def pick(names, shards=SHARDS):
    """The shards named (comma-separated; all when empty), in the table's order."""
    wanted = [n for n in (names or "").replace(",", " ").split() if n]
    unknown = sorted(set(wanted) - {s.name for s in shards})
    if unknown:
        raise SystemExit(
            f"e2e_shards: no shard {', '.join(unknown)} (shards: {', '.join(s.name for s in shards)})"
        )
    return [s for s in shards if not wanted or s.name in wanted]


def copy_ignore(root):
    """shutil.copytree's ignore for a workspace: no hidden top-level directories (VCS, caches,
    the sandbox state, virtual environments), reports/, the workspaces, bytecode."""
    root = Path(root).resolve()

    def ignore(directory, names):
        here = Path(directory).resolve()
        skip = {n for n in names if n in ("__pycache__", ".pytest_cache", ".ruff_cache")}
        if here == root:
            skip |= {n for n in names if n.startswith(".") and (here / n).is_dir()} | {"reports"}
        if here == root / "build":
            skip.add("e2e")
        return skip

    return ignore


class Run:
    """Shards side by side; every child process in a session of its own, stopped on interrupt."""

    def __init__(self, python=sys.executable):
        self.python = python
        self.children = set()
        self.lock = threading.Lock()
        self.interrupted = False

    def call(self, argv, cwd, env, log, always=False):
        """Run argv with output appended to ``log``; its exit status (130 without running it
        once interrupted, unless ``always``)."""
        if self.interrupted and not always:
            return 130
        with open(log, "a") as out:
            out.write(f"$ {' '.join(argv)}\n")
            out.flush()
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            with self.lock:
                self.children.add(proc)
            try:
                return proc.wait()
            finally:
                with self.lock:
                    self.children.discard(proc)

    def interrupt(self):
        """Stop every running child (pytest and what it runs); the shards then take their
        sandboxes down."""
        self.interrupted = True
        with self.lock:
            for proc in self.children:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGINT)

    def sandbox(self, workspace, sandbox_id, log, *args):
        """sandbox.py in the workspace, on its sandbox; `down` runs even once interrupted."""
        env = {**os.environ, "SANDBOX_DIR": str(workspace / ".sandbox"), "SANDBOX_ID": str(sandbox_id)}
        argv = [self.python, "sandbox/sandbox.py", *args]
        return self.call(argv, workspace, env, log, always=args[0] == "down")

    def prepare(self, shard, sandbox_id, log):
        """A fresh workspace for the shard (an earlier run's sandbox taken down first)."""
        workspace = WORKSPACES / shard.name
        if (workspace / ".sandbox").exists():
            self.sandbox(workspace, sandbox_id, log, "down")
        if workspace.exists():
            shutil.rmtree(workspace)
        shutil.copytree(REPO_ROOT, workspace, symlinks=True, ignore=copy_ignore(REPO_ROOT))
        return workspace

    def shard(self, shard, sandbox_id, shards):
        """Up, pytest, down: (exit status, wall seconds)."""
        log = LOGS / f"{shard.name}.log"
        log.write_text("")
        started = time.monotonic()
        if self.interrupted:  # a shard still waiting for a job when the run was interrupted
            return 130, 0.0
        try:
            workspace = self.prepare(shard, sandbox_id, log)
        except OSError as exc:
            with open(log, "a") as out:
                out.write(f"e2e_shards: no workspace for {shard.name}: {exc}\n")
            say(f"{shard.name}: failed: no workspace: {exc}")
            return 1, time.monotonic() - started
        say(f"{shard.name}: sandbox {sandbox_id} up ({shard.sandbox}), in {workspace.relative_to(REPO_ROOT)}")
        try:
            up = self.sandbox(workspace, sandbox_id, log, "up", *shard.sandbox.split())
            if up != 0:
                status = 130 if self.interrupted else 1
            else:
                env = {
                    **os.environ,
                    "SANDBOX_DIR": str(workspace / ".sandbox"),
                    "SANDBOX_ID": str(sandbox_id),
                    "SGLANG_DEPLOY_E2E_PHASE": shard.name,
                }
                argv = [self.python, "-m", "pytest", *pytest_args(shard, shards), "-q", "--durations=15"]
                status = self.call(argv, workspace, env, log)
        finally:
            self.sandbox(workspace, sandbox_id, log, "down")
        seconds = time.monotonic() - started
        durations = workspace / "reports" / "e2e-durations" / f"{shard.name}.json"
        if durations.is_file():
            DURATIONS.mkdir(parents=True, exist_ok=True)
            shutil.copy(durations, DURATIONS / durations.name)
        say(f"{shard.name}: {verdict(status)} in {seconds:.0f} s")
        return status, seconds


def take_down_all(run):
    """`sandbox.py down` in every workspace that has a sandbox directory; its exit status."""
    status = 0
    for sandbox_dir in sorted(WORKSPACES.glob("*/.sandbox")):
        workspace = sandbox_dir.parent
        log = LOGS / f"{workspace.name}.down.log"
        LOGS.mkdir(parents=True, exist_ok=True)
        status = run.sandbox(workspace, 0, log, "down") or status
        print(f"{workspace.name}: " + log.read_text().strip().replace("\n", "; "))
    return status


def interrupted_by_signal(signum, frame):
    raise KeyboardInterrupt


def verdict(status):
    return {0: "passed", NO_TESTS: "no test selected", 130: "interrupted"}.get(
        status, f"failed (exit {status})"
    )


def say(line):
    print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)


def describe(shard, shards):
    """The shard as the wall-time summary names it."""
    others = [o.name for o in shards if o.marker == shard.marker and o.files and o is not shard]
    selection = " ".join(Path(f).name for f in shard.files) or (
        f"tests/e2e but {', '.join(others)}'s files" if others else "tests/e2e"
    )
    return f"end-to-end {shard.name} (-m '{shard.marker}' {selection}; {shard.sandbox})"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="e2e_shards.py", description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=0, help="shards at once (default: all of them)")
    parser.add_argument("--only", default="", help="shard names, comma-separated (default: all)")
    parser.add_argument("--times", type=Path, help="append each shard's wall time here")
    parser.add_argument("--down", action="store_true", help="take every workspace's sandbox down")
    args = parser.parse_args(argv)
    if args.down:
        return take_down_all(Run())
    chosen = pick(args.only)
    LOGS.mkdir(parents=True, exist_ok=True)
    run, started = Run(), time.monotonic()
    signal.signal(signal.SIGTERM, interrupted_by_signal)  # CI cancelling: the sandboxes go down too
    jobs = args.jobs or len(chosen)
    # Ids 1.. (0 is the sandbox `make sandbox` boots, which may be up beside these).
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(run.shard, shard, i + 1, SHARDS) for i, shard in enumerate(chosen)]
        try:
            while not all(f.done() for f in futures):
                time.sleep(0.5)
        except KeyboardInterrupt:
            say("interrupted: stopping the shards, taking their sandboxes down")
            run.interrupt()
        results = [f.result() for f in futures]
    total = time.monotonic() - started
    for shard, (status, _) in zip(chosen, results):
        print(f"\n===== {shard.name}: {verdict(status)} ({LOGS.relative_to(REPO_ROOT)}/{shard.name}.log)")
        print((LOGS / f"{shard.name}.log").read_text(errors="replace"), end="")
    lines = [f"{describe(shard, SHARDS)}: {seconds:.0f} s" for shard, (_, seconds) in zip(chosen, results)]
    lines.append(f"end-to-end, {len(chosen)} shard(s), {jobs} at a time: {total:.0f} s")
    if args.times:
        with open(args.times, "a") as f:
            f.write("\n".join(lines) + "\n")
    print("\n" + "\n".join(lines))
    status = combined_status([s for s, _ in results])
    if status == NO_TESTS:
        print("no end-to-end test selected")
    return status


if __name__ == "__main__":
    sys.exit(main())
