"""gate.py --recheck: is the server still the one the gate saw ready? Asked right before its
configuration is saved as the last known good (cycle.py's "recheck" step, after the workers and
decode checks), so that a server that died since its gate is never recorded.

The gate's report (--json) names the main process it saw ready and, for a unit, its invocation.
The server still is that one when the unit runs the same invocation and main process (not
restarted by systemd; with --pid: the same process, alive), nothing it logged since the report
is a cause of death (sglang_log.death_of) and /ping answers 200 (/health where there is no
/ping). Otherwise it is a failed start (FAILED_START) with the cause it logged since (the lines
follow, as the gate's excerpt), and the report says so too (`make verify`'s "last start").

    recheck: still the server the gate saw ready: sglang.service, main pid 1234, /ping 200 (21.3s after its verdict)
    recheck: failed: scheduler-died: a scheduler process died: <log line> (main process 1234 is gone (...), 14.2s after the gate's verdict)
"""

import json
import time

from . import engine_auth, result, sglang_log, status, systemd
from .http_probe import HttpProbe

TAIL_LINES = 30


def say(text):
    print(text, flush=True)


def read(watch, cursor, key=None):
    """(lines logged after cursor, probe access lines left out, API keys masked; the cursor
    after them)."""
    try:
        entries, cursor = watch.read(cursor)
    except (OSError, systemd.subprocess.SubprocessError) as exc:
        say("recheck: warning: cannot read the %s: %s" % (watch.source, exc))
        return [], cursor
    lines = [line for _, line in entries if not sglang_log.is_probe_access(line)]
    return [engine_auth.masked(line, key) for line in lines], cursor


def failed(args, key, text, report=None, lines=()):
    """The server is not the one the gate saw ready: said, with the lines it logged since."""
    say("recheck: failed: %s: %s" % (key, text))
    excerpt = list(lines)[-TAIL_LINES:]
    if excerpt:
        say("--- last %d lines since the gate's verdict ---" % len(excerpt))
        for line in excerpt:
            say(line)
        say("---")
    if report is not None:  # the last start's account: it failed after all
        report.update(
            status=status.FAILED_START,
            status_name=status.name(status.FAILED_START),
            cause=key,
            cause_text=text,
            ready_at=None,
            journal_tail=excerpt,
        )
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
    return result.emit(status.FAILED_START, "%s: %s" % (key, text), main_pid=(report or {}).get("main_pid"))


def answers(args, key=None):
    """(the path asked, its status code or why none): /ping, /health where there is no /ping."""
    probe = HttpProbe(
        args.host, args.port, args.served_name, args.interval, args.http_timeout, args.health_timeout, key
    )
    path = "/ping"
    code, why = probe.get(path, args.health_timeout)
    if code == 404:  # a release without /ping
        path = "/health"
        code, why = probe.get(path, args.health_timeout)
    return path, (why if code is None else code)


def recheck(args, watch, death_grace_s):
    """READY when the server is still the one the gate's report (args.json) saw ready."""
    try:
        with open(args.json) as f:
            report = json.load(f)
    except (OSError, ValueError) as exc:
        return failed(args, "no-report", "cannot read the gate's report %s: %s" % (args.json, exc))
    pid = report.get("main_pid")
    if report.get("status") != status.READY or report.get("unit") != args.unit or args.pid not in (None, pid):
        text = "the gate's report %s has no ready verdict on %s (it says %s of %s)" % (
            args.json,
            watch.label,
            report.get("status_name"),
            report.get("unit") or "pid %s" % pid,
        )
        return failed(args, "not-ready", text)
    base = {
        "unit": watch.label,
        "MainPID": pid,
        "InvocationID": report.get("invocation_id") or "",
        "NRestarts": report.get("n_restarts") or "0",
    }
    since_s = time.time() - (report.get("ready_at") or time.time())
    after = "%.1fs after the gate's verdict" % since_s
    watch.begin({"InvocationID": base["InvocationID"]})  # the lines of the start the gate saw
    api_key = engine_auth.key_of(args)
    lines, cursor = read(watch, report.get("cursor"), api_key)
    show, problem = watch.look(base)
    if problem:
        time.sleep(death_grace_s)
        lines += read(watch, cursor, api_key)[0]
        found = sglang_log.cause_of(lines)
        if not found:
            key = systemd.CLD_CODES.get(systemd.as_int(show.get("ExecMainCode")), "ended")
            text = "unrecognised cause, see the lines below" if lines else "nothing logged since"
            found = key, text
        return failed(args, found[0], "%s (%s, %s)" % (found[1], problem, after), report, lines)
    found = sglang_log.death_of(lines)
    if found:  # it logged its death: its main process goes next
        return failed(
            args, found[0], "%s (logged %s, %s)" % (found[1], after, watch.state(show)), report, lines
        )
    path, code = answers(args, api_key)
    if code != 200:
        return failed(
            args, "not-serving", "%s %s (%s, %s)" % (path, code, watch.state(show), after), report, lines
        )
    say(
        "recheck: still the server the gate saw ready: %s, main pid %s, %s 200 (%.1fs after its verdict)"
        % (watch.label, pid, path, since_s)
    )
    return result.emit(status.READY, None, main_pid=pid)
