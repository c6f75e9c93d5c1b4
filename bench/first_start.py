#!/usr/bin/env python3
"""A fleet's first start, and a rolling change with stopped nodes: the first wave against
rolling every node one at a time.

    python3 bench/first_start.py [--load-seconds 10] [--requests 300]

Needs 8 sandbox nodes behind a router (`python3 sandbox/sandbox.py up --nodes 8 --routers 1`)
and the router's wheels (`make router-wheels`). Three measured deploys, each of a profile whose
start lasts --load-seconds:

1. first converge, before: every node wiped (nothing installed, tests/e2e/sandbox.py wipe),
   then a deploy with `--data rolling_first_wave=false` (every node rolls, batch 1, as before
   the first wave existed);
2. first converge, after: every node wiped again, the same deploy with the defaults (every
   node serves nothing: one first wave);
3. a rolling change with two of the eight nodes stopped beforehand (`systemctl stop`, then
   waited for until the router lists them unhealthy): the two start in the first wave, the six
   others roll, while a bounded load (--requests streaming chat requests, 4 concurrent, every
   4th 400 tokens) runs through the router.

Reports each deploy's exit and wall time, the waves it said, and for 3 requests sent / failed,
the minimum number of nodes serving and healthy in the router at any instant. Output to stdout
and bench/results/first-start-<date>.txt.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))
from fleet_load import deploy_under_load, router_view  # noqa: E402

from tests.e2e.sandbox import ssh, wipe  # noqa: E402

MODEL = "tiny-standin"
WAVE_LINES = ("first wave (", "then rolling ", "rolling ", "no first wave")


def fleet():
    state = json.loads((REPO / ".sandbox" / "state.json").read_text())
    nodes = {n["name"]: n["server_port"] for n in state["nodes"] if n.get("role", "node") == "node"}
    routers = [n for n in state["nodes"] if n.get("role") == "router"]
    if not routers or len(nodes) < 8:
        sys.exit("needs 8 nodes and a router: python3 sandbox/sandbox.py up --nodes 8 --routers 1")
    return nodes, routers[0]["name"], routers[0]["server_port"]


def fleet_deploy_command(profile, names, router, extra=()):
    """(argv, env) of a deploy of ``profile`` to ``names`` and the sandbox profile's router."""
    profiles = [f"{n}={profile}" for n in names] + [f"{router}=sandbox"]
    env = {**os.environ, "SGLANG_DEPLOY_SANDBOX_PROFILES": ",".join(profiles)}
    return [sys.executable, "-m", "pyinfra", "-y", "inventory/sandbox.py", "deploy.py", *extra], env


def deploy(profile, names, router, extra=()):
    argv, env = fleet_deploy_command(profile, names, router, extra)
    started = time.monotonic()
    done = subprocess.run(
        argv,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    return done.returncode, done.stdout + done.stderr, time.monotonic() - started


def waves_said(output):
    return [line.strip() for line in output.splitlines() if line.strip().startswith(WAVE_LINES)]


def first_converge(label, profile, names, router, extra):
    for name in names:
        wipe(name)
    code, output, seconds = deploy(profile, names, router, extra)
    if code != 0:
        print(output[-4000:], file=sys.stderr)
    return [f"{label}:", f"  deploy exit {code}, wall time {seconds:.1f} s"] + [
        f"  said: {line}" for line in waves_said(output)
    ], seconds


def with_two_stopped(profile, names, router, ports, router_port, args):
    stopped = names[2:4]
    for name in stopped:
        ssh(name, "systemctl stop sglang.service")
    deadline = time.monotonic() + 120
    while sorted((router_view(router_port) or {}).values()) != [False] * 2 + [True] * (len(names) - 2):
        if time.monotonic() > deadline:
            sys.exit(f"the router still lists {', '.join(stopped)} healthy: {router_view(router_port)}")
        time.sleep(0.5)
    (code, output, seconds), result, watcher = deploy_under_load(
        router_port, ports, MODEL, args.requests, lambda: deploy(profile, names, router)
    )
    if code != 0:
        print(output[-4000:], file=sys.stderr)
    return [
        f"rolling change, {', '.join(stopped)} stopped beforehand:",
        f"  deploy exit {code}, wall time {seconds:.1f} s",
        *(f"  said: {line}" for line in waves_said(output)),
        f"  requests sent {result.sent} ({result.long_sent} long), failed {result.failed}"
        + (f" (first: {result.failures[:3]})" if result.failed else "")
        + f", load ran {result.seconds:.1f} s",
        f"  minimum nodes serving at any instant: {watcher.min_serving} of {len(names)} "
        f"(2 stopped before the deploy); minimum healthy in the router: {watcher.min_in_router}",
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load-seconds", type=float, default=10.0)
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    ports, router, router_port = fleet()
    names = sorted(ports)
    with tempfile.TemporaryDirectory() as tmp:
        profiles = {}
        for name, seconds in (("start-a", args.load_seconds), ("start-b", args.load_seconds + 1)):
            path = Path(tmp) / f"{name}.yml"
            path.write_text(
                f"extends: {REPO}/profiles/sandbox.yml\nenv:\n  SGLANG_STANDIN_LOAD_SECONDS: {seconds}\n"
            )
            profiles[name] = str(path)
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()
        lines = [
            f"first start bench ({len(names)} nodes + router, load time {args.load_seconds:g} s, "
            f"{args.requests} requests, commit {commit}{time.strftime(', %Y-%m-%d %H:%M)')}"
        ]
        said, before = first_converge(
            "first converge, before (rolling_first_wave=false: batch 1)",
            profiles["start-a"],
            names,
            router,
            ["--data", "rolling_first_wave=false"],
        )
        lines += said
        said, after = first_converge(
            "first converge, after (first wave)", profiles["start-a"], names, router, []
        )
        lines += said + [f"  before / after: {before / after:.2f}x"]
        lines += with_two_stopped(profiles["start-b"], names, router, ports, router_port, args)
    text = "\n".join(lines) + "\n"
    print(text)
    results = REPO / "bench" / "results"
    results.mkdir(exist_ok=True)
    with open(results / f"first-start-{time.strftime('%Y-%m-%d')}.txt", "a") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
