"""Readiness gate for an SGLang systemd unit, run on the node right after a (re)start.

Ready means GET /health answers 200 AND GET /v1/models lists the served name (/v1/models
alone already answers during warmup). Every --interval the gate also reads the unit
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
"""
import argparse
import json
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


def say(text):
    print(text, flush=True)


def probe_host(host):
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    return "[%s]" % host if ":" in host else host


class HttpProbe(threading.Thread):
    """Polls /v1/models until it lists the served name, then /health until 200."""

    def __init__(self, host, port, served_name, interval, timeout=1.0, health_timeout=25.0):
        super().__init__(daemon=True)
        self.base = "http://%s:%d" % (probe_host(host), port)
        self.served_name, self.interval = served_name, interval
        self.timeout, self.health_timeout = timeout, health_timeout
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self.state = "not probed yet"
        self.models_ok = False
        self.ready = threading.Event()
        self.ready_at = None  # time.time() when readiness was seen
        self.ready_mono = None
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
        code, reason = self.get("/health", self.health_timeout)
        if code == 200:
            self.ready_at, self.ready_mono = time.time(), time.monotonic()
            self.state = "ready"
            self.ready.set()
        else:
            self.state = "/v1/models ok, " + (reason if code is None else "/health %d" % code)

    def run(self):
        while not self.stopped.is_set() and not self.ready.is_set():
            self.probe_once()
            if not self.ready.is_set():
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


class Gate:
    def __init__(self, args):
        self.args = args
        self.lines = []  # start-up lines of this start (probe access lines left out)
        self.cursor = args.since_cursor
        self.phase, self.phase_entered, self.phase_times = "starting", None, {}
        self.journal_error = False

    def show(self):
        return systemd.unit_show(self.args.unit, systemctl=self.args.systemctl)

    def stamp(self, mono=None):
        return "[%6.1fs]" % (((mono or time.monotonic()) - self.t0))

    def read_journal(self):
        try:
            entries, self.cursor = systemd.journal_read(self.matches, self.cursor,
                                                        journalctl=self.args.journalctl)
        except (OSError, systemd.subprocess.SubprocessError) as exc:
            if not self.journal_error:
                self.journal_error = True
                say("%s warning: cannot read the journal: %s" % (self.stamp(), exc))
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
        end = self.probe.ready_mono if code == status.READY else time.monotonic()
        self.probe.stopped.set()
        self.probe.wake.set()
        phases = self.phases(end)
        elapsed = round(end - self.t0, 1)
        excerpt = self.lines[-TAIL_LINES:]
        if code == status.READY:
            say("ready in %.1fs (phase times: %s)" % (
                elapsed, ", ".join("%s %.1fs" % kv for kv in phases.items() if kv[0] != "ready")))
        elif tail:
            say("--- last %d journal lines of this start ---" % len(excerpt))
            for line in excerpt:
                say(line)
            say("---")
        if self.args.json:
            summary = {"status": code, "status_name": status.name(code), "cause": cause,
                       "cause_text": cause_text, "elapsed_s": elapsed, "phases": phases,
                       "phase": self.phase, "ready_at": self.probe.ready_at,
                       "unit": self.args.unit, "main_pid": self.base.get("MainPID"),
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
        else:
            text = problem
            key = key or systemd.CLD_CODES.get(systemd.as_int(self.last_show.get("ExecMainCode")), "ended")
        say("%s failed: %s: %s" % (self.stamp(), key, text))
        return self.finish(status.FAILED_START, key, text, tail=True)

    def run(self):
        a = self.args
        t_gate = time.monotonic()
        show = self.show()
        start = systemd.as_int(show.get("ExecMainStartTimestampMonotonic")) / 1e6
        self.t0 = start if 0 < start <= t_gate else t_gate
        self.phase_entered = self.last_activity = self.t0
        self.base = {"unit": a.unit, "MainPID": systemd.as_int(show.get("MainPID")),
                     "InvocationID": show.get("InvocationID", ""), "NRestarts": show.get("NRestarts", "0")}
        self.matches = ["-u", a.unit] if a.since_cursor else systemd.start_matches(a.unit, show)
        self.probe = HttpProbe(a.host, a.port, a.served_name, a.interval, a.http_timeout, a.health_timeout)
        self.last_show = show
        problem = unit_problem(show, self.base)
        if problem:
            if show.get("LoadState", "loaded") != "loaded":
                return self.fail_start(problem, "unit-not-loaded")
            if start <= 0:
                return self.fail_start("unit %s has not been started" % a.unit, "not-started")
            return self.fail_start(problem)
        say("%s gating %s: main pid %d, http://%s:%d, served name %r, timeout %ss" % (
            self.stamp(), a.unit, self.base["MainPID"], a.host, a.port, a.served_name, a.timeout))
        self.read_journal()
        self.probe.start()
        next_beat = time.monotonic() + a.progress_every
        while True:
            if self.probe.ready.is_set():
                self.read_journal()
                return self.finish(status.READY)
            show = self.last_show = self.show()
            problem = unit_problem(show, self.base)
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
                say("%s hung: no new journal line for %.0fs in phase %s; http: %s" % (
                    self.stamp(now), quiet, sglang_log.PHASE_LABELS[self.phase], self.probe.state))
                return self.finish(status.HUNG, "hung", "no journal line for %.0fs in phase %s" % (
                    quiet, self.phase), tail=True)
            if now >= next_beat:
                next_beat = now + a.progress_every
                say("%s waiting: phase %s, unit %s/%s, main pid %d, http: %s" % (
                    self.stamp(now), in_phase, show.get("ActiveState"), show.get("SubState"),
                    self.base["MainPID"], self.probe.state))
            self.probe.ready.wait(a.interval)


def main(argv=None):
    p = argparse.ArgumentParser(description="Wait until an SGLang unit is ready, or say why it is not.")
    p.add_argument("--unit", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--served-name", required=True)
    p.add_argument("--timeout", type=float, required=True, help="seconds to wait for readiness")
    p.add_argument("--host", default="127.0.0.1", help="address to probe (0.0.0.0 means 127.0.0.1)")
    p.add_argument("--interval", type=float, default=0.25, help="poll interval, seconds")
    p.add_argument("--progress-every", type=float, default=10.0, help="heartbeat interval, seconds")
    p.add_argument("--hang-after", type=float, default=300.0,
                   help="no journal line for this long outside loading/graph capture = hung")
    p.add_argument("--http-timeout", type=float, default=1.0, help="timeout of /v1/models requests")
    p.add_argument("--health-timeout", type=float, default=25.0,
                   help="timeout of /health requests (SGLang's handler takes >= 1 s once ready)")
    since = p.add_mutually_exclusive_group()
    since.add_argument("--since-cursor", help="read the unit's journal after this cursor")
    since.add_argument("--since-start", action="store_true",
                       help="read the journal of the unit's current start (default)")
    p.add_argument("--json", metavar="FILE", help="also write a JSON summary here")
    p.add_argument("--systemctl", default=systemd.SYSTEMCTL)
    p.add_argument("--journalctl", default=systemd.JOURNALCTL)
    return Gate(p.parse_args(argv)).run()


if __name__ == "__main__":
    raise SystemExit(main())
