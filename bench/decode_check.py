"""What the decode check adds to a deploy: deploys that restart the server with the profile's
decode check on and with `throughput: {enabled: false}`, on the same node in the same run.

    python bench/decode_check.py                     # the sandbox inventory's first host
    python bench/decode_check.py --host node2 --rounds 5

Per round, two deploys (`python -m pyinfra -y INVENTORY deploy.py --limit HOST`), one per arm:
  on    a profile extending --base-profile (default `sandbox`: its throughput section as is)
  off   the same profile with `throughput: {enabled: false}`
Every deploy changes one env value (SGLANG_DEPLOY_BENCH_TURN=<deploy number>), so every deploy
restarts and passes the readiness gate; the order of the arms swaps every round (on off, off on,
...), so a drift in the node's speed falls on both arms alike.

Figures, per deploy
  wall        the whole deploy (process start to exit, on the controller)
  gate->saved the deploy's `ready in` line to its `saved ... as last known good` line: the
              workers check, the decode check (arm on) and the save
  check (output)  arm on: the arrival of the node's `decode check:` line minus the arrival of
              the line before it (the workers check's last line): the check's process, relayed
  check (node)    arm on: the node's own clock: journald's timestamp of the check's
              `GET /server_info` access line (the check's first request) to the mtime of the
              history file it appends to (/var/lib/sglang-deploy/<unit>/throughput.jsonl)
  rate, TTFT  the history entry the check appended (decode_tok_s median, ttft_ms)

The profile defaults' duration (Throughput's requests + warmup_requests at its max_tokens) at
--rate tok/s is computed from that run's measurements: per request TTFT + (tokens - 1) / rate,
plus the check's measured fixed cost (its duration minus its own requests' computed time).
Prints tables and ratios; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    REPO,
    Report,
    deploy,
    fmt_s,
    invocations,
    journal,
    journal_first,
    median,
    node_of,
    write_profile,
)

from sglang_deploy.plan.hosts import inventory_hosts  # noqa: E402
from sglang_deploy.profile.schema import Throughput  # noqa: E402

TURN_VAR = "SGLANG_DEPLOY_BENCH_TURN"  # the env value every deploy changes
ARMS = ("on", "off")
CHECK_LINE = "decode check: "
SAVED = re.compile(r"saved \S+ as last known good|\S+ is already the last known good")
FIRST_REQUEST = r'"GET /server_info HTTP/1\.1"'


@dataclass
class Sample:
    arm: str
    round: int
    wall: float
    gate_to_saved: float = float("nan")
    check_output: float = float("nan")
    check_node: float = float("nan")
    entry: dict = field(default_factory=dict)  # the history entry the check appended (arm on)
    before_check: str = ""  # the line the output figure is measured from


# -- Pure figures (tested in tests/unit/test_bench_decode_check.py) ---------------------------


def check_gap(lines):
    """(seconds, text of the line before) from the arrival of the line before the first
    `decode check:` line to that line's arrival; None when the deploy shows no check."""
    for i, (when, text) in enumerate(lines):
        if CHECK_LINE in text and i > 0:
            return when - lines[i - 1][0], lines[i - 1][1]
    return None


def gate_to_saved(lines):
    """Seconds from the `ready in` line to the `saved ... as last known good` line after it."""
    ready = next((when for when, text in lines if "] ready in " in text), None)
    if ready is None:
        return None
    saved = next((when for when, text in lines if when >= ready and SAVED.search(text)), None)
    return None if saved is None else saved - ready


def spread(values):
    """{"n", "median", "min", "max"} of some seconds (NaN figures when there are none)."""
    values = [v for v in values if v == v]
    nan = float("nan")
    return {
        "n": len(values),
        "median": median(values),
        "min": min(values) if values else nan,
        "max": max(values) if values else nan,
    }


def compare(on, off):
    """The on arm against the off arm, by medians: (added seconds, ratio on / off)."""
    a, b = spread(on)["median"], spread(off)["median"]
    return a - b, (a / b if b else float("nan"))


def request_seconds(ttft_s, max_tokens, rate):
    """One streamed request: its first token after ``ttft_s``, then the rest at ``rate``."""
    return ttft_s + (max_tokens - 1) / rate


def fixed_cost(check_s, requests, ttft_s, max_tokens, rate):
    """The check's cost beyond its requests: its measured duration minus ``requests`` requests
    (timed and warmup) computed at the measured TTFT and rate."""
    return check_s - requests * request_seconds(ttft_s, max_tokens, rate)


def projected(fixed_s, requests, ttft_s, max_tokens, rate):
    """The check's duration with ``requests`` requests of ``max_tokens`` at ``rate`` tok/s."""
    return fixed_s + requests * request_seconds(ttft_s, max_tokens, rate)


def summary_rows(samples):
    """Rows (figure, arm, n, median, min, max) of the summary table."""
    rows = []
    for label, attr in (("deploy wall s", "wall"), ("gate -> saved s", "gate_to_saved")):
        for arm in ARMS:
            s = spread([getattr(x, attr) for x in samples if x.arm == arm])
            rows.append((label, arm, s["n"], fmt_s(s["median"]), fmt_s(s["min"]), fmt_s(s["max"])))
    for label, attr in (("check s (deploy output)", "check_output"), ("check s (node clock)", "check_node")):
        s = spread([getattr(x, attr) for x in samples if x.arm == "on"])
        rows.append((label, "on", s["n"], fmt_s(s["median"], 3), fmt_s(s["min"], 3), fmt_s(s["max"], 3)))
    return rows


# -- On the node -----------------------------------------------------------------------------


def history(node, path):
    """The node's decode check history, one dict per line (a missing file: none)."""
    out = node.ssh(f"cat {shlex.quote(path)} 2>/dev/null || true")
    entries = []
    for line in out.splitlines():
        try:
            entries.append(json.loads(line))
        except ValueError:
            continue
    return entries


def mtime(node, path):
    out = node.ssh(f"stat -c %.9Y {shlex.quote(path)}", check=False).strip()
    return float(out) if out else float("nan")


def node_check_seconds(node, run, history_path):
    """The node's own clock: the check's first request (its /server_info access line in the
    journal of the start the deploy made) to the history file's mtime (written as it ends)."""
    starts = invocations(run)
    if not starts:
        return float("nan")
    entries = journal(node, starts[-1][1])
    chat = journal_first(entries, r'"POST /v1/chat/completions HTTP/1\.1"')
    first = [e for e in entries if re.search(FIRST_REQUEST, e[1]) and (not chat or e[0] <= chat[0])]
    if not first:
        return float("nan")
    return mtime(node, history_path) - first[-1][0]


def profile_text(tmp, arm, base, turn):
    path = write_profile(tmp, f"bench-decode-{arm}", base, {TURN_VAR: turn})
    if arm == "off":
        with open(path, "a") as f:
            f.write("throughput:\n  enabled: false\n")
    return path


# -- Main -----------------------------------------------------------------------------------


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--inventory", default="inventory/sandbox.py")
    p.add_argument(
        "--host", help="the one host to use (its server is restarted); default: the inventory's first"
    )
    p.add_argument("--base-profile", default="sandbox", help="profile the bench's profiles extend")
    p.add_argument("--rounds", type=int, default=3, help="deploys per arm")
    p.add_argument(
        "--rate",
        type=float,
        action="append",
        help="tok/s for the profile defaults' computed duration (repeat; default 60 and 82)",
    )
    p.add_argument(
        "--out", default=str(REPO / "bench" / "results" / f"decode-check-{time.strftime('%Y-%m-%d')}.txt")
    )
    args = p.parse_args(argv)
    rates = args.rate or [60.0, 82.0]
    host = args.host or next(iter(inventory_hosts(args.inventory)), ("?", None))[0]
    node = node_of(args.inventory, host)
    out = Report()
    began = time.time()
    tmp = tempfile.mkdtemp(prefix="bench-decode-check-")
    turn = 0

    def deploy_arm(arm):
        nonlocal turn
        turn += 1
        path = profile_text(tmp, arm, args.base_profile, turn)
        return node.profile(path), deploy(node, path)

    prof, setup = deploy_arm("on")
    service = prof.service.name
    history_path = f"/var/lib/sglang-deploy/{service}/throughput.jsonl"
    check = prof.throughput
    out(
        f"# bench/decode_check.py, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, host {node.name} "
        f"({args.inventory}), unit {service}.service; {args.rounds} rounds, one deploy per arm each"
    )
    out(
        f"# profiles extend {args.base_profile}; every deploy changes {TURN_VAR} (a restart); "
        f"arm on: its throughput section (requests {check.requests}, warmup_requests "
        f"{check.warmup_requests}, max_tokens {check.max_tokens}); arm off: throughput: {{enabled: false}}"
    )
    out(
        "# times: time.time() on the controller, journald __REALTIME_TIMESTAMP and file mtimes on the "
        "node (one clock on sandbox nodes)"
    )
    out()
    if setup.returncode != 0:
        out(f"setup deploy failed (exit {setup.returncode}):\n{setup.tail(40)}")
        out.save(args.out)
        return 1
    out(f"setup: {node.name} serves bench-decode-on ({setup.ended - setup.started:.1f} s deploy)")
    out()

    samples = []
    for r in range(1, args.rounds + 1):
        for arm in ARMS if r % 2 else ARMS[::-1]:
            seen = len(history(node, history_path))
            _, run = deploy_arm(arm)
            restarted = run.first("] ready in ")
            if run.returncode != 0 or not restarted:
                out(
                    f"  round {r} {arm}: deploy exit {run.returncode}, restarted: {bool(restarted)}; "
                    f"skipped. Last lines:\n{run.tail(25)}"
                )
                continue
            sample = Sample(arm, r, run.ended - run.started)
            sample.gate_to_saved = gate_to_saved(run.lines) or float("nan")
            new = history(node, history_path)[seen:]
            if arm == "on":
                gap = check_gap(run.lines)
                if gap:
                    sample.check_output, sample.before_check = gap
                sample.check_node = node_check_seconds(node, run, history_path)
                sample.entry = new[-1] if new else {}
            elif new:
                out(f"  round {r} off: the history grew by {len(new)} entries: a check ran?")
            samples.append(sample)
            e = sample.entry
            out(
                f"  round {r} {arm:3}: wall {sample.wall:6.2f} s, gate -> saved "
                f"{fmt_s(sample.gate_to_saved, 3)} s"
                + (
                    f", check {fmt_s(sample.check_output, 3)} s (output) / {fmt_s(sample.check_node, 3)} s "
                    f"(node), {e.get('decode_tok_s')} tok/s, TTFT {e.get('ttft_ms')} ms, "
                    f"{e.get('requests')} requests, {e.get('tokens')} tokens"
                    if arm == "on"
                    else ""
                )
            )

    on = [s for s in samples if s.arm == "on"]
    off = [s for s in samples if s.arm == "off"]
    out()
    out("== Summary ==")
    out.table(
        ["figure", "arm", "n", "median", "min", "max"], summary_rows(samples), ["<", "<", ">", ">", ">", ">"]
    )
    out()
    added, ratio = compare([s.wall for s in on], [s.wall for s in off])
    g_added, g_ratio = compare([s.gate_to_saved for s in on], [s.gate_to_saved for s in off])
    out(
        f"Added by the check (medians, on - off): deploy wall {fmt_s(added)} s (ratio on/off "
        f"{fmt_s(ratio, 3)}); gate -> saved {fmt_s(g_added, 3)} s (ratio {fmt_s(g_ratio, 3)})"
    )
    befores = [s.before_check for s in on if s.before_check]
    if befores:
        out(
            f"  check (deploy output) is measured from the line before the node's `decode check:` "
            f"line, e.g. {befores[0].strip()[:90]!r}"
        )

    entries = [s for s in on if s.entry.get("decode_tok_s") and s.check_output == s.check_output]
    if entries:
        out()
        out("== The profile defaults, computed from this run ==")
        defaults = Throughput()
        n_def = defaults.requests + defaults.warmup_requests
        rows, fixed_all = [], []
        for s in entries:
            e = s.entry
            per_request_tokens = e["tokens"] / e["requests"]
            fixed_all.append(
                fixed_cost(
                    s.check_output,
                    check.requests + check.warmup_requests,
                    e["ttft_ms"] / 1000,
                    per_request_tokens,
                    e["decode_tok_s"],
                )
            )
        fixed = median(fixed_all)
        ttft = median([s.entry["ttft_ms"] / 1000 for s in entries])
        rate_here = median([s.entry["decode_tok_s"] for s in entries])
        tokens_here = median([s.entry["tokens"] / s.entry["requests"] for s in entries])
        out(
            f"measured: {rate_here:.1f} tok/s, TTFT {ttft * 1000:.1f} ms, {tokens_here:g} tokens per request; "
            f"the check's fixed cost (its output duration - {check.requests + check.warmup_requests} "
            f"requests x (TTFT + (tokens - 1) / rate)) {fixed:.3f} s (median of {len(fixed_all)}; "
            f"min {min(fixed_all):.3f}, max {max(fixed_all):.3f})"
        )
        rows.append(
            (
                f"{args.base_profile}: {check.requests} + {check.warmup_requests} warmup x "
                f"{check.max_tokens} tokens",
                f"{rate_here:.1f}",
                fmt_s(median([s.check_output for s in entries]), 2),
                "measured (deploy output)",
            )
        )
        for rate in rates:
            rows.append(
                (
                    f"defaults: {defaults.requests} + {defaults.warmup_requests} warmup x "
                    f"{defaults.max_tokens} tokens",
                    f"{rate:g}",
                    fmt_s(projected(fixed, n_def, ttft, defaults.max_tokens, rate), 2),
                    "COMPUTED: fixed cost + requests x (TTFT + (tokens - 1) / rate)",
                )
            )
        out.table(["check", "tok/s", "seconds", "how"], rows, ["<", ">", ">", "<"])

    out()
    out(
        f"Left {node.name} serving bench-decode-{samples[-1].arm if samples else 'on'}. "
        f"Whole bench: {time.time() - began:.0f} s."
    )
    out.save(args.out)
    print(f"saved to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
