#!/usr/bin/env python3
"""How long a re-run with nothing to change takes, and how many SSH commands it costs.

    python3 bench/noop_rerun.py [--nodes 8] [--runs 3]

Boots (or keeps) `--nodes` sandbox nodes, converges them once, then times `--runs` no-op
re-runs of the deploy on 1 node (`--limit node1`) and on all of them, counting every command
and file transfer that goes over SSH (bench/ssh_count.py). Every re-run must report no change:
a run that changed something is reported as an error, not timed.
The table goes to stdout and to bench/results/noop-rerun-<date>.txt.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
INVENTORY = "inventory/sandbox.py"


def pyinfra(args, counts_file=None):
    """One deploy run; (seconds, output, counts or None)."""
    argv = (
        [sys.executable, str(REPO / "bench" / "ssh_count.py"), str(counts_file)]
        if counts_file
        else [sys.executable, "-m", "pyinfra"]
    ) + ["-y", INVENTORY, "deploy.py", *args]
    started = time.monotonic()
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"deploy failed (exit {done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    if counts_file and not Path(counts_file).exists():
        sys.exit(f"no SSH counts from {' '.join(argv)}:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    counts = json.loads(Path(counts_file).read_text()) if counts_file else None
    return elapsed, done.stdout, counts


def changed_hosts(output):
    """Hosts whose outcome line says something changed (the deploy's own last lines)."""
    return [
        line for line in output.splitlines() if line.startswith("sglang-deploy: ") and ": deployed" in line
    ]


def measure(label, args, runs):
    times, commands, transfers = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(runs):
            counts_file = Path(tmp) / f"counts-{i}.json"
            elapsed, output, counts = pyinfra(args, counts_file)
            if changed_hosts(output):
                sys.exit(f"{label}: a re-run changed something:\n" + "\n".join(changed_hosts(output)))
            times.append(elapsed)
            hosts = max(len(counts["commands"]), 1)
            commands.append(sum(counts["commands"].values()) / hosts)
            transfers.append(sum(counts.get("transfers", {}).values()) / hosts)
    return {
        "label": label,
        "median_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
        "commands_per_host": statistics.median(commands),
        "transfers_per_host": statistics.median(transfers),
        "runs": runs,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--routers", type=int, default=0, help="router nodes after the serving ones, in both runs (a fleet)"
    )
    args = parser.parse_args(argv)
    subprocess.run(["make", "-s", "wheels"], cwd=REPO, check=True)
    if args.routers:
        subprocess.run(["make", "-s", "router-wheels"], cwd=REPO, check=True)
    subprocess.run(
        [
            sys.executable,
            "sandbox/sandbox.py",
            "up",
            "--nodes",
            str(args.nodes),
            "--routers",
            str(args.routers),
        ],
        cwd=REPO,
        check=True,
    )
    routers = [
        arg for i in range(args.nodes + 1, args.nodes + args.routers + 1) for arg in ("--limit", f"node{i}")
    ]
    hosts = [arg for i in range(1, args.nodes + 1) for arg in ("--limit", f"node{i}")] + routers
    converge_s, _, _ = pyinfra(hosts)
    rows = [
        measure("1 node" + (" + router" if routers else ""), ["--limit", "node1", *routers], args.runs),
        measure(f"{args.nodes} nodes", hosts, args.runs),
    ]
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    lines = [
        f"no-op re-run of deploy.py on sandbox nodes{' behind a router' if routers else ''} (commit {commit}, "
        f"{time.strftime('%Y-%m-%d %H:%M')}, converge of {args.nodes} nodes first: {converge_s:.1f} s)",
        "",
        f"{'run':<16} {'median s':>9} {'min s':>7} {'max s':>7} {'SSH commands/host':>18} "
        f"{'transfers/host':>15}",
    ]
    for r in rows:
        lines.append(
            f"{r['label']:<16} {r['median_s']:>9.2f} {r['min_s']:>7.2f} {r['max_s']:>7.2f} "
            f"{r['commands_per_host']:>18.0f} {r['transfers_per_host']:>15.0f}"
        )
    lines.append(f"\n{args.nodes} nodes / 1 node: {rows[1]['median_s'] / rows[0]['median_s']:.2f}x the time")
    text = "\n".join(lines)
    print(text)
    out = REPO / "bench" / "results" / f"noop-rerun-{time.strftime('%Y-%m-%d')}.txt"
    with out.open("a") as f:
        f.write(text + "\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
