"""Check that every SGLang worker process carries the expected environment.

Finds the unit's MainPID, walks its descendants, keeps those whose command line (process
title) starts with --match (SGLang titles its schedulers `sglang::scheduler_TP<n>`), and
compares /proc/<pid>/environ with --expect-json.

    python3 workers.py --unit sglang.service --expect-json '{"NCCL_PROTO": "LL"}'

Output, one line per worker and one per mismatch:
    pid 1234 sglang::scheduler_TP0: 6/6 variables ok
    pid 1235 sglang::scheduler_TP1: NCCL_PROTO is missing
    pid 1235 sglang::scheduler_TP1: NCCL_ALGO is 'Tree', expected 'Ring'
The result line (result.py) carries {"unit", "main_pid", "match", "expected", "workers": [...],
"message"}; --json prints only that line.
"""

import argparse
import json
import sys

if __package__:
    from .lib import procs, result, status, systemd
else:  # run as a script: our scripts' directory is on sys.path
    from lib import procs, result, status, systemd


def check_worker(pid, expected, proc=procs.PROC):
    """{pid, title, checked, ok, error, mismatches: [{var, expected, actual (None = missing)}]}."""
    report = {
        "pid": pid,
        "title": procs.title(pid, proc),
        "checked": len(expected),
        "ok": True,
        "error": None,
        "mismatches": [],
    }
    try:
        env = procs.read_environ(pid, proc)
    except OSError as exc:
        report.update(ok=False, error="cannot read environment: %s" % (exc.strerror or exc))
        return report
    for var, want in sorted(expected.items()):
        have = env.get(var)
        if have != want:
            report["mismatches"].append({"var": var, "expected": want, "actual": have})
    report["ok"] = not report["mismatches"]
    return report


def find_workers(main_pid, match, proc=procs.PROC):
    """Descendants of main_pid (and main_pid itself) whose command line starts with match."""
    if main_pid <= 0:
        return []
    candidates = [main_pid] + procs.descendants(main_pid, procs.ppid_map(proc))
    return [pid for pid in candidates if procs.title(pid, proc).startswith(match)]


def report_lines(report):
    lines = []
    for worker in report["workers"]:
        head = "pid %d %s:" % (worker["pid"], worker["title"])
        if worker["error"]:
            lines.append("%s %s" % (head, worker["error"]))
            continue
        good = worker["checked"] - len(worker["mismatches"])
        lines.append("%s %d/%d variables ok" % (head, good, worker["checked"]))
        for m in worker["mismatches"]:
            if m["actual"] is None:
                lines.append("%s %s is missing" % (head, m["var"]))
            else:
                lines.append("%s %s is %r, expected %r" % (head, m["var"], m["actual"], m["expected"]))
    return lines


def run(unit, expected, match="sglang::scheduler", main_pid=None, systemctl=systemd.SYSTEMCTL):
    """The report dict, with 'status' set."""
    message = None
    if main_pid is None:
        main_pid = systemd.as_int(systemd.unit_show(unit, ("MainPID",), systemctl=systemctl).get("MainPID"))
    workers = [check_worker(pid, expected) for pid in find_workers(main_pid, match)]
    if main_pid <= 0:
        code, message = status.NO_WORKERS, "%s has no main process (not running)" % unit
    elif not workers:
        code, message = (
            status.NO_WORKERS,
            "no process under main pid %d has a command line starting with %r" % (main_pid, match),
        )
    elif all(w["ok"] for w in workers):
        code = status.READY
    else:
        code = status.WORKER_ENV_MISMATCH
    return {
        "unit": unit,
        "main_pid": main_pid,
        "match": match,
        "expected": expected,
        "workers": workers,
        "message": message,
        "status": code,
        "status_name": status.name(code),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description="Check the environment of the unit's worker processes.")
    parser.add_argument("--unit", required=True)
    parser.add_argument("--expect-json", required=True, help='{"VAR": "value", ...}')
    parser.add_argument("--match", default="sglang::scheduler", help="command-line prefix of a worker")
    parser.add_argument("--json", action="store_true", help="print a JSON report instead of lines")
    parser.add_argument("--pid", type=int, help="use this main pid instead of the unit's MainPID")
    parser.add_argument("--systemctl", default=systemd.SYSTEMCTL)
    args = parser.parse_args(argv)
    try:
        expected = json.loads(args.expect_json)
        if not isinstance(expected, dict):
            raise ValueError("not an object")
    except ValueError as exc:
        parser.error("--expect-json: %s" % exc)
    expected = {str(k): str(v) for k, v in expected.items()}
    report = run(args.unit, expected, args.match, args.pid, args.systemctl)
    lines = report_lines(report)
    if not args.json:  # --json: the result line alone, the report in it
        for line in lines:
            print(line)
        if report["message"]:
            print(report["message"])
    return result.emit(report["status"], cause(report, lines), **report)


def cause(report, lines):
    """Why the check failed: the message (no workers), else the first mismatch."""
    if report["status"] == status.READY:
        return None
    return report["message"] or next(
        (line for line in lines if not line.endswith(" variables ok")), lines[-1] if lines else None
    )


if __name__ == "__main__":
    sys.exit(main())
