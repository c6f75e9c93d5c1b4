"""Prometheus' readiness gate (and the node exporter's): PATH answers 200 on URL while UNIT runs,
polled until --timeout (0: look once). --reload first has systemd reload UNIT (SIGHUP) and waits
until Prometheus says, in its own metrics, that it loaded its configuration since.

    python3 prometheus_gate.py --url http://127.0.0.1:9090 --path /-/ready
        --unit prometheus.service --timeout SECONDS [--reload]

Ends with one result line: {"http_code": PATH's last status code or null, "active": the unit's
ActiveState, "journal": the unit's last lines when it failed}; exit 0 when ready, 3
(FAILED_START) when the unit failed, 41 (RELOAD_FAILED) when Prometheus refused its
configuration (it keeps the one before), 4 (TIMEOUT) otherwise; the cause names what the
journal says.
"""

import argparse
import math
import sys
import time

if __package__:
    from .lib import prometheus_api, result, status, systemd
else:  # run as a script: our scripts' directory is on sys.path
    from lib import prometheus_api, result, status, systemd

RELOAD_OK = "prometheus_config_last_reload_successful"
RELOAD_AT = "prometheus_config_last_reload_success_timestamp_seconds"


def reload_state(url):
    """(loaded successfully, when: epoch seconds) from Prometheus' own metrics, or (None, None)."""
    code, body = prometheus_api.get(url + "/metrics")
    if code != 200:
        return None, None
    found = prometheus_api.samples(body, (RELOAD_OK, RELOAD_AT))
    ok = found.get(RELOAD_OK)
    return (None if ok is None else ok == 1), found.get(RELOAD_AT)


def journal(unit):
    try:
        entries, _ = systemd.journal_read(["-u", unit, "-n", "20"])
    except Exception as exc:  # no journalctl: the cause says so, the gate's verdict stands
        return ["(journal unread: %s)" % exc]
    return [line[:300] for _, line in entries]


def fail(code, why, unit, last_code, active):
    lines = journal(unit)
    cause = prometheus_api.journal_cause(lines)
    return result.emit(
        code,
        "%s: %s%s" % (unit, why, "; journal: %s" % cause if cause else ""),
        http_code=last_code,
        active=active,
        journal=lines[-10:],
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--path", required=True)
    parser.add_argument("--unit", required=True)
    parser.add_argument("--timeout", type=float, required=True)  # prometheus_ready_timeout_s
    parser.add_argument("--reload", action="store_true")
    parser.add_argument("--interval", type=float, default=0.5)
    args = parser.parse_args(argv)
    sent = None
    if args.reload:
        sent = math.floor(time.time())  # the metric has whole seconds
        done = systemd.systemctl(["reload", args.unit])
        if done.returncode != 0:
            why = "systemctl reload failed: %s" % (done.stderr.strip() or done.returncode)
            return fail(status.RELOAD_FAILED, why, args.unit, None, None)
    deadline = time.monotonic() + args.timeout
    code, active = None, None
    while True:
        active = systemd.unit_show(args.unit, ("ActiveState",)).get("ActiveState")
        if active == "failed":
            return fail(status.FAILED_START, "the unit failed", args.unit, code, active)
        code, body = prometheus_api.get(args.url + args.path)
        loaded = True
        if sent is not None:
            ok, at = reload_state(args.url)
            if ok is False:
                why = "did not load its configuration again (it keeps the one before)"
                return fail(status.RELOAD_FAILED, why, args.unit, code, active)
            loaded = ok is True and at is not None and at >= sent
        if code == 200 and loaded:
            print("%s ready: %s%s answers 200" % (args.unit, args.url, args.path), flush=True)
            return result.emit(status.READY, None, http_code=code, active=active)
        if time.monotonic() >= deadline:
            break
        time.sleep(args.interval)
    if code == 200:
        why = "no configuration loaded since the reload after %.0fs" % args.timeout
    else:
        answer = "answered %d" % code if code else "did not answer (%s)" % body
        why = "%s%s %s after %.0fs (unit %s)" % (args.url, args.path, answer, args.timeout, active)
    return fail(status.TIMEOUT, why, args.unit, code, active)


if __name__ == "__main__":
    sys.exit(main())
