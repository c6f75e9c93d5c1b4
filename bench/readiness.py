"""How soon a deploy knows that a (re)start is serving, or dead and why: our readiness gate
against the incident's loop, on the same node in the same run.

    python bench/readiness.py --host node3                      # a sandbox node (stand-in engine)
    python bench/readiness.py --inventory inventory/gpu.py --host gpu1 --base-profile baseline \
        --no-standin --scenarios ready --starts 5               # a real node (see bench/README.md)

Methods
  gate      real deploys (`python -m pyinfra -y INVENTORY deploy.py --limit HOST`), alternating
            between two profiles that differ in one env value so that each deploy restarts; the
            verdict is the moment the gate's output line `ready in …` / `[ 4.5s] failed:
            <cause>: …` arrives on the controller (streamed through the restart cycle).
  incident  `ssh HOST systemctl restart <unit>`, then the incident's loop: up to 50 tries of
            `ssh HOST curl -s -m 5 http://127.0.0.1:PORT/v1/models | grep NAME`, `sleep 15`
            between tries, then `grep "fired up\\|Error"` in the unit's log (journalctl).
            The node's deploy lock is held meanwhile, so no deploy interleaves.

Figures
  P1        really ready -> verdict: the journal's own timestamp (__REALTIME_TIMESTAMP, µs) of
            `The server is fired up and ready to roll!` (logged just after /ping turned 200)
            to the verdict. Negative = the method said "ready" before the server was (wrong).
  P2        crash -> failure reported with a cause: the journal timestamp of the first
            Traceback/error line of the start to the gate's `failed: <cause>: …` line as it
            streams to the controller (the deploy's summary `readiness gate failed:` line must
            follow, but it is printed from the cycle's result: after the rollback's own restart
            and gate, so it times the rollback too and comes after the restored start).
            The incident loop cannot notice a crash before its last try; it is capped at
            --crash-tries tries (measured), and the full 50-try figure is computed from the
            measured try and grep durations (labelled "computed").
  rollback  the gate's `failed:` line -> `rolled back: serving <profile> again` (restore the last
            configuration that passed, restart on it, gate it).

With the stand-in (sandbox nodes) the start-up is set by SGLANG_STANDIN_* knobs; the incident
loop's first try lands at staggered offsets over its 15 s period, as a real start of minutes
lands anywhere in that period. Prints tables and ratios; asserts nothing.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    INVOCATION,
    REPO,
    DeployLock,
    Report,
    deploy,
    fmt_s,
    invocations,
    journal,
    journal_first,
    median,
    node_of,
    stamp,
    unit_show,
    wait_journal,
    write_profile,
)

from sglang_deploy.node.lib import result  # noqa: E402  (common puts the repository on sys.path)
from sglang_deploy.plan.commands import last_good_show_command  # noqa: E402

READY_LINE = r"The server is fired up and ready to roll!"
HTTP_UP_LINE = r"Uvicorn running on"
ERROR_LINE = r"Traceback|[A-Za-z]+Error\b|[Ee]xception"
EXIT_LINE = r"Main process exited"
EXCEPTION_LINE = r"^[\w.]+(Error|Exception): "
TURN_VAR = "SGLANG_DEPLOY_BENCH_TURN"  # the one env value the two ready profiles differ in
DROP_IN = "zz-bench-readiness-crash.conf"
# The gate's own failure line, streamed as it happens: "[   5.2s] failed: cuda-oom: …"
GATE_FAILED = re.compile(r"\[\s*\d+(?:\.\d+)?s\] failed: ([\w-]+): ")
P1_TARGET, P2_TARGET = 0.5, 2.0


@dataclass
class ReadySample:
    method: str
    start: int
    verdict_at: float
    ready_at: float  # journal: fired up
    http_up_at: float  # journal: port open (/v1/models answers from here)
    note: str = ""

    @property
    def p1(self):
        return self.verdict_at - self.ready_at


@dataclass
class CrashSample:
    method: str
    start: int
    crash_at: float  # journal: first Traceback/error line
    exit_at: float  # journal: main process exited
    verdict_at: float  # measured verdict (gate: failed line; incident: capped loop + grep)
    cause: str = ""
    computed_at: float = float("nan")  # incident: the full loop, computed
    rollback_s: float = float("nan")
    rollback_ready: str = ""
    rollback_to: str = ""
    first_exception: str = ""  # journal: the first exception line (the root cause)

    @property
    def p2(self):
        return self.verdict_at - self.crash_at


# -- The gate, through real deploys -----------------------------------------------------------


def gate_ready(node, profile_path, start, out):
    run = deploy(node, profile_path)
    ready = run.first("] ready in ")
    starts = invocations(run)
    if run.returncode != 0 or not ready or not starts:
        out(
            f"  gate start {start}: deploy did not restart and pass the gate "
            f"(exit {run.returncode}); skipped. Last lines:\n{run.tail(25)}"
        )
        return None
    invocation = [inv for when, inv in starts if when <= ready[0]][-1]
    fired = wait_journal(node, invocation, READY_LINE)
    entries = journal(node, invocation)
    http_up = journal_first(entries, HTTP_UP_LINE)
    if not fired or not http_up:
        out(f"  gate start {start}: no '{READY_LINE}' in the journal of {invocation}; skipped")
        return None
    said = re.search(r"ready in (\S+)", ready[1]).group(1)
    return ReadySample("gate", start, ready[0], fired[0], http_up[0], note=f"gate: ready in {said}")


def crashed_start(lines):
    """The start whose gate failed, from a deploy's output lines [(arrival, text)]:
    (invocation, (arrival, text) of the gate's failure line, cause key), or None.

    It is the last start announced ("started …, invocation X") before the first gate failure
    line. Not the last one before the deploy's summary `readiness gate failed:`: that line comes
    from the cycle's result, after the rollback's restart announced the restored start."""
    invocation = None
    for when, text in lines:
        started = INVOCATION.search(text)
        if started:
            invocation = started.group(3)
            continue
        failed = GATE_FAILED.search(text)
        if failed and invocation:
            return invocation, (when, text), failed.group(1)
    return None


def gate_crash(node, profile_path, start, out):
    run = deploy(node, profile_path)
    summary = run.first("readiness gate failed:")
    crashed = crashed_start(run.lines)
    if run.returncode == 0 or not summary or not crashed:
        out(
            f"  gate crash {start}: no start whose gate said 'failed: <cause>:', or no 'readiness gate failed' "
            f"(exit {run.returncode}); skipped. Last lines:\n{run.tail(25)}"
        )
        return None
    invocation, failed, cause = crashed
    # The gate saw the crash in this journal already; journald may still be writing its end.
    crash = wait_journal(node, invocation, ERROR_LINE, timeout=10.0)
    entries = journal(node, invocation)
    exited = journal_first(entries, EXIT_LINE)
    if not crash:
        out(f"  gate crash {start}: no error line in the journal of {invocation}; skipped")
        return None
    sample = CrashSample(
        "gate",
        start,
        crash[0],
        exited[0] if exited else float("nan"),
        failed[0],
        cause=cause,
    )
    exception = journal_first(entries, EXCEPTION_LINE)
    sample.first_exception = exception[1].strip()[:100] if exception else "?"
    rolled = run.first("rolled back: serving", after=failed[0])
    if rolled:
        sample.rollback_s = rolled[0] - failed[0]
        sample.rollback_to = re.search(r"serving (\S+) again", rolled[1]).group(1)
        again = run.first("] ready in ", after=failed[0])
        sample.rollback_ready = re.search(r"ready in (\S+)", again[1]).group(1) if again else "?"
    else:
        what = run.first("rollback", after=failed[0])
        sample.rollback_ready = what[1].strip() if what else "no rollback line"
    return sample


def last_good(node, service):
    """The profile name of the node's last known good configuration (None: nothing saved)."""
    out = node.ssh(
        last_good_show_command("/opt/sglang-deploy/node", f"/var/lib/sglang-deploy/{service}/last-good"),
        check=False,
    )
    found = result.parse(out.splitlines()) or {}
    return (found.get("manifest") or {}).get("profile")


# -- The incident's loop --------------------------------------------------------------------


class IncidentLoop:
    def __init__(self, node, unit, server, served_name, interval):
        """``server``: the server's base URL on the node (service.probe_url)."""
        self.node, self.unit, self.interval = node, unit, interval
        url = shlex.quote(f"{server}/v1/models")
        self.try_line = f"{node.ssh_line(f'curl -s -m 5 {url}')} | grep {shlex.quote(served_name)}"
        self.shown = f"ssh {node.name} curl -s -m 5 {url} | grep {shlex.quote(served_name)}"
        self.try_seconds = []

    def restart(self):
        """systemctl restart over SSH; (time before, time after, invocation of the new start)."""
        before = time.time()
        self.node.ssh(f"systemctl restart {shlex.quote(self.unit)}")
        after = time.time()
        invocation = unit_show(self.node, self.unit, "InvocationID")["InvocationID"]
        return before, after, invocation

    def run(self, tries):
        """Try up to ``tries`` times, ``sleep interval`` between tries: (time of the passing
        try's answer or None, tries made, time the loop ended)."""
        for n in range(1, tries + 1):
            began = time.time()
            passed = (
                subprocess.run(
                    self.try_line, shell=True, capture_output=True, text=True, timeout=60
                ).returncode
                == 0
            )
            ended = time.time()
            self.try_seconds.append(ended - began)
            if passed:
                return ended, n, ended
            if n < tries:
                time.sleep(self.interval)
        return None, tries, time.time()

    def grep_log(self, since):
        """The incident's last step: grep the log for "fired up" or "Error"."""
        out = self.node.ssh(
            f"journalctl -u {shlex.quote(self.unit)} --since @{int(since)} --no-pager"
            f" | grep 'fired up\\|Error'",
            check=False,
        )
        return time.time(), out.splitlines()


def incident_ready(node, loop, service, offset, start, out):
    with DeployLock(node, service):
        _, restarted, invocation = loop.restart()
        time.sleep(max(0.0, restarted + offset - time.time()))
        verdict, tries, _ = loop.run(50)
        fired = wait_journal(node, invocation, READY_LINE)
    if verdict is None or not fired:
        out(f"  incident start {start}: never ready or no '{READY_LINE}'; skipped")
        return None
    http_up = journal_first(journal(node, invocation), HTTP_UP_LINE)
    return ReadySample(
        "incident",
        start,
        verdict,
        fired[0],
        http_up[0] if http_up else float("nan"),
        note=f"first try at +{offset:.1f}s, passed on try {tries}",
    )


def incident_crash(node, loop, service, unit, knobs, tries, tries_full, start, out):
    drop_in_dir = f"/run/systemd/system/{unit}.d"
    body = "[Service]\n" + "".join(f"Environment={k}={v}\n" for k, v in knobs.items())
    with DeployLock(node, service):
        node.ssh(
            f"mkdir -p {drop_in_dir} && printf %s {shlex.quote(body)} > {drop_in_dir}/{DROP_IN}"
            " && systemctl daemon-reload"
        )
        try:
            since, restarted, invocation = loop.restart()
            first_try = time.time()
            first = len(loop.try_seconds)
            verdict, made, loop_end = loop.run(tries)
            grep_done, matches = loop.grep_log(since)
            entries = journal(node, invocation)
        finally:
            node.ssh(
                f"rm -f {drop_in_dir}/{DROP_IN} && systemctl daemon-reload && "
                f"systemctl restart {shlex.quote(unit)}"
            )
    crash, exited = journal_first(entries, ERROR_LINE), journal_first(entries, EXIT_LINE)
    if verdict is not None or not crash:
        out(f"  incident crash {start}: the loop passed or no error line; skipped")
        return None
    tried = loop.try_seconds[first:]
    per_try = sum(tried) / len(tried)
    grep_s = grep_done - loop_end
    computed = first_try + (tries_full - 1) * loop.interval + tries_full * per_try + grep_s
    errors = sum(1 for line in matches if "Error" in line)
    return CrashSample(
        "incident",
        start,
        crash[0],
        exited[0] if exited else float("nan"),
        grep_done,
        cause=f"grep: {errors} 'Error' line(s), no cause named",
        computed_at=computed,
    )


# -- Report ---------------------------------------------------------------------------------


def ready_table(out, samples):
    rows = [
        (
            s.method,
            s.start,
            stamp(s.ready_at),
            stamp(s.verdict_at),
            f"{s.p1:+.3f}",
            "WRONG (before ready)" if s.p1 < 0 else "ok",
            s.note,
        )
        for s in samples
    ]
    out.table(
        ["method", "start", "really ready (journal)", "verdict", "P1 s", "verdict", "note"],
        rows,
        ["<", ">", ">", ">", ">", "<", "<"],
    )


def crash_table(out, samples):
    rows = []
    for s in samples:
        measured = f"{s.p2:.3f}"
        computed = "-" if s.computed_at != s.computed_at else f"{s.computed_at - s.crash_at:.1f} (computed)"
        rollback = "-" if s.rollback_s != s.rollback_s else f"{s.rollback_s:.3f}"
        rows.append(
            (
                s.method,
                s.start,
                stamp(s.crash_at),
                f"{s.exit_at - s.crash_at:.3f}",
                measured,
                computed,
                s.cause,
                rollback,
                s.rollback_to or "-",
                s.rollback_ready or "-",
            )
        )
    out.table(
        [
            "method",
            "start",
            "crash (journal)",
            "exit-crash s",
            "P2 s measured",
            "P2 s full 50-try loop",
            "cause reported",
            "rollback s",
            "rolled back to",
            "its gate: ready in",
        ],
        rows,
        ["<", ">", ">", ">", ">", ">", "<", ">", "<", ">"],
    )
    first = sorted({s.first_exception for s in samples if s.method == "gate" and s.first_exception})
    if first:
        out(
            f"  first exception line in the journal of the crashed starts (the root cause): {'; '.join(first)}"
        )


def summarize(out, args, ready, crashes):
    out()
    out("== Summary ==")
    rows = []
    gate_r = [s for s in ready if s.method == "gate"]
    inc_r = [s for s in ready if s.method == "incident"]
    for name, group in (("gate", gate_r), ("incident loop", inc_r)):
        if not group:
            continue
        right = [s.p1 for s in group if s.p1 >= 0]
        wrong = len(group) - len(right)
        target = f"<= {P1_TARGET}" if name == "gate" else ""
        verdict = ("meets" if median(right) <= P1_TARGET and not wrong else "MISSES") if target else ""
        rows.append(
            (
                "P1 ready -> verdict",
                name,
                len(group),
                fmt_s(median(right), 3),
                fmt_s(max(right) if right else None, 3),
                f"{wrong}/{len(group)}",
                target,
                verdict,
            )
        )
    gate_c = [s for s in crashes if s.method == "gate"]
    inc_c = [s for s in crashes if s.method == "incident"]
    if gate_c:
        p2 = [s.p2 for s in gate_c]
        rows.append(
            (
                "P2 crash -> cause",
                "gate",
                len(gate_c),
                fmt_s(median(p2), 3),
                fmt_s(max(p2), 3),
                "-",
                f"<= {P2_TARGET}",
                "meets" if median(p2) <= P2_TARGET else "MISSES",
            )
        )
        p2x = [s.verdict_at - s.exit_at for s in gate_c if s.exit_at == s.exit_at]
        rows.append(
            (
                "P2' process exit -> cause",
                "gate",
                len(p2x),
                fmt_s(median(p2x), 3),
                fmt_s(max(p2x) if p2x else None, 3),
                "-",
                "",
                "",
            )
        )
    if inc_c:
        p2 = [s.p2 for s in inc_c]
        rows.append(
            (
                f"P2 crash -> grep, {args.crash_tries}-try cap (measured)",
                "incident loop",
                len(inc_c),
                fmt_s(median(p2), 1),
                fmt_s(max(p2), 1),
                "-",
                "",
                "",
            )
        )
        full = [s.computed_at - s.crash_at for s in inc_c]
        rows.append(
            (
                f"P2 crash -> grep, {args.tries}-try loop (COMPUTED)",
                "incident loop",
                len(inc_c),
                fmt_s(median(full), 1),
                fmt_s(max(full), 1),
                "-",
                "",
                "",
            )
        )
    rolled = [s.rollback_s for s in gate_c if s.rollback_s == s.rollback_s]
    if gate_c:
        rows.append(
            (
                "rollback: failed -> serving again",
                "gate",
                f"{len(rolled)}/{len(gate_c)}",
                fmt_s(median(rolled), 3),
                fmt_s(max(rolled) if rolled else None, 3),
                "-",
                "",
                "",
            )
        )
    out.table(
        ["figure", "method", "n", "median s", "max s", "wrong verdicts", "target s", ""],
        rows,
        ["<", "<", ">", ">", ">", ">", "<", "<"],
    )
    out()
    out("Ratios (incident loop / gate, medians):")
    g1 = median([s.p1 for s in gate_r if s.p1 >= 0])
    i1 = median([s.p1 for s in inc_r if s.p1 >= 0])
    if gate_r and inc_r and g1 > 0:
        out(f"  P1: {i1:.2f} s / {g1:.3f} s = {i1 / g1:.0f}x slower to say 'ready' (correct verdicts only)")
    if gate_c and inc_c:
        g2 = median([s.p2 for s in gate_c])
        m2 = median([s.p2 for s in inc_c])
        c2 = median([s.computed_at - s.crash_at for s in inc_c])
        out(
            f"  P2: {m2:.1f} s / {g2:.3f} s = {m2 / g2:.0f}x with the loop capped at "
            f"{args.crash_tries} tries (measured)"
        )
        out(
            f"  P2: {c2:.1f} s / {g2:.3f} s = {c2 / g2:.0f}x with the incident's {args.tries} tries "
            f"(COMPUTED: {args.tries - 1} sleeps x {args.interval:g} s + {args.tries} measured tries "
            f"+ measured grep; not waited for)"
        )
    if inc_r:
        wrong = [s for s in inc_r if s.p1 < 0]
        windows = [s.ready_at - s.http_up_at for s in inc_r if s.http_up_at == s.http_up_at]
        w = median(windows)
        out()
        out(
            f"Wrong 'ready' verdicts of the incident loop: {len(wrong)}/{len(inc_r)} starts "
            f"(/v1/models lists the model while warmup still runs; /ping and /health are 503 then)."
        )
        out(
            f"  That window (port open -> fired up) was {w:.2f} s per start here, {w / args.interval:.0%} "
            f"of the loop's {args.interval:g} s period: the share of starts such a loop calls ready "
            f"too early."
        )
        out(
            f"  Gate wrong verdicts: {sum(1 for s in gate_r if s.p1 < 0)}/{len(gate_r)} "
            f"(it needs /ping 200 and the 'fired up' line as well as the name in /v1/models)."
        )


# -- Main -----------------------------------------------------------------------------------


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--inventory", default="inventory/sandbox.py")
    p.add_argument("--host", required=True, help="the one host to use (its server is restarted)")
    p.add_argument("--base-profile", default="sandbox", help="profile the bench's profiles extend")
    p.add_argument(
        "--no-standin",
        dest="standin",
        action="store_false",
        help="a real engine: no SGLANG_STANDIN_* knobs; only the ready scenario",
    )
    p.add_argument("--scenarios", default="ready,crash", help="ready, crash or both (comma-separated)")
    p.add_argument("--starts", type=int, default=6, help="starts per method, ready scenario")
    p.add_argument("--crash-starts", type=int, default=5, help="starts per method, crash scenario")
    p.add_argument("--load", type=float, default=4.0, help="SGLANG_STANDIN_LOAD_SECONDS")
    p.add_argument("--warmup", type=float, default=2.0, help="SGLANG_STANDIN_WARMUP_SECONDS")
    p.add_argument("--crash", default="crash-load", help="SGLANG_STANDIN_FAIL of the crash scenario")
    p.add_argument("--crash-after", type=float, default=2.0, help="SGLANG_STANDIN_FAIL_AFTER_SECONDS")
    p.add_argument("--interval", type=float, default=15.0, help="incident loop: sleep between tries")
    p.add_argument("--tries", type=int, default=50, help="incident loop: tries")
    p.add_argument(
        "--crash-tries",
        type=int,
        default=3,
        help="incident loop on a crashed start: tries actually made (the rest is computed)",
    )
    p.add_argument(
        "--out", default=str(REPO / "bench" / "results" / f"readiness-{time.strftime('%Y-%m-%d')}.txt")
    )
    args = p.parse_args(argv)
    scenarios = {s.strip() for s in args.scenarios.split(",") if s.strip()}
    if not scenarios <= {"ready", "crash"}:
        p.error("--scenarios: ready and/or crash")
    if "crash" in scenarios and not args.standin:
        p.error("the crash scenario needs the stand-in's SGLANG_STANDIN_FAIL (sandbox nodes)")

    node = node_of(args.inventory, args.host)
    out = Report()
    began = time.time()
    knobs = (
        {"SGLANG_STANDIN_LOAD_SECONDS": args.load, "SGLANG_STANDIN_WARMUP_SECONDS": args.warmup}
        if args.standin
        else {}
    )
    crash_knobs = {"SGLANG_STANDIN_FAIL": args.crash, "SGLANG_STANDIN_FAIL_AFTER_SECONDS": args.crash_after}
    tmp = tempfile.mkdtemp(prefix="bench-readiness-")
    profile_a = write_profile(tmp, "bench-ready-a", args.base_profile, {**knobs, TURN_VAR: "a"})
    profile_b = write_profile(tmp, "bench-ready-b", args.base_profile, {**knobs, TURN_VAR: "b"})
    profile_crash = write_profile(tmp, "bench-crash", args.base_profile, {**knobs, **crash_knobs})
    prof = node.profile(profile_a)
    unit, service = f"{prof.service.name}.service", prof.service.name
    loop = IncidentLoop(node, unit, prof.service.probe_url, prof.model.served_name, args.interval)

    out(
        f"# bench/readiness.py, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, host {node.name} "
        f"({args.inventory}), unit {unit}, port {prof.service.port}, served name {prof.model.served_name!r}"
    )
    out(
        f"# profiles extend {args.base_profile}; env "
        + (", ".join(f"{k}={v}" for k, v in knobs.items()) or "(engine's own start-up)")
        + f"; the two ready profiles differ only in {TURN_VAR}=a|b"
    )
    if "crash" in scenarios:
        out(
            f"# crash profile: + {', '.join(f'{k}={v}' for k, v in crash_knobs.items())} (deploys: "
            f"bench-crash profile, rolled back to the last good; incident: the same two variables "
            f"in a runtime drop-in, then systemctl restart)"
        )
    out(
        f"# incident loop: `{loop.shown}` up to {args.tries} tries, sleep {args.interval:g} s "
        f"between tries, then grep 'fired up\\|Error' in the journal"
    )
    out(
        "# times: journald __REALTIME_TIMESTAMP on the node, time.time() on the controller (one clock "
        "on sandbox nodes)"
    )
    out()

    setup = deploy(node, profile_a)
    if setup.returncode != 0:
        out(f"setup deploy of bench-ready-a failed (exit {setup.returncode}):\n{setup.tail(40)}")
        out.save(args.out)
        return 1
    out(f"setup: {node.name} serves bench-ready-a ({setup.ended - setup.started:.1f} s deploy)")

    ready, crashes = [], []
    if "ready" in scenarios:
        out()
        out(f"== Ready scenario: {args.starts} starts per method ==")
        for i in range(args.starts):
            profile = profile_b if i % 2 == 0 else profile_a
            sample = gate_ready(node, profile, i + 1, out)
            if sample:
                ready.append(sample)
                out(f"  gate     start {i + 1}: P1 {sample.p1:+.3f} s ({sample.note})")
            offset = i * args.interval / args.starts
            sample = incident_ready(node, loop, service, offset, i + 1, out)
            if sample:
                ready.append(sample)
                out(f"  incident start {i + 1}: P1 {sample.p1:+.3f} s ({sample.note})")
        out()
        ready_table(out, sorted(ready, key=lambda s: (s.method != "gate", s.start)))

    if "crash" in scenarios:
        out()
        out(
            f"== Crash scenario ({args.crash} {args.crash_after:g} s into loading): "
            f"{args.crash_starts} starts per method =="
        )
        for i in range(args.crash_starts):
            if last_good(node, service) != "bench-ready-a":  # another deploy ran in between
                again = deploy(node, profile_a)
                out(
                    f"  (last good on {node.name} was not bench-ready-a: redeployed it first, "
                    f"exit {again.returncode})"
                )
            sample = gate_crash(node, profile_crash, i + 1, out)
            if sample:
                crashes.append(sample)
                out(
                    f"  gate     crash {i + 1}: P2 {sample.p2:.3f} s, cause {sample.cause}, "
                    f"rollback {fmt_s(sample.rollback_s, 3)} s"
                )
        for i in range(args.crash_starts):
            sample = incident_crash(
                node, loop, service, unit, crash_knobs, args.crash_tries, args.tries, i + 1, out
            )
            if sample:
                crashes.append(sample)
                out(
                    f"  incident crash {i + 1}: {args.crash_tries}-try loop + grep {sample.p2:.1f} s "
                    f"after the crash (measured); {args.tries} tries: "
                    f"{sample.computed_at - sample.crash_at:.1f} s (computed)"
                )
        out()
        crash_table(out, crashes)

    summarize(out, args, ready, crashes)
    final = deploy(node, profile_a)  # leave the node serving a profile that passed
    out()
    out(
        f"Left {node.name} serving bench-ready-a (final deploy exit {final.returncode}). "
        f"Whole bench: {time.time() - began:.0f} s."
    )
    out.save(args.out)
    print(f"saved to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
