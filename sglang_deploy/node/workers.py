"""Check that every SGLang worker process carries the expected environment.

Finds the unit's MainPID, walks its descendants, keeps those whose command line (process
title) starts with a --match (SGLang titles its children `sglang::scheduler_TP<n>`, at TP 1
`sglang::scheduler`, and `sglang::detokenizer`), and compares what each one's start-up hook
recorded of its environment (lib/env_records.py, in --records: by default the unit's runtime
directory) with --expect-json. /proc/<pid>/environ is no witness: SGLang's setproctitle reuses
that memory for the title, so a titled process's reads as NUL bytes. A worker without a record
did not run the hook (started from another interpreter, or before the hook was installed) and
fails the check, as one whose record holds another value does.

    python3 workers.py --unit sglang.service --expect-json '{"NCCL_PROTO": "LL"}'
    python3 workers.py --pid 4242 --records /tmp/records --expect-json '{...}'   # no systemd

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
    from .lib import env_records, procs, result, status, systemd
else:  # run as a script: our scripts' directory is on sys.path
    from lib import env_records, procs, result, status, systemd

# The titles of SGLang's children that run the engine's code (and so NCCL, CUDA).
MATCH = ("sglang::scheduler", "sglang::detokenizer")
NO_RECORD = "no record of its environment from the start-up hook (the hook did not run in this process)"


def check_worker(pid, expected, records, proc=procs.PROC):
    """{pid, title, checked, ok, error, mismatches: [{var, expected, actual (None = missing)}]}."""
    report = {
        "pid": pid,
        "title": procs.title(pid, proc),
        "checked": len(expected),
        "ok": True,
        "error": None,
        "mismatches": [],
    }
    env = env_records.read(records, pid, proc)
    if env is None:
        report.update(ok=False, error=NO_RECORD)
        return report
    for var, want in sorted(expected.items()):
        have = env.get(var)
        if have != want:
            report["mismatches"].append({"var": var, "expected": want, "actual": have})
    report["ok"] = not report["mismatches"]
    return report


def find_workers(main_pid, match=MATCH, proc=procs.PROC):
    """Descendants of main_pid (and main_pid itself) whose command line starts with one of match."""
    if main_pid <= 0:
        return []
    candidates = [main_pid] + procs.descendants(main_pid, procs.ppid_map(proc))
    return [pid for pid in candidates if procs.title(pid, proc).startswith(tuple(match))]


def is_scheduler(worker):
    """A tensor-parallel scheduler (one per rank), not the detokenizer."""
    return worker["title"].startswith(MATCH[0])


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


def run(unit, expected, match=MATCH, main_pid=None, records=None, systemctl=systemd.SYSTEMCTL):
    """The report dict, with 'status' set; ``records``: where the hook writes (default: the
    unit's runtime directory)."""
    message = None
    match = tuple(match)
    if records is None:
        records = env_records.records_dir(env_records.service_of(unit))
    if main_pid is None:
        main_pid = systemd.as_int(systemd.unit_show(unit, ("MainPID",), systemctl=systemctl).get("MainPID"))
    workers = [check_worker(pid, expected, records) for pid in find_workers(main_pid, match)]
    if main_pid <= 0:
        code, message = status.NO_WORKERS, "%s has no main process (not running)" % unit
    elif not workers:
        code, message = (
            status.NO_WORKERS,
            "no process under main pid %d has a command line starting with %s"
            % (main_pid, " or ".join(repr(m) for m in match)),
        )
    elif all(w["ok"] for w in workers):
        code = status.READY
    else:
        code = status.WORKER_ENV_MISMATCH
    return {
        "unit": unit,
        "main_pid": main_pid,
        "match": list(match),
        "records": records,
        "expected": expected,
        "workers": workers,
        "message": message,
        "status": code,
        "status_name": status.name(code),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description="Check the environment of the unit's worker processes.")
    parser.add_argument("--unit", default="sglang.service")
    parser.add_argument("--expect-json", required=True, help='{"VAR": "value", ...}')
    parser.add_argument(
        "--match",
        action="append",
        help="command-line prefix of a worker (repeatable; default: %s)" % ", ".join(MATCH),
    )
    parser.add_argument(
        "--records", help="where the start-up hook records (default: the unit's runtime directory)"
    )
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
    report = run(args.unit, expected, args.match or MATCH, args.pid, args.records, args.systemctl)
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
