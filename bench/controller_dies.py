#!/usr/bin/env python3
"""The controller killed (kill -9) at five moments of a restart behind the router, under load.

    python3 bench/controller_dies.py [--requests 300]

Needs sandbox nodes behind a router (`python3 sandbox/sandbox.py up --nodes 3 --routers 1`).
For each moment — after the stop, while loading, mid-gate, mid decode check, while rejoining the
router — converges the fleet on the sandbox profile, starts a deploy of a changed profile
(rolling, batch 1) while a bounded load runs through the router (3 concurrent streaming chat
requests, every 5th long), kills the pyinfra process when the moment's line shows in its output,
waits until the node's detached restart cycle (node/detach.py) ended, and reports: requests
sent / failed, the killed node's seconds out of the router, its final state and profile (the
last known good), and what the next run (on that node) says about it. Output: a table on stdout
and bench/results/controller-dies-<date>.txt.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from common import SANDBOX_INVENTORY, Report, node_of  # noqa: E402
from fleet_load import Watcher, router_view, run_load  # noqa: E402

from sglang_deploy.node.lib import result as result_line  # noqa: E402
from sglang_deploy.plan.commands import last_good_show_command  # noqa: E402

MODEL = "tiny-standin"
LAST_GOOD = last_good_show_command("/opt/sglang-deploy/node", "/var/lib/sglang-deploy/sglang/last-good")
CYCLES = "systemctl list-units --all --plain --no-legend 'sglang-deploy-cycle-sglang-*'"
# moment: (the deploy's output line it is killed at, the changed profile's additions)
MOMENTS = {
    "after stop": ("systemctl stop returned", "env:\n  SGLANG_STANDIN_LOAD_SECONDS: 8\n"),
    "while loading": ("phase: loading weights", "env:\n  SGLANG_STANDIN_LOAD_SECONDS: 12\n"),
    "mid-gate": ("phase: HTTP server started", "env:\n  SGLANG_STANDIN_WARMUP_SECONDS: 8\n"),
    "mid decode check": (
        "variables ok",
        "env:\n  NCCL_NTHREADS: 128\nthroughput:\n  requests: 3\n  warmup_requests: 1\n  max_tokens: 400\n",
    ),
    "while rejoining": ("as last known good", "env:\n  NCCL_NTHREADS: 64\n"),
}
NODE_PREFIX = re.compile(r"\[([\w.-]+)\]")


def fleet():
    state = json.loads((REPO / ".sandbox" / "state.json").read_text())
    nodes = {n["name"]: n["server_port"] for n in state["nodes"] if n.get("role", "node") == "node"}
    routers = [n for n in state["nodes"] if n.get("role") == "router"]
    if not routers:
        sys.exit("no router node: python3 sandbox/sandbox.py up --nodes 3 --routers 1")
    return nodes, routers[0]["name"], routers[0]["server_port"]


def _command(profiles, limit=None):
    env = {**os.environ, "SGLANG_DEPLOY_SANDBOX_PROFILES": ",".join(f"{n}={p}" for n, p in profiles.items())}
    argv = [sys.executable, "-m", "pyinfra", "-y", SANDBOX_INVENTORY, "deploy.py"]
    for name in [limit] if limit else profiles:
        argv += ["--limit", name]
    return argv, env


def deploy(profiles, limit=None):
    argv, env = _command(profiles, limit)
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    return done.returncode, done.stdout + done.stderr


def killed_at(profiles, marker, timeout=300):
    """Start the deploy, kill -9 it when ``marker`` shows; (the node whose line it was, output)."""
    argv, env = _command(profiles)
    run = subprocess.Popen(
        argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    seen, deadline = [], time.monotonic() + timeout
    try:
        for line in run.stdout:
            seen.append(line)
            if marker in line:
                found = NODE_PREFIX.search(line)
                return (found.group(1) if found else None), "".join(seen)
            if time.monotonic() > deadline:
                break
        return None, "".join(seen)
    finally:
        run.kill()  # SIGKILL: the laptop's lid closed
        run.wait()


def wait_until(check, timeout):
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def one_moment(moment, tmp, names, router, ports, router_port, args):
    marker, body = MOMENTS[moment]
    name = "dies-" + moment.replace(" ", "-")
    path = Path(tmp) / f"{name}.yml"
    path.write_text(f"extends: {REPO}/profiles/sandbox.yml\n{body}")
    code, output = deploy({**{n: "sandbox" for n in names}, router: "sandbox"})
    if code != 0:
        sys.exit(f"converging failed:\n{output[-4000:]}")
    watcher, stop, load = Watcher(router_port, ports), threading.Event(), {}
    client = threading.Thread(
        target=lambda: load.update(
            r=run_load(
                router_port,
                MODEL,
                count=args.requests,
                concurrency=3,
                long_tokens=120,
                long_every=5,
                stop=stop,
            )
        )
    )
    watcher.start()
    client.start()
    time.sleep(2)  # the load runs before anything restarts
    node, seen = killed_at({**{n: str(path) for n in names}, router: "sandbox"}, marker)
    ssh = node_of(SANDBOX_INVENTORY, node).ssh if node else None
    ended = node and wait_until(lambda: not ssh(CYCLES, check=False).strip(), 300)
    wait_until(lambda: sorted((router_view(router_port) or {}).values()) == [True] * len(names), 120)
    stop.set()
    client.join()
    watcher.stop.set()
    watcher.join()
    if not node:
        return [moment, "-", "-", "-", f"never reached {marker!r}", "-", seen[-200:].strip()]
    state = ssh("systemctl is-active sglang.service", check=False).strip()
    found = result_line.parse(ssh(LAST_GOOD, check=False).splitlines()) or {}
    profile = (found.get("manifest") or {}).get("profile", "?")
    code, rerun = deploy({node: str(path) if profile == name else "sandbox"}, limit=node)
    said = [line.split("] ", 1)[-1].strip() for line in rerun.splitlines() if "the restart of " in line]
    load_result = load["r"]
    return [
        moment,
        f"{load_result.sent}/{load_result.failed}",
        f"{watcher.out_s.get(node, 0.0):.1f}",
        state + ("" if ended else " (cycle still running)"),
        profile,
        f"exit {code}",
        (said[0] if said else "(nothing said)")[:110],
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument(
        "--moment", action="append", choices=sorted(MOMENTS), help="only these (default: all)"
    )
    args = parser.parse_args()
    ports, router, router_port = fleet()
    names = sorted(ports)
    report = Report()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    report(
        f"controller killed mid-restart ({len(names)} nodes + router, {args.requests} requests, "
        f"commit {commit.stdout.strip()}, {time.strftime('%Y-%m-%d %H:%M')})"
    )
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for moment in args.moment or list(MOMENTS):
            rows.append(one_moment(moment, tmp, names, router, ports, router_port, args))
    report.table(
        [
            "killed",
            "requests sent/failed",
            "s out of rotation",
            "final state",
            "profile",
            "next run",
            "next run says",
        ],
        rows,
    )
    report.save(REPO / "bench" / "results" / f"controller-dies-{time.strftime('%Y%m%d-%H%M')}.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
