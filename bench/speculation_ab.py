#!/usr/bin/env python3
"""Is speculation paying? The incident on sandbox nodes: EAGLE-3 against baseline at 82 tok/s.

    python3 bench/speculation_ab.py [--id 8] [--keep] [--out FILE]

Brings up (or reuses) sandbox --id (default 8) in $SANDBOX_DIR (default .sandbox-<id>): 2 nodes
behind one router (smg), every stand-in decoding at the incident's baseline rate
(bench/speculation_ab_inventory.py: SGLANG_STANDIN_TOKENS_PER_SECOND=82), and converges the
fleet on profile sandbox. Then:

(a) while client threads send streaming requests through the router the whole time,
    `make ab PROFILES=sandbox,sandbox-eagle3,sandbox-eagle3-3step HOST=node1`: node1 out of
    rotation, each profile restarted, gated and benchmarked, node1 home and back in rotation;
    the requests that failed meanwhile are counted (goal 0);
(b) deploys sandbox-eagle3 on node1 with throughput.min_speedup_over: sandbox (the inventory's
    profile_overrides for the nodes in $SPECULATION_AB_MUST_PAY) and shows the decode check's
    verdict: "EAGLE3 decodes 60.x tok/s, NN % slower than sandbox's 82.x on this node";
(c) prints the A/B's table (tok/s, spread, TTFT p50/p95, accept length, restart+gate s, bench
    s), the verdict, requests sent/failed, and the A/B's wall time per profile against one
    restart plus its benchmark (goal <= 1.2x).

The sandbox is taken down at the end (--keep leaves it up). Output to stdout and
bench/results/speculation-ab-<date>.txt.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
from fleet_load import Watcher, router_view, run_load  # noqa: E402

from sglang_deploy.node.lib import ab_bench  # noqa: E402
from sglang_deploy.report.ab_runner import timing_line  # noqa: E402

MODEL = "tiny-standin"
INVENTORY = "bench/speculation_ab_inventory.py"
PROFILES = ("sandbox", "sandbox-eagle3", "sandbox-eagle3-3step")
HOST = "node1"
RATIO_GOAL = 1.2
VERDICT = re.compile(r"\S+ decodes [\d.]+ tok/s, [^\n]*? on this node[^\n]*")


class Out:
    """Lines printed as they come and kept for the results file."""

    def __init__(self):
        self.lines = []

    def __call__(self, text=""):
        print(text, flush=True)
        self.lines.append(text)


def decode_verdicts(output):
    """The decode check's "speculation must pay" lines in a deploy's output, each once."""
    found = []
    for match in VERDICT.finditer(output):
        line = match.group(0).strip().rstrip("'\",)")
        if line not in found:
            found.append(line)
    return found


def newest_report(folder, host, before):
    """The A/B's JSON that appeared in ``folder`` since ``before`` (a set of paths), or None."""
    fresh = sorted(set(Path(folder).glob(f"{host}-*.json")) - before)
    return json.loads(fresh[-1].read_text()) if fresh else None


def summary(found, load, speed_line, watcher=None):
    """The closing lines: table, verdict, requests (and, with ``watcher``, the router's view
    meanwhile), wall-time ratio against its goal."""
    lines = ab_bench.table(found) if found else ["the A/B wrote no report"]
    lines.append(
        "requests through the router during the A/B: sent %d (%d long), failed %d (goal 0)"
        % (load.sent, load.long_sent, load.failed)
        + ("; first: %s" % load.failures[:3] if load.failed else "")
    )
    if watcher is not None:
        lines.append(
            "router's view meanwhile (%d samples): at least %d of %d nodes healthy; out of the router: %s"
            % (
                watcher.samples,
                watcher.min_in_router,
                len(watcher.node_ports),
                ", ".join("%s %.1f s" % (name, s) for name, s in sorted(watcher.out_s.items())),
            )
        )
    timing = (found or {}).get("timing")
    if timing and timing.get("ratio") is not None:
        lines.append(timing_line(timing))
        lines.append(
            "A/B per profile / (one restart + its benchmark): %.2fx (goal <= %.1fx: %s)"
            % (timing["ratio"], RATIO_GOAL, "met" if timing["ratio"] <= RATIO_GOAL else "MISSED")
        )
    else:
        lines.append("wall time: no trial with a restart and a benchmark")
    lines.append("decode check of sandbox-eagle3 on %s: %s" % (HOST, speed_line or "no verdict line"))
    return lines


def run(argv, env, timeout, out=None):
    """(exit status, output); ``out`` gets every line as it comes."""
    proc = subprocess.Popen(
        argv,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    seen = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if out:
                out("  " + line.rstrip())
    finally:
        timer.cancel()
    return proc.wait(), "".join(seen)


def deploy(env, profiles, limit=None, must_pay=""):
    env = {
        **env,
        "SGLANG_DEPLOY_SANDBOX_PROFILES": ",".join(f"{n}={p}" for n, p in profiles.items()),
        "SPECULATION_AB_MUST_PAY": must_pay,
    }
    argv = [
        sys.executable,
        "-m",
        "pyinfra",
        "-y",
        INVENTORY,
        "deploy.py",
        *(["--limit", limit] if limit else []),
    ]
    started = time.monotonic()
    code, output = run(argv, env, 1800)
    return code, output, time.monotonic() - started


def fleet(sandbox_dir):
    state = json.loads((sandbox_dir / "state.json").read_text())
    nodes = {n["name"]: n["server_port"] for n in state["nodes"] if n.get("role", "node") == "node"}
    routers = [n for n in state["nodes"] if n.get("role") == "router"]
    return nodes, routers[0]["name"], routers[0]["server_port"]


def wait_in_router(router_port, count, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        view = router_view(router_port) or {}
        if sum(view.values()) >= count:
            return view
        time.sleep(1)
    return router_view(router_port)


def measure(out, env, sandbox_dir, args):
    nodes, router, router_port = fleet(sandbox_dir)
    out(
        f"fleet: {', '.join(sorted(nodes))} behind {router} (port {router_port}); stand-in at {args.rate:g} tok/s"
    )
    code, output = run([sys.executable, "-m", "sglang_deploy.plan.wheelhouse", "--router"], env, 900)
    if code != 0:
        out(output[-2000:])
        raise SystemExit("router wheels: exit %d" % code)
    code, output, seconds = deploy(env, {**{n: "sandbox" for n in nodes}, router: "sandbox"})
    out(f"converge on sandbox: exit {code}, {seconds:.0f} s")
    if code != 0:
        out(output[-4000:])
        raise SystemExit("the fleet did not converge")
    out(f"router's view: {wait_in_router(router_port, len(nodes))}")

    # (a) the A/B under load through the router.
    reports = REPO / "reports" / "ab"
    before = set(reports.glob(f"{HOST}-*.json")) if reports.is_dir() else set()
    stop, load = threading.Event(), {}
    client = threading.Thread(
        target=lambda: load.update(
            r=run_load(
                router_port,
                MODEL,
                count=1_000_000,
                concurrency=args.concurrency,
                short_tokens=8,
                long_tokens=120,
                long_every=5,
                stop=stop,
            )
        )
    )
    watcher = Watcher(router_port, nodes, interval=0.5)
    watcher.start()
    client.start()
    out(
        f"== make ab PROFILES={','.join(PROFILES)} HOST={HOST}, {args.concurrency} clients through the router"
    )
    try:
        code, output = run(
            [
                "make",
                "--no-print-directory",
                "ab",
                f"PROFILES={','.join(PROFILES)}",
                f"HOST={HOST}",
                f"INVENTORY={INVENTORY}",
                f"PYTHON={sys.executable}",
                f"AB_ARGS=--repeats {args.repeats} --max-tokens {args.max_tokens}",
            ],
            env,
            2400,
            out,
        )
    finally:
        time.sleep(2)  # the node back in the router's rotation before the load stops
        stop.set()
        client.join()
        watcher.stop.set()
        watcher.join()
    out(f"make ab: exit {code}")
    found = newest_report(reports, HOST, before)

    # (b) the EAGLE-3 deploy on node1, judged against sandbox's figure there.
    out(f"== deploy sandbox-eagle3 on {HOST} with throughput.min_speedup_over: sandbox")
    code, output, seconds = deploy(env, {HOST: "sandbox-eagle3"}, limit=HOST, must_pay=HOST)
    verdicts = decode_verdicts(output)
    out(f"deploy: exit {code}, {seconds:.0f} s")
    for line in output.splitlines():
        if "decode check" in line or "decodes" in line:
            out("  " + line.strip()[:300])
    return found, load["r"], verdicts[0] if verdicts else None, watcher


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--id", type=int, default=8, help="the sandbox's id (ports 100*id up)")
    parser.add_argument("--rate", type=float, default=82.0, help="the stand-in's baseline tok/s")
    parser.add_argument("--concurrency", type=int, default=2, help="client threads through the router")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-tokens", default="32,96")
    parser.add_argument("--keep", action="store_true", help="leave the sandbox up")
    parser.add_argument(
        "--out", default=str(REPO / "bench" / "results" / f"speculation-ab-{time.strftime('%Y-%m-%d')}.txt")
    )
    args = parser.parse_args(argv)
    sandbox_dir = Path(os.environ.get("SANDBOX_DIR") or REPO / f".sandbox-{args.id}").resolve()
    env = {
        **os.environ,
        "SANDBOX_DIR": str(sandbox_dir),
        "SANDBOX_ID": str(args.id),
        "SPECULATION_AB_TOKENS_PER_SECOND": f"{args.rate:g}",
    }
    out = Out()
    started = time.monotonic()
    out(
        f"speculation A/B, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, sandbox {args.id} in {sandbox_dir}"
    )
    sandbox = [sys.executable, "sandbox/sandbox.py"]
    try:
        code, output = run(
            [*sandbox, "up", "--id", str(args.id), "--nodes", "2", "--routers", "1"], env, 1200
        )
        if code != 0:
            out(output[-3000:])
            raise SystemExit("sandbox up: exit %d" % code)
        found, load, speed_line, watcher = measure(out, env, sandbox_dir, args)
    finally:
        if not args.keep:
            code, _ = run([*sandbox, "down"], env, 600)
            out(f"sandbox {args.id} down: exit {code}")
    out()
    for line in summary(found, load, speed_line, watcher):
        out(line)
    out(f"bench wall time: {time.monotonic() - started:.0f} s")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(out.lines) + "\n")
    print(f"saved {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
