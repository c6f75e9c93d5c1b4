#!/usr/bin/env python3
"""A fleet change by batch size: batch 1, 25 %, 50 % and all at once, behind the gateway.

    python3 bench/fleet_change.py [--load-seconds 25] [--requests 400] [--batches 1,25%,50%,100%]

Needs 8 sandbox nodes behind a router (`python3 sandbox/sandbox.py up --nodes 8 --routers 1`).
The fleet is converged on a profile whose start lasts --load-seconds; then, for each batch
setting, one deploy changes every node's profile (two profiles alternate, so each run is a
change) while a bounded load (--requests streaming chat requests, 4 concurrent, every 4th 400
tokens) runs through the router. Per run: wall time; the share of it that is preparation (from
the deploy's start to its first restart: venvs, staging, preflight on every node at once); the
minimum number of nodes serving and healthy in the router at any instant; requests failed; the
waves the deploy said. Ratios against batch 1. Output to stdout and
bench/results/fleet-change-<date>.txt.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))
from first_start import MODEL, fleet, fleet_deploy_command, waves_said  # noqa: E402
from fleet_load import deploy_under_load  # noqa: E402

RESTART = re.compile(r"--> Starting operation: (?:.+ \| )?Restart \(configuration changed\)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def timed_deploy(profile, names, router, extra=()):
    """(exit, output, wall seconds, seconds until the first restart operation started)."""
    argv, env = fleet_deploy_command(profile, names, router, extra)
    started = time.monotonic()
    process = subprocess.Popen(
        argv,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    lines, first_restart = [], None
    for line in process.stdout:
        lines.append(line)
        if first_restart is None and RESTART.search(ANSI.sub("", line)):
            first_restart = time.monotonic() - started
    process.wait()
    seconds = time.monotonic() - started
    return process.returncode, "".join(lines), seconds, first_restart


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load-seconds", type=float, default=25.0)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--batches", default="1,25%,50%,100%")
    args = parser.parse_args()
    ports, router, router_port = fleet()
    names = sorted(ports)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    rows, lines = [], []
    with tempfile.TemporaryDirectory() as tmp:
        profiles = []
        for i in range(2):
            path = Path(tmp) / f"change-{i}.yml"
            path.write_text(
                f"extends: {REPO}/profiles/sandbox.yml\n"
                f"env:\n  SGLANG_STANDIN_LOAD_SECONDS: {args.load_seconds:g}\n  SGLANG_DEPLOY_BENCH_TURN: {'ab'[i]}\n"
            )
            profiles.append(str(path))
        code, output, seconds, _ = timed_deploy(profiles[1], names, router)
        if code != 0:
            sys.exit(f"converging the fleet failed:\n{output[-4000:]}")
        lines.append(f"converged {len(names)} nodes on the first profile in {seconds:.1f} s")
        for i, batch in enumerate(args.batches.split(",")):
            profile = profiles[i % 2]
            (code, output, seconds, prep), load, watcher = deploy_under_load(
                router_port,
                ports,
                MODEL,
                args.requests,
                lambda p=profile, b=batch: timed_deploy(p, names, router, ["--data", f"rolling_batch={b}"]),
            )
            if code != 0:
                print(output[-4000:], file=sys.stderr)
            rows.append((batch, code, seconds, prep, watcher, load))
            lines += [f"batch {batch}: " + line for line in waves_said(output)]
    base = rows[0][2]
    table = [
        f"fleet change ({len(names)} nodes + router, a {args.load_seconds:g} s start, {args.requests} requests "
        f"per run, commit {commit}{time.strftime(', %Y-%m-%d %H:%M)')}",
        f"{'batch':>6} {'exit':>4} {'wall s':>7} {'vs 1':>6} {'prep s':>7} {'prep %':>6} "
        f"{'min serving':>11} {'min in router':>13} {'failed':>8} {'load s':>7}",
    ]
    for batch, code, seconds, prep, watcher, load in rows:
        prep_s = f"{prep:7.1f}" if prep is not None else f"{'-':>7}"
        share = f"{prep / seconds:6.0%}" if prep is not None else f"{'-':>6}"
        table.append(
            f"{batch:>6} {code:>4} {seconds:7.1f} {seconds / base:5.2f}x {prep_s} {share} "
            f"{watcher.min_serving:>7} of {len(names)} {watcher.min_in_router:>13} "
            f"{load.failed:>4}/{load.sent:<3} {load.seconds:7.1f}"
        )
    text = "\n".join(table + [""] + lines) + "\n"
    print(text)
    results = REPO / "bench" / "results"
    results.mkdir(exist_ok=True)
    with open(results / f"fleet-change-{time.strftime('%Y-%m-%d')}.txt", "a") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
