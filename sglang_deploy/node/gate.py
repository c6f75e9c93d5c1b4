"""Readiness gate for an SGLang systemd unit, run on the node right after a (re)start.

Ready means three things seen together (docs/architecture.md, "Which endpoint means what"):
GET /v1/models lists the served name (it already answers during warmup, so alone it proves
nothing), GET /ping answers 200 (SGLang 0.5.23's is_healthy(): a flag, set when the warmup's
generation succeeded, cleared by SIGTERM; answered at once) and the start's journal holds
"The server is fired up and ready to roll!" (logged just after /ping turns 200). /health is
not waited for: in 0.5.23 it runs a one-token generation and answers no sooner than 1 s. It
stands in only where /ping is missing (404: an older release), and as the confirmation when
/ping has said 200 for --fired-up-grace seconds but the journal has no "fired up" line (a
dropped journal line must not fail a serving start). Every --interval the gate also reads the unit
(systemctl show) and the journal of this start, so it fails within about a second when the
main process dies, the unit leaves activating/active or systemd restarts it; it reports each
start-up phase, a heartbeat every --progress-every seconds, a hang (no journal line for
--hang-after seconds outside the long phases) and the timeout with the last phase reached.

Output lines (elapsed seconds since the unit's main process started):
    [  12.3s] phase: capturing CUDA graphs
    [  20.0s] waiting: phase capturing CUDA graphs (7.7s), unit active/running, main pid 1234, http: port closed
    ready in 93.4s (phase times: starting 1.0s, loading 40.2s, graphs 30.1s, http 0.5s, warmup 2.1s)
    [   5.2s] failed: cuda-oom: CUDA out of memory: <log line> (unit failed/failed, main process exited with status 1)
    [1200.0s] timeout: not ready within 1200s; last phase: capturing CUDA graphs (600.2s); http: port closed
    [ 305.0s] hung: no new journal line for 300s in phase warming up; http: /health 503
failures are followed by '--- last N journal lines of this start ---', the lines, and '---'.
Exit status: see status.py (READY, FAILED_START, TIMEOUT, HUNG).

Without systemd (a GPU box, a test): `--pid PID --log FILE` gates a plain process instead of a
unit, with the same phases, causes and readiness rules: the process being alive stands for the
unit being active, the lines of its log file (its stdout and stderr) for the journal.
    python3 gate.py --pid 4242 --log /tmp/server.log --port 30000 --served-name x --timeout 120
"""
import argparse
import json
import os
import threading
import time
import urllib.error
import urllib.request

if __package__:
    from . import procs, sglang_log, status, systemd
else:  # run as a script: the siblings' directory is on sys.path
    import procs
    import sglang_log
    import status
    import systemd

TAIL_LINES = 30
KEEP_LINES = 5000
DEATH_GRACE_S = 0.3  # let journald catch up with the last lines of a dying process
# Once /ping is 200 the "fired up" line is a /freeze_gc round trip away: read the journal this
# often for up to UP_FAST_S, so the verdict does not wait for a whole --interval.
UP_POLL_S = 0.05
UP_FAST_S = 1.0


def say(text):
    print(text, flush=True)


def probe_host(host):
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    return "[%s]" % host if ":" in host else host


class HttpProbe(threading.Thread):
    """Polls /v1/models until it lists the served name, then /ping until 200 (/health where the
    server has no /ping); sets `up` then. With `confirm` set (the gate has waited long enough
    for "fired up"), it also asks /health and sets `health_ok` on a 200."""

    def __init__(self, host, port, served_name, interval, timeout=1.0, health_timeout=25.0):
        super().__init__(daemon=True)
        self.base = "http://%s:%d" % (probe_host(host), port)
        self.served_name, self.interval = served_name, interval
        self.timeout, self.health_timeout = timeout, health_timeout
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self.state = "not probed yet"
        self.models_ok = False
        self.up_path = "/ping"
        self.up = threading.Event()         # models listed and /ping (or /health) 200
        self.up_mono = None
        self.confirm = threading.Event()    # set by the gate: ask /health too
        self.health_ok = threading.Event()
        self.wake = threading.Event()
        self.stopped = threading.Event()

    def get(self, path, timeout):
        """(status code, body) or (None, reason)."""
        try:
            with self.opener.open(self.base + path, timeout=timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, b""
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, ConnectionRefusedError):
                return None, "port closed"
            return None, "%s: %s" % (path, reason)
        except OSError as exc:  # timeouts, resets
            return None, "%s: %s" % (path, exc.__class__.__name__)

    def probe_once(self):
        if not self.models_ok:
            code, body = self.get("/v1/models", self.timeout)
            if code != 200:
                self.state = body if code is None else "/v1/models %d" % code
                return
            try:
                names = [m.get("id") for m in json.loads(body.decode("utf-8")).get("data", [])]
            except (ValueError, AttributeError):
                names = []
            if self.served_name not in names:
                self.state = "/v1/models lists %s, not %r" % (names, self.served_name)
                return
            self.models_ok = True
        if not self.up.is_set():
            health = self.up_path == "/health"
            code, reason = self.get(self.up_path, self.health_timeout if health else self.timeout)
            if code == 404 and not health:  # a release without /ping
                self.up_path = "/health"
                return self.probe_once()
            if code != 200:
                self.state = "/v1/models ok, " + (reason if code is None else "%s %d" % (self.up_path, code))
                return
            self.up_mono = time.monotonic()
            self.up.set()
            if health:
                self.health_ok.set()
            self.state = "/v1/models ok, %s 200" % self.up_path
        if self.confirm.is_set() and not self.health_ok.is_set():
            code, reason = self.get("/health", self.health_timeout)
            if code == 200:
                self.health_ok.set()
            self.state = "/v1/models ok, %s 200, no 'fired up' line, /health %s" % (
                self.up_path, reason if code is None else code)

    def run(self):
        while not self.stopped.is_set():
            self.probe_once()
            self.wake.wait(self.interval)
            self.wake.clear()


def unit_problem(show, base):
    """Why the start being gated is over, or None while it is still going."""
    active, sub = show.get("ActiveState", "?"), show.get("SubState", "?")
    where = "unit %s/%s, %s" % (active, sub, systemd.describe_exit(show))
    pid = systemd.as_int(show.get("MainPID"))
    if show.get("LoadState", "loaded") != "loaded":
        return "unit %s is not loaded (LoadState=%s)" % (base["unit"], show.get("LoadState"))
    if active not in ("active", "activating", "reloading") or sub == "auto-restart":
        return where
    if show.get("InvocationID", "") != base["InvocationID"] or \
            systemd.as_int(show.get("NRestarts")) > systemd.as_int(base["NRestarts"]):
        return "unit was restarted by systemd (%s)" % where
    if pid != base["MainPID"]:
        return "main process changed from %d to %d (%s)" % (base["MainPID"], pid, where)
    if pid <= 0 or not procs.alive(pid):
        return "main process %d is gone (%s)" % (pid, where)
    return None


class UnitWatch:
    """What the gate watches by default: a systemd unit (`systemctl show`) and its journal."""

    source = "journal"

    def __init__(self, unit, systemctl=systemd.SYSTEMCTL, journalctl=systemd.JOURNALCTL, since_cursor=None):
        self.unit, self.systemctl, self.journalctl = unit, systemctl, journalctl
        self.since_cursor = since_cursor
        self.matches = None

    @property
    def label(self):
        return self.unit

    def show(self):
        return systemd.unit_show(self.unit, systemctl=self.systemctl)

    def begin(self, show):
        """Select the lines of the start being gated."""
        self.matches = ["-u", self.unit] if self.since_cursor else systemd.start_matches(self.unit, show)

    def read(self, cursor):
        """([(monotonic seconds or None, line)], cursor) of the lines after cursor."""
        return systemd.journal_read(self.matches, cursor, journalctl=self.journalctl)

    def problem(self, show, base):
        return unit_problem(show, base)

    def no_start(self, show):
        """(problem, cause key) when there is no start to gate at all, else None."""
        if show.get("LoadState", "loaded") != "loaded":
            return unit_problem(show, {"unit": self.unit}), "unit-not-loaded"
        if systemd.as_int(show.get("ExecMainStartTimestampMonotonic")) <= 0:
            return "unit %s has not been started" % self.unit, "not-started"
        return None

    def state(self, show):
        return "unit %s/%s" % (show.get("ActiveState"), show.get("SubState"))


def parse_exit_code(stat_text):
    """The waitpid()-style exit status in /proc/PID/stat (field 52, Linux >= 3.5; set once the
    process is a zombie), or None where the kernel does not give it."""
    fields = stat_text.rpartition(")")[2].split()  # fields[0] is field 3 (state)
    try:
        return int(fields[49])
    except (IndexError, ValueError):
        return None


def exit_props(wait_status):
    """systemd's ExecMainCode/ExecMainStatus for a waitpid()-style status (None: unknown)."""
    if wait_status is None:
        return {"ExecMainCode": "0", "ExecMainStatus": "0"}
    if wait_status & 0x7F == 0:
        return {"ExecMainCode": "1", "ExecMainStatus": str((wait_status >> 8) & 0xFF)}
    return {"ExecMainCode": "3" if wait_status & 0x80 else "2", "ExecMainStatus": str(wait_status & 0x7F)}


class ProcessWatch:
    """A plain process instead of a unit: alive = active, its log file = its journal.

    show() answers in systemctl's terms (LoadState, ActiveState, MainPID, ExecMain*...) so that
    the gate's rules apply unchanged. A process that died is a zombie until its parent reaps it:
    its exit status is read from /proc/PID/stat then. Log lines are handed over whole (a line
    still being written waits for its newline, unless the process is gone).
    """

    source = "log"

    def __init__(self, pid, log, proc=procs.PROC):
        self.pid, self.log, self.proc = pid, log, proc
        stat = procs.read_stat(pid, proc)
        self.starttime = stat["starttime"] if stat else None

    @property
    def label(self):
        return "pid %d (log %s)" % (self.pid, self.log)

    def _stat_text(self):
        try:
            with open("%s/%d/stat" % (self.proc, self.pid)) as f:
                return f.read()
        except OSError:
            return None

    def started_monotonic_us(self):
        """When the process started, on CLOCK_MONOTONIC (stat counts clock ticks since boot)."""
        if self.starttime is None:
            return 0
        since_boot = self.starttime / float(os.sysconf("SC_CLK_TCK"))
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - since_boot
        return max(0, int((time.monotonic() - age) * 1e6))

    def alive(self):
        return self.starttime is not None and procs.alive(self.pid, self.starttime, self.proc)

    def show(self):
        props = {"LoadState": "loaded", "MainPID": str(self.pid), "InvocationID": "", "NRestarts": "0",
                 "ExecMainStartTimestampMonotonic": str(self.started_monotonic_us())}
        if self.alive():
            props.update(ActiveState="active", SubState="running", **exit_props(None))
            return props
        wait_status = None
        text = self._stat_text() if self.starttime is not None else None
        if text is not None:
            try:
                if procs.parse_stat(text)["starttime"] == self.starttime:  # not a reused pid
                    wait_status = parse_exit_code(text)
            except (ValueError, IndexError):
                pass
        props.update(ActiveState="failed", SubState="dead", **exit_props(wait_status))
        return props

    def begin(self, show):
        pass

    def read(self, cursor):
        offset = int(cursor or 0)
        try:
            with open(self.log, "rb") as f:
                if os.fstat(f.fileno()).st_size < offset:  # truncated: start over
                    offset = 0
                f.seek(offset)
                data = f.read()
        except FileNotFoundError:
            return [], cursor
        end = len(data) if not self.alive() else data.rfind(b"\n") + 1
        text = data[:end].decode("utf-8", "replace")
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        return [(None, line.rstrip("\r")) for line in lines], offset + end

    def problem(self, show, base):
        if show.get("ActiveState") == "active":
            return None
        if show.get("ExecMainCode", "0") == "0":
            return "process %d is gone (exit status unknown: already reaped)" % self.pid
        return "process %d is gone (%s)" % (self.pid, systemd.describe_exit(show))

    def no_start(self, show):
        if self.starttime is None:
            return "process %d does not exist" % self.pid, "no-process"
        return None

    def state(self, show):
        return "process alive" if show.get("ActiveState") == "active" else "process gone"


class Gate:
    def __init__(self, args, watch=None):
        self.args = args
        if watch is None:
            watch = ProcessWatch(args.pid, args.log) if args.pid is not None else \
                UnitWatch(args.unit, args.systemctl, args.journalctl, args.since_cursor)
        self.watch = watch
        self.lines = []  # start-up lines of this start (probe access lines left out)
        self.cursor = args.since_cursor
        self.phase, self.phase_entered, self.phase_times = "starting", None, {}
        self.journal_error = False
        self.ready_at = self.ready_mono = None  # time.time() / monotonic of the verdict

    def show(self):
        return self.watch.show()

    def stamp(self, mono=None):
        return "[%6.1fs]" % (((mono or time.monotonic()) - self.t0))

    def read_journal(self):
        try:
            entries, self.cursor = self.watch.read(self.cursor)
        except (OSError, systemd.subprocess.SubprocessError) as exc:
            if not self.journal_error:
                self.journal_error = True
                say("%s warning: cannot read the %s: %s" % (self.stamp(), self.watch.source, exc))
            return
        now = time.monotonic()
        for mono, line in entries:
            if sglang_log.is_probe_access(line):
                continue
            when = mono if mono is not None and self.t0 - 5 <= mono <= now + 1 else now
            when = min(max(when, self.phase_entered), now)
            self.lines.append(line)
            self.last_activity = max(self.last_activity, when)
            phase = sglang_log.phase_of(line)
            if phase and sglang_log.phase_index(phase) > sglang_log.phase_index(self.phase):
                self.enter(phase, when)
        del self.lines[:-KEEP_LINES]

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
            say("ready in %.1fs (phase times: %s)" % (
                elapsed, ", ".join("%s %.1fs" % kv for kv in phases.items() if kv[0] != "ready")))
        elif tail:
            say("--- last %d %s lines of this start ---" % (len(excerpt), self.watch.source))
            for line in excerpt:
                say(line)
            say("---")
        if self.args.json:
            summary = {"status": code, "status_name": status.name(code), "cause": cause,
                       "cause_text": cause_text, "elapsed_s": elapsed, "phases": phases,
                       "phase": self.phase, "ready_at": self.ready_at,
                       "unit": self.args.unit, "log": self.args.log, "main_pid": self.base.get("MainPID"),
                       "invocation_id": self.base.get("InvocationID"),
                       "journal_tail": excerpt if code != status.READY else []}
            with open(self.args.json, "w") as f:
                json.dump(summary, f, indent=2)
                f.write("\n")
        return code

    def fail_start(self, problem, key=None):
        """Report the end of the start: the cause found in its journal lines, else systemd's view.
        With a key (unit not loaded / never started) there is no start to read the journal of."""
        found = None
        if key is None:
            time.sleep(DEATH_GRACE_S)
            self.read_journal()
            found = sglang_log.cause_of(self.lines)
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
        show = self.show()
        start = systemd.as_int(show.get("ExecMainStartTimestampMonotonic")) / 1e6
        self.t0 = start if 0 < start <= t_gate else t_gate
        self.phase_entered = self.last_activity = self.t0
        self.base = {"unit": self.watch.label, "MainPID": systemd.as_int(show.get("MainPID")),
                     "InvocationID": show.get("InvocationID", ""), "NRestarts": show.get("NRestarts", "0")}
        self.watch.begin(show)
        self.probe = HttpProbe(a.host, a.port, a.served_name, a.interval, a.http_timeout, a.health_timeout)
        self.last_show = show
        problem = self.watch.problem(show, self.base)
        if problem:
            return self.fail_start(*(self.watch.no_start(show) or (problem,)))
        say("%s gating %s: main pid %d, http://%s:%d, served name %r, timeout %ss" % (
            self.stamp(), self.watch.label, self.base["MainPID"], a.host, a.port, a.served_name, a.timeout))
        self.read_journal()
        self.probe.start()
        next_beat = time.monotonic() + a.progress_every
        while True:
            if self.is_ready():
                return self.finish(status.READY)
            show = self.last_show = self.show()
            problem = self.watch.problem(show, self.base)
            if problem:
                return self.fail_start(problem)
            self.read_journal()
            now = time.monotonic()
            in_phase = "%s (%.1fs)" % (sglang_log.PHASE_LABELS[self.phase], now - self.phase_entered)
            if now - t_gate >= a.timeout:
                say("%s timeout: not ready within %ss; last phase: %s; http: %s" % (
                    self.stamp(now), a.timeout, in_phase, self.probe.state))
                return self.finish(status.TIMEOUT, "timeout", "last phase: " + in_phase, tail=True)
            quiet = now - self.last_activity
            if quiet >= a.hang_after and self.phase not in sglang_log.LONG_PHASES:
                say("%s hung: no new %s line for %.0fs in phase %s; http: %s" % (
                    self.stamp(now), self.watch.source, quiet, sglang_log.PHASE_LABELS[self.phase],
                    self.probe.state))
                return self.finish(status.HUNG, "hung", "no %s line for %.0fs in phase %s" % (
                    self.watch.source, quiet, self.phase), tail=True)
            if now >= next_beat:
                next_beat = now + a.progress_every
                say("%s waiting: phase %s, %s, main pid %d, http: %s" % (
                    self.stamp(now), in_phase, self.watch.state(show), self.base["MainPID"], self.probe.state))
            if not self.probe.up.is_set():
                self.probe.up.wait(a.interval)
            else:
                time.sleep(UP_POLL_S if time.monotonic() - self.probe.up_mono < UP_FAST_S else a.interval)

    def is_ready(self):
        """/v1/models and /ping said so (the probe's `up`) and the journal has "fired up"; or,
        --fired-up-grace seconds after `up` without that line, /health 200 confirms."""
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
            say("%s note: %s 200 for %.0fs but no 'fired up' line in the %s; /health 200 confirms" % (
                self.stamp(), self.probe.up_path, time.monotonic() - self.probe.up_mono, self.watch.source))
        self.ready_at, self.ready_mono = time.time(), time.monotonic()
        return True


def main(argv=None):
    p = argparse.ArgumentParser(description="Wait until an SGLang unit (or a plain process) is ready, "
                                            "or say why it is not.")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--unit", help="the systemd unit to gate")
    target.add_argument("--pid", type=int, help="gate this process instead of a unit (needs --log)")
    p.add_argument("--log", metavar="FILE", help="with --pid: the file the process writes its output to")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--served-name", required=True)
    p.add_argument("--timeout", type=float, required=True, help="seconds to wait for readiness")
    p.add_argument("--host", default="127.0.0.1", help="address to probe (0.0.0.0 means 127.0.0.1)")
    p.add_argument("--interval", type=float, default=0.25, help="poll interval, seconds")
    p.add_argument("--progress-every", type=float, default=10.0, help="heartbeat interval, seconds")
    p.add_argument("--hang-after", type=float, default=300.0,
                   help="no journal line for this long outside loading/graph capture = hung")
    p.add_argument("--http-timeout", type=float, default=1.0, help="timeout of /v1/models and /ping requests")
    p.add_argument("--health-timeout", type=float, default=25.0,
                   help="timeout of /health requests (0.5.23's handler takes >= 1 s, up to "
                        "SGLANG_HEALTH_CHECK_TIMEOUT=20 s)")
    p.add_argument("--fired-up-grace", type=float, default=15.0,
                   help="/ping 200 this long without a 'fired up' journal line: accept /health 200 "
                        "instead (the warmup's /freeze_gc, between the two, times out after 10 s)")
    since = p.add_mutually_exclusive_group()
    since.add_argument("--since-cursor", help="read the unit's journal after this cursor")
    since.add_argument("--since-start", action="store_true",
                       help="read the journal of the unit's current start (default)")
    p.add_argument("--json", metavar="FILE", help="also write a JSON summary here")
    p.add_argument("--systemctl", default=systemd.SYSTEMCTL)
    p.add_argument("--journalctl", default=systemd.JOURNALCTL)
    args = p.parse_args(argv)
    if args.pid is not None:
        if not args.log:
            p.error("--pid needs --log (the process' output stands in for the journal)")
        if args.since_cursor or args.since_start:
            p.error("--since-cursor/--since-start read a unit's journal; with --pid the whole --log is read")
    elif args.log:
        p.error("--log goes with --pid (a unit's output is read from the journal)")
    return Gate(args).run()


if __name__ == "__main__":
    raise SystemExit(main())
