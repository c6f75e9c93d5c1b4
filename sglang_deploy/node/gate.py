"""Readiness gate for an SGLang systemd unit, run on the node right after a (re)start.

Ready means three things seen together (docs/sglang.md, "Which endpoint means what"):
GET /v1/models lists the served name (it already answers during warmup, so alone it proves
nothing), GET /ping answers 200 (SGLang 0.5.23's is_healthy(): a flag, set when the warmup's
generation succeeded, cleared by SIGTERM; answered at once) and the start's journal holds
"The server is fired up and ready to roll!" (logged just after /ping turns 200). /health is
not waited for: in 0.5.23 it runs a one-token generation and answers no sooner than 1 s. It
stands in only where /ping is missing (404: an older release), and as the confirmation when
/ping has said 200 for --fired-up-grace seconds but the journal has no "fired up" line (a
dropped journal line must not fail a serving start). Every --interval the gate also reads the unit
(systemctl show) and the journal of this start, so it fails within about a second when the
main process dies, the unit leaves activating/active or systemd restarts it; it reads the unit
once more at the verdict itself (a start that died after its last answers is a failed start,
with its cause, never "ready"). Once up, the server must stay up --settle seconds before the
verdict is "ready": the same main process (for a unit, the same invocation) alive, and no cause
of death (sglang_log.CAUSES) in what it logs meanwhile; one that dies then is a failed start,
with the cause it logged. It reports each start-up phase, a heartbeat every --progress-every
seconds, a hang (no journal line for --hang-after seconds outside the long phases) and the
timeout with the last phase reached.

Output lines (elapsed seconds since the unit's main process started):
    [  12.3s] phase: capturing CUDA graphs
    [  20.0s] waiting: phase capturing CUDA graphs (7.7s), unit active/running, main pid 1234, http: port closed
    [  93.4s] up; watching it for 5s before the verdict
    ready in 93.4s (phase times: starting 1.0s, loading 40.2s, graphs 30.1s, http 0.5s, warmup 2.1s); stayed up 5s
    [  95.0s] failed: scheduler-died: a scheduler process died: <log line> (main process 1234 is gone (...), 1.6s after it was up)
    [   5.2s] failed: cuda-oom: CUDA out of memory: <log line> (unit failed/failed, main process exited with status 1)
    [1200.0s] timeout: not ready within 1200s; last phase: capturing CUDA graphs (600.2s); http: port closed
    [ 305.0s] hung: no new journal line for 300s in phase warming up; http: /health 503
failures are followed by '--- last N journal lines of this start ---', the lines, and '---'.
Exit status: see status.py (READY, FAILED_START, TIMEOUT, HUNG). The --json report names the
main process (and invocation) it saw ready: `gate.py ... --json REPORT --recheck` asks, right
before the last known good is saved, whether the server is still that one (node/lib/recheck.py).
--api-key-env-file F --api-key-var NAME: every request sends the server's API key (lib/engine_auth.py),
and the lines shown have it masked (SGLang logs its server_args, api_key included).

Without systemd (a GPU box, a test): `--pid PID --log FILE` gates a plain process instead of a
unit, with the same phases, causes and readiness rules: the process being alive stands for the
unit being active, the lines of its log file (its stdout and stderr) for the journal.
    python3 gate.py --pid 4242 --log /tmp/server.log --port 30000 --served-name x --timeout 120 \
        --interval 0.25 --progress-every 10 --hang-after 300 --fired-up-grace 15 --settle 5
"""

import argparse
import json
import time

if __package__:
    from .lib import engine_auth, recheck, result, sglang_log, status, systemd
    from .lib.http_probe import HttpProbe
    from .lib.watch import watch_of
else:  # run as a script: our scripts' directory is on sys.path
    from lib import engine_auth, recheck, result, sglang_log, status, systemd
    from lib.http_probe import HttpProbe
    from lib.watch import watch_of

TAIL_LINES = 30
KEEP_LINES = 5000
DEATH_GRACE_S = 0.3  # let journald catch up with the last lines of a dying process
# Once /ping is 200 the "fired up" line is a /freeze_gc round trip away: read the journal this
# often for up to UP_FAST_S, so the verdict does not wait for a whole --interval.
UP_POLL_S = 0.05
UP_FAST_S = 1.0


def say(text):
    print(text, flush=True)


class Gate:
    def __init__(self, args, watch=None):
        self.args = args
        self.watch = watch or watch_of(args)
        self.lines = []  # start-up lines of this start (probe access lines left out)
        self.cursor = args.since_cursor
        self.phase, self.phase_entered, self.phase_times = "starting", None, {}
        self.journal_error = False
        self.ready_at = self.ready_mono = None  # time.time() / monotonic of the verdict
        self.api_key = engine_auth.key_of(args)  # the server's API key: sent, and masked in its lines

    def look(self):
        """(show, problem): the start's state now, kept as the last seen."""
        self.last_show, problem = self.watch.look(self.base)
        return self.last_show, problem

    def stamp(self, mono=None):
        return "[%6.1fs]" % ((mono or time.monotonic()) - self.t0)

    def read_journal(self):
        """Read the lines logged since the last read; returns them (probe access lines left out)."""
        try:
            entries, self.cursor = self.watch.read(self.cursor)
        except (OSError, systemd.subprocess.SubprocessError) as exc:
            if not self.journal_error:
                self.journal_error = True
                say("%s warning: cannot read the %s: %s" % (self.stamp(), self.watch.source, exc))
            return []
        now = time.monotonic()
        new = []
        for mono, line in entries:
            if sglang_log.is_probe_access(line):
                continue
            line = engine_auth.masked(line, self.api_key)  # SGLang logs its server_args, api_key too
            new.append(line)
            when = mono if mono is not None and self.t0 - 5 <= mono <= now + 1 else now
            when = min(max(when, self.phase_entered), now)
            self.lines.append(line)
            self.last_activity = max(self.last_activity, when)
            phase = sglang_log.phase_of(line)
            if phase and sglang_log.phase_index(phase) > sglang_log.phase_index(self.phase):
                self.enter(phase, when)
        del self.lines[:-KEEP_LINES]
        return new

    def enter(self, phase, when):
        self.phase_times[self.phase] = self.phase_times.get(self.phase, 0.0) + when - self.phase_entered
        self.phase, self.phase_entered = phase, when
        say("%s phase: %s" % (self.stamp(when), sglang_log.PHASE_LABELS[phase]))

    def phases(self, end):
        times = dict(self.phase_times)
        times[self.phase] = times.get(self.phase, 0.0) + max(0.0, end - self.phase_entered)
        return {k: round(times[k], 1) for k in sglang_log.PHASE_KEYS if k in times}

    def finish(self, code, cause=None, cause_text=None, tail=False):
        end = self.ready_mono if code == status.READY else time.monotonic()
        self.probe.stopped.set()
        self.probe.wake.set()
        phases = self.phases(end)
        elapsed = round(end - self.t0, 1)
        excerpt = self.lines[-TAIL_LINES:]
        if code == status.READY:
            times = ", ".join("%s %.1fs" % kv for kv in phases.items() if kv[0] != "ready")
            say("ready in %.1fs (phase times: %s); stayed up %gs" % (elapsed, times, self.args.settle))
        elif tail:
            say("--- last %d %s lines of this start ---" % (len(excerpt), self.watch.source))
            for line in excerpt:
                say(line)
            say("---")
        if self.args.json:
            summary = {
                "status": code,
                "status_name": status.name(code),
                "cause": cause,
                "cause_text": cause_text,
                "elapsed_s": elapsed,
                "phases": phases,
                "phase": self.phase,
                "ready_at": self.ready_at if code == status.READY else None,
                "unit": self.args.unit,
                "log": self.args.log,
                "main_pid": self.base.get("MainPID"),
                "invocation_id": self.base.get("InvocationID"),
                "n_restarts": self.base.get("NRestarts"),
                "settle_s": self.args.settle,
                "cursor": self.cursor,  # where the recheck reads on (--recheck)
                "journal_tail": excerpt if code != status.READY else [],
            }
            with open(self.args.json, "w") as f:
                json.dump(summary, f, indent=2)
                f.write("\n")
        return result.emit(
            code,
            "%s: %s" % (cause, cause_text) if cause else None,
            elapsed_s=elapsed,
            phases=phases,
            phase=self.phase,
            main_pid=self.base.get("MainPID"),
        )

    def fail_start(self, problem, key=None, since=None):
        """Report the end of the start: the cause found in its journal lines, else systemd's view.
        With a key (unit not loaded / never started) there is no start to read the journal of.
        ``since``: the lines logged since the server was up, where a death after it is explained."""
        found = None
        if key is None:
            time.sleep(DEATH_GRACE_S)
            lines = self.read_journal()
            if since is not None:  # once up: the cause among what it logged since, first
                found = sglang_log.cause_of(since + lines)
            found = found or sglang_log.cause_of(self.lines)
        if found:
            text = "%s (%s)" % (found[1], problem)
            key = found[0]
        elif key is None:
            # Nothing SGLang logged matches a known cause: say so, the excerpt follows.
            text = "unrecognised cause, see the journal lines below (%s)" % problem
            key = systemd.CLD_CODES.get(systemd.as_int(self.last_show.get("ExecMainCode")), "ended")
        else:
            text = problem
        say("%s failed: %s: %s" % (self.stamp(), key, text))
        return self.finish(status.FAILED_START, key, text, tail=True)

    def run(self):
        a = self.args
        t_gate = time.monotonic()
        show = self.watch.show()
        start = systemd.as_int(show.get("ExecMainStartTimestampMonotonic")) / 1e6
        self.t0 = start if 0 < start <= t_gate else t_gate
        self.phase_entered = self.last_activity = self.t0
        self.base = {
            "unit": self.watch.label,
            "MainPID": systemd.as_int(show.get("MainPID")),
            "InvocationID": show.get("InvocationID", ""),
            "NRestarts": show.get("NRestarts", "0"),
        }
        self.watch.begin(show)
        self.probe = HttpProbe(
            a.host, a.port, a.served_name, a.interval, a.http_timeout, a.health_timeout, self.api_key
        )
        self.last_show = show
        problem = self.watch.problem(show, self.base)
        if problem:
            return self.fail_start(*(self.watch.no_start(show) or (problem,)))
        say(
            "%s gating %s: main pid %d, http://%s:%d, served name %r, timeout %ss"
            % (self.stamp(), self.watch.label, self.base["MainPID"], a.host, a.port, a.served_name, a.timeout)
        )
        self.read_journal()
        self.probe.start()
        next_beat = time.monotonic() + a.progress_every
        while True:
            if self.is_ready():
                # The verdict must hold at the verdict: a server that died since the last look
                # (after its last HTTP answer and its "fired up" line) is a failed start.
                show, problem = self.look()
                if problem:
                    return self.fail_start("%s, at the ready verdict" % problem)
                self.ready_at, self.ready_mono = time.time(), time.monotonic()
                return self.settle()
            show, problem = self.look()
            if problem:
                return self.fail_start(problem)
            self.read_journal()
            now = time.monotonic()
            in_phase = "%s (%.1fs)" % (sglang_log.PHASE_LABELS[self.phase], now - self.phase_entered)
            if now - t_gate >= a.timeout:
                say(
                    "%s timeout: not ready within %ss; last phase: %s; http: %s"
                    % (self.stamp(now), a.timeout, in_phase, self.probe.state)
                )
                return self.finish(status.TIMEOUT, "timeout", "last phase: " + in_phase, tail=True)
            quiet = now - self.last_activity
            if quiet >= a.hang_after and self.phase not in sglang_log.LONG_PHASES:
                say(
                    "%s hung: no new %s line for %.0fs in phase %s; http: %s"
                    % (
                        self.stamp(now),
                        self.watch.source,
                        quiet,
                        sglang_log.PHASE_LABELS[self.phase],
                        self.probe.state,
                    )
                )
                return self.finish(
                    status.HUNG,
                    "hung",
                    "no %s line for %.0fs in phase %s" % (self.watch.source, quiet, self.phase),
                    tail=True,
                )
            if now >= next_beat:
                next_beat = now + a.progress_every
                say(
                    "%s waiting: phase %s, %s, main pid %d, http: %s"
                    % (
                        self.stamp(now),
                        in_phase,
                        self.watch.state(show),
                        self.base["MainPID"],
                        self.probe.state,
                    )
                )
            if not self.probe.up.is_set():
                self.probe.up.wait(a.interval)
            else:
                time.sleep(UP_POLL_S if time.monotonic() - self.probe.up_mono < UP_FAST_S else a.interval)

    def settle(self):
        """Up: ready once it stayed up --settle seconds (the same main process, or invocation,
        alive; no cause of death in what it logged meanwhile), else a failed start."""
        a, since = self.args, []
        if a.settle > 0:
            say("%s up; watching it for %gs before the verdict" % (self.stamp(self.ready_mono), a.settle))
        while True:
            now = time.monotonic()
            after = "%.1fs after it was up" % (now - self.ready_mono)
            show, problem = self.look()
            if problem:
                return self.fail_start("%s, %s" % (problem, after), since=since)
            since += self.read_journal()
            if sglang_log.death_of(since):  # logged its death: the main process goes next
                return self.fail_start("logged %s, %s" % (after, self.watch.state(show)), since=since)
            if now >= self.ready_mono + a.settle:
                return self.finish(status.READY)
            time.sleep(min(a.interval, self.ready_mono + a.settle - now))

    def is_ready(self):
        """/v1/models and /ping said so (the probe's `up`) and the journal has "fired up"; or,
        --fired-up-grace seconds after `up` without that line, /health 200 confirms. The caller
        then checks that the start still runs before it says ready."""
        if not self.probe.up.is_set():
            if self.phase == "ready":
                self.probe.wake.set()  # fired up: ask /ping now rather than at its next turn
            return False
        self.read_journal()
        if self.phase != "ready":
            if time.monotonic() - self.probe.up_mono < self.args.fired_up_grace:
                return False
            self.probe.confirm.set()
            self.probe.wake.set()
            if not self.probe.health_ok.is_set():
                return False
            say(
                "%s note: %s 200 for %.0fs but no 'fired up' line in the %s; /health 200 confirms"
                % (self.stamp(), self.probe.up_path, time.monotonic() - self.probe.up_mono, self.watch.source)
            )
        return True


def parser():
    p = argparse.ArgumentParser(
        description="Wait until an SGLang unit (or a plain process) is ready, or say why it is not."
    )
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--unit", help="the systemd unit to gate")
    target.add_argument("--pid", type=int, help="gate this process instead of a unit (needs --log)")
    p.add_argument("--log", metavar="FILE", help="with --pid: the file the process writes its output to")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--served-name", required=True)
    p.add_argument("--timeout", type=float, required=True, help="seconds to wait for readiness")
    p.add_argument("--host", default="127.0.0.1", help="address to probe (0.0.0.0 means 127.0.0.1)")
    # The timings come from the profile's readiness section (their one default is there).
    p.add_argument("--interval", type=float, required=True, help="poll interval, seconds")
    p.add_argument("--progress-every", type=float, required=True, help="heartbeat interval, seconds")
    p.add_argument(
        "--hang-after",
        type=float,
        required=True,
        help="no journal line for this long outside loading/graph capture = hung",
    )
    p.add_argument("--http-timeout", type=float, default=1.0, help="timeout of /v1/models and /ping requests")
    p.add_argument(
        "--health-timeout",
        type=float,
        default=25.0,
        help="timeout of /health requests (0.5.23's handler takes >= 1 s, up to "
        "SGLANG_HEALTH_CHECK_TIMEOUT=20 s)",
    )
    p.add_argument(
        "--fired-up-grace",
        type=float,
        required=True,
        help="/ping 200 this long without a 'fired up' journal line: accept /health 200 "
        "instead (the warmup's /freeze_gc, between the two, times out after 10 s)",
    )
    p.add_argument(
        "--settle",
        type=float,
        required=True,
        help="once up, the server must stay up this long (seconds) before the verdict is ready",
    )
    p.add_argument(
        "--recheck",
        action="store_true",
        help="instead of gating: is the server still the one --json's report saw ready "
        "(same main process or invocation, alive, no death logged since, /ping 200)?",
    )
    since = p.add_mutually_exclusive_group()
    since.add_argument("--since-cursor", help="read the unit's journal after this cursor")
    since.add_argument(
        "--since-start", action="store_true", help="read the journal of the unit's current start (default)"
    )
    p.add_argument("--json", metavar="FILE", help="also write a JSON summary here")
    engine_auth.add_arguments(p)
    p.add_argument("--systemctl", default=systemd.SYSTEMCTL)
    p.add_argument("--journalctl", default=systemd.JOURNALCTL)
    return p


def main(argv=None):
    p = parser()
    args = p.parse_args(argv)
    if args.pid is not None:
        if not args.log:
            p.error("--pid needs --log (the process' output stands in for the journal)")
        if args.since_cursor or args.since_start:
            p.error("--since-cursor/--since-start read a unit's journal; with --pid the whole --log is read")
    elif args.log:
        p.error("--log goes with --pid (a unit's output is read from the journal)")
    if args.recheck:
        if not args.json:
            p.error("--recheck reads the gate's report: --json FILE")
        return recheck.recheck(args, watch_of(args), DEATH_GRACE_S)
    return Gate(args).run()


if __name__ == "__main__":
    raise SystemExit(main())
