#!/usr/bin/env python3
"""How long `make status` takes on a fleet of sandbox nodes, against its goal (2 s for 8 nodes).

    python3 bench/status.py [--nodes 8] [--routers 1] [--runs 5] [--no-converge] [--goal 2.0]

Boots (or keeps) `--nodes` sandbox nodes and `--routers` router nodes, converges them once with
the deploy (skipped with --no-converge: the nodes already run what they should), then times
`--runs` runs of `make status JSON=1` from the shell's view (Python's start, the inventory, one
SSH command per host, all at once, the rendering) and `make status` once as the operator reads
it. Every run must hear from every host (a host without a status is an error, not a time).
Reports per run: the wall time, the command's own time (its JSON's took_s) and the slowest host's
round trip; then the median's ratio to the goal. The table goes to stdout and to
bench/results/status-<date>.txt.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from common import Report, fmt_s, median  # noqa: E402

INVENTORY = "inventory/sandbox.py"


def sandbox(nodes, routers):
    subprocess.run(["make", "-s", "wheels", "router-wheels", "wheelhouse-sandbox"], cwd=REPO, check=True)
    up = [sys.executable, "sandbox/sandbox.py", "up", "--nodes", str(nodes), "--routers", str(routers)]
    subprocess.run(up, cwd=REPO, check=True)


def converge():
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pyinfra", "-y", INVENTORY, "deploy.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        sys.exit(f"converge failed (exit {done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    return time.monotonic() - started


def make_status(*extra):
    """(wall seconds, exit status, stdout) of one `make status`."""
    started = time.monotonic()
    done = subprocess.run(
        ["make", "-s", "status", f"INVENTORY={INVENTORY}", *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    return time.monotonic() - started, done.returncode, done.stdout + done.stderr


def timed_run(expected):
    wall, code, output = make_status("JSON=1")
    try:
        body = json.loads(output)
    except ValueError:
        sys.exit(f"make status JSON=1 printed no JSON (exit {code}):\n{output[-3000:]}")
    hosts = body["nodes"] + body["routers"]
    silent = [f"{h['host']}: {h['error']}" for h in hosts if not h["answered"]]
    if code != 0 or silent or len(hosts) != expected:
        sys.exit(f"make status: exit {code}, {len(hosts)} of {expected} hosts; no status from: {silent}")
    return {"wall_s": wall, "took_s": body["took_s"], "slowest_s": max(h["seconds"] for h in hosts)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--routers", type=int, default=1)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--goal", type=float, default=2.0, help="seconds `make status` may take")
    parser.add_argument("--no-converge", action="store_true", help="the nodes already run the deploy")
    args = parser.parse_args(argv)
    sandbox(args.nodes, args.routers)
    converge_s = None if args.no_converge else converge()
    runs = [timed_run(args.nodes + args.routers) for _ in range(args.runs)]
    table_s, code, screen = make_status()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()

    report = Report()
    report(
        f"make status on {args.nodes} sandbox nodes + {args.routers} router(s) (commit {commit}, "
        f"{time.strftime('%Y-%m-%d %H:%M')}; converge first: {fmt_s(converge_s, 1)} s)"
    )
    report()
    report.table(
        ["run", "wall s", "inside s", "slowest host s", "goal s", "wall / goal"],
        [
            (
                f"JSON=1 #{i}",
                fmt_s(r["wall_s"]),
                fmt_s(r["took_s"]),
                fmt_s(r["slowest_s"]),
                fmt_s(args.goal),
                f"{r['wall_s'] / args.goal:.2f}",
            )
            for i, r in enumerate(runs, 1)
        ]
        + [
            (
                "median",
                fmt_s(median([r["wall_s"] for r in runs])),
                fmt_s(median([r["took_s"] for r in runs])),
                fmt_s(median([r["slowest_s"] for r in runs])),
                fmt_s(args.goal),
                f"{median([r['wall_s'] for r in runs]) / args.goal:.2f}",
            ),
            ("table (once)", fmt_s(table_s), "-", "-", fmt_s(args.goal), f"{table_s / args.goal:.2f}"),
        ],
    )
    verdict = "meets" if median([r["wall_s"] for r in runs]) <= args.goal else "misses"
    report()
    report(f"median wall time {verdict} the {args.goal:g} s goal; the table as printed (exit {code}):")
    report()
    for line in screen.splitlines():
        report("  " + line)
    report.save(REPO / "bench" / "results" / f"status-{time.strftime('%Y-%m-%d')}.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
