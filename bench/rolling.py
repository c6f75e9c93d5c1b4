#!/usr/bin/env python3
"""A profile change across a fleet under load: rolling (batch 1) against all at once.

    python3 bench/rolling.py [--requests 400] [--load-seconds 25]

Needs sandbox nodes behind a router (`python3 sandbox/sandbox.py up --nodes 4 --routers 1`).
Converges the fleet on the sandbox profile, then, twice — rolling (rolling_batch=1) and all at
once (rolling_batch = nodes + routers: pyinfra batches the router host too) — deploys a changed profile (a start that lasts --load-seconds, longer
than the router's retries) while a bounded load runs through the router on loopback: 4
concurrent streaming chat requests, every 4th long (400 tokens), the others short. Reports
requests sent / failed, the minimum number of nodes serving at any instant (/ping sampled every
0.2 s), each node's time out of the router and the deploy's wall time. The change is reverted
(rolled) between the two runs, unmeasured. Output to stdout and
bench/results/rolling-<date>.txt.
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
from fleet_load import deploy_under_load  # noqa: E402

MODEL = "tiny-standin"


def fleet():
    state = json.loads((REPO / ".sandbox" / "state.json").read_text())
    nodes = {n["name"]: n["server_port"] for n in state["nodes"] if n.get("role", "node") == "node"}
    routers = [n["server_port"] for n in state["nodes"] if n.get("role") == "router"]
    if not routers:
        sys.exit("no router node: python3 sandbox/sandbox.py up --nodes 4 --routers 1")
    return nodes, routers[0]


def deploy(profile, names, extra=()):
    env = {**os.environ, "SGLANG_DEPLOY_SANDBOX_PROFILES": ",".join(f"{n}={profile}" for n in names)}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pyinfra", "-y", "inventory/sandbox.py", "deploy.py", *extra],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    return done.returncode, done.stdout + done.stderr, time.monotonic() - started


def measured(label, profile, names, router, ports, router_port, args, extra):
    (code, output, seconds), result, watcher = deploy_under_load(
        router_port, ports, MODEL, args.requests, lambda: deploy(profile, names + router, extra)
    )
    if code != 0:
        print(output[-4000:], file=sys.stderr)
    out = ", ".join(f"{n} {s:.1f}s" for n, s in watcher.out_s.items())
    kinds = {}
    for _, why in result.failures:
        kinds[why.split(":")[0]] = kinds.get(why.split(":")[0], 0) + 1
    return [
        f"{label}:",
        f"  deploy exit {code}, wall time {seconds:.1f} s",
        f"  requests sent {result.sent} ({result.long_sent} long), failed {result.failed}"
        + (f" (first kinds: {kinds})" if result.failed else "")
        + f", load ran {result.seconds:.1f} s",
        f"  minimum nodes serving at any instant: {watcher.min_serving} of {len(names)}; "
        f"minimum healthy in the router: {watcher.min_in_router}",
        f"  time out of the router per node: {out}",
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--load-seconds", type=float, default=25.0)
    args = parser.parse_args()
    ports, router_port = fleet()
    names = sorted(ports)
    router = [
        n["name"]
        for n in json.loads((REPO / ".sandbox" / "state.json").read_text())["nodes"]
        if n.get("role") == "router"
    ]
    with tempfile.TemporaryDirectory() as tmp:
        profiles = {}
        for name, seconds in (("slow-a", args.load_seconds), ("slow-b", args.load_seconds + 1)):
            path = Path(tmp) / f"{name}.yml"
            path.write_text(
                f"extends: {REPO}/profiles/sandbox.yml\nenv:\n  SGLANG_STANDIN_LOAD_SECONDS: {seconds}\n"
            )
            profiles[name] = str(path)
        # pyinfra slices every active host, the router's too, into the batches: a batch of
        # nodes + routers restarts every node at once.
        everything = len(names) + len(router)
        fast = ["--data", f"rolling_batch={everything}"]  # unmeasured steps: all at once
        code, output, _ = deploy(profiles["slow-a"], names + router, fast)
        if code != 0:
            sys.exit(f"converging failed:\n{output[-4000:]}")
        lines = [
            f"rolling restart bench ({len(names)} nodes + router, load time "
            f"{args.load_seconds:g} s, {args.requests} requests, commit "
            + subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
            ).stdout.strip()
            + time.strftime(", %Y-%m-%d %H:%M)")
        ]
        lines += measured("rolling, batch 1", profiles["slow-b"], names, router, ports, router_port, args, [])
        deploy(profiles["slow-a"], names + router, fast)  # back, unmeasured
        lines += measured(
            f"all at once (rolling_batch={everything})",
            profiles["slow-b"],
            names,
            router,
            ports,
            router_port,
            args,
            fast,
        )
    text = "\n".join(lines) + "\n"
    print(text)
    results = REPO / "bench" / "results"
    results.mkdir(exist_ok=True)
    with open(results / f"rolling-{time.strftime('%Y-%m-%d')}.txt", "a") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
