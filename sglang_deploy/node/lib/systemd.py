"""Small helpers around systemctl and journalctl.

The executables can be overridden (every script has --systemctl / --journalctl), so tests
can point them at fakes.

    unit_show(unit, props)                      -> {prop: value}
    journal_read(matches, after_cursor=None)    -> ([(monotonic_s or None, message)], cursor)
    start_matches(unit, show)                   -> journalctl match arguments for one start

CLI: python3 systemd.py show UNIT PROP...   |   python3 systemd.py journal UNIT [--lines N] [--json]
(--json: only a result line, node/lib/result.py, whose "lines" and "cursor" the controller reads)
"""

import argparse
import json
import os
import subprocess
import sys
import time

SYSTEMCTL = "systemctl"
JOURNALCTL = "journalctl"

# What the gate and restart read about a unit.
UNIT_PROPS = (
    "LoadState",
    "ActiveState",
    "SubState",
    "Result",
    "MainPID",
    "ExecMainStatus",
    "ExecMainCode",
    "NRestarts",
    "InvocationID",
    "ExecMainStartTimestampMonotonic",
    "ActiveEnterTimestampMonotonic",
    "ControlGroup",
)
# ExecMainCode values (siginfo si_code of the main process' exit).
CLD_CODES = {1: "exited", 2: "killed", 3: "dumped"}


class SystemdError(RuntimeError):
    pass


def parse_show(text):
    """Parse `systemctl show` key=value output."""
    props = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            props[key.strip()] = value.strip()
    return props


def systemctl(args, systemctl=SYSTEMCTL, timeout=30):
    """Run systemctl with args; returns the CompletedProcess (text, captured)."""
    return subprocess.run(
        [systemctl] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout
    )


def unit_show(unit, props=UNIT_PROPS, systemctl=SYSTEMCTL, timeout=10):
    """{prop: value} for the unit, via `systemctl show -p A -p B … UNIT`."""
    args = ["show", "--no-pager"]
    for prop in props:
        args += ["-p", prop]
    proc = subprocess.run(
        [systemctl] + args + ["--", unit],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise SystemdError("systemctl show %s failed: %s" % (unit, proc.stderr.strip()))
    return parse_show(proc.stdout)


def as_int(value, default=0):
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def describe_exit(show):
    """'exited with status 1' / 'killed by signal 9' from ExecMainCode/ExecMainStatus."""
    code = CLD_CODES.get(as_int(show.get("ExecMainCode")))
    status = as_int(show.get("ExecMainStatus"))
    if code == "exited":
        return "main process exited with status %d" % status
    if code in ("killed", "dumped"):
        return "main process killed by signal %d%s" % (status, " (core dumped)" if code == "dumped" else "")
    return "main process state unknown"


def start_matches(unit, show):
    """journalctl arguments selecting the lines of the unit's current (or last) start.

    With an InvocationID: the service's own output (_SYSTEMD_INVOCATION_ID) plus systemd's
    messages about that invocation (INVOCATION_ID). Otherwise the unit's lines since its main
    process started. (To read from a cursor instead, use ["-u", unit] and after_cursor.)
    """
    inv = show.get("InvocationID", "")
    if inv:
        return ["_SYSTEMD_INVOCATION_ID=" + inv, "+", "INVOCATION_ID=" + inv]
    start_mono = as_int(show.get("ExecMainStartTimestampMonotonic")) / 1e6
    if start_mono > 0:
        since = time.time() - (time.monotonic() - start_mono) - 1
        return ["-u", unit, "--since", "@%d" % since]
    return ["-u", unit, "--lines", "200"]


def _message(value):
    if isinstance(value, list):  # non-UTF-8 messages come as byte arrays
        return bytes(value).decode("utf-8", "replace")
    return value if isinstance(value, str) else ""


def journal_read(matches, after_cursor=None, journalctl=JOURNALCTL, timeout=10):
    """Entries for the matches after a cursor: ([(monotonic seconds or None, message)], cursor).

    The returned cursor is after_cursor when nothing new arrived.
    """
    args = [journalctl, "--no-pager", "--all", "-o", "json", "--output-fields=MESSAGE"] + list(matches)
    if after_cursor:
        args += ["--after-cursor", after_cursor]
    proc = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    entries, cursor = [], after_cursor
    for raw in proc.stdout.splitlines():
        try:
            entry = json.loads(raw.decode("utf-8", "replace"))
        except ValueError:
            continue
        cursor = entry.get("__CURSOR", cursor)
        mono = entry.get("__MONOTONIC_TIMESTAMP")
        mono = as_int(mono) / 1e6 if mono is not None else None
        for line in _message(entry.get("MESSAGE")).splitlines() or [""]:
            entries.append((mono, line))
    return entries, cursor


def journal_lines(unit, since_cursor=None, show=None, journalctl=JOURNALCTL, systemctl=SYSTEMCTL):
    """Message lines of the unit's current start (or after since_cursor), and the last cursor."""
    if show is None and not since_cursor:
        show = unit_show(unit, ("InvocationID", "ExecMainStartTimestampMonotonic"), systemctl=systemctl)
    matches = ["-u", unit] if since_cursor else start_matches(unit, show)
    entries, cursor = journal_read(matches, after_cursor=since_cursor, journalctl=journalctl)
    return [line for _, line in entries], cursor


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Read unit properties or the journal of a unit's current start."
    )
    parser.add_argument("--systemctl", default=SYSTEMCTL)
    parser.add_argument("--journalctl", default=JOURNALCTL)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_show = sub.add_parser("show")
    p_show.add_argument("unit")
    p_show.add_argument("props", nargs="*")
    p_journal = sub.add_parser("journal")
    p_journal.add_argument("unit")
    p_journal.add_argument("--since-cursor")
    p_journal.add_argument("--lines", type=int, default=0, help="only the last N lines")
    p_journal.add_argument("--json", action="store_true", help="only the result line, with the lines")
    args = parser.parse_args(argv)
    if args.cmd == "show":
        for key, value in unit_show(args.unit, args.props or UNIT_PROPS, systemctl=args.systemctl).items():
            print("%s=%s" % (key, value))
    else:
        lines, cursor = journal_lines(
            args.unit, args.since_cursor, journalctl=args.journalctl, systemctl=args.systemctl
        )
        lines = lines[-args.lines :] if args.lines else lines
        if args.json:
            result, status = _protocol()
            return result.emit(status.READY, lines=lines, cursor=cursor)
        for line in lines:
            print(line)
        print("-- cursor: %s" % cursor)
    return 0


def _protocol():
    """result.py and status.py, also when this file runs as a script (lib/systemd.py)."""
    if __package__:
        from . import result, status
    else:
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        from lib import result, status
    return result, status


if __name__ == "__main__":
    sys.exit(main())
