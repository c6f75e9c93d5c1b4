"""What this node runs and how it last did, read in one go for `make status` (the controller's
sglang_deploy/status/): read-only and quick. Nothing is hashed, and no secret is printed: the
env file is opened only for the server's API key (--api-key-env-file, lib/engine_auth.py), which
/ping is asked with.

    python3 node_status.py node --unit U [--host H] --port P --venv-link L --venvs-dir V
        --last-good-dir D --history FILE [--passport FILE] [--systemctl PATH] [--proc DIR] [--json]
        [--api-key-env-file F --api-key-var NAME]
    python3 node_status.py router --url http://127.0.0.1:30000 [--json]

`node`'s result line (result.py) carries, each read on its own (one that cannot be read says
why in an "unreadable" key and the others still come):
    "now": the node's clock (every "age_s" is against it: no clock skew with the controller),
    "unit": {"load", "active", "sub", "main_pid", "since_s"} (systemctl show),
    "ping": the server's /ping answers 200 (asked at --host: loopback for 0.0.0.0 or ::),
    "engine": {"link": the venv name engine.venv points at, "pending": L.next's (a staged
              switch), "running": the venv the unit's main process runs (/proc/<pid>/exe),
              "built_at"} (venv names: plan/venv_names.py, the lock's digest or the pins'),
    "last_good": {"profile", "saved_at", "age_s", "venv"} or null (lastgood.py's manifest),
    "decode": the history's last decode check {"time", "profile", "decode_tok_s",
              "change_pct", "baseline", "error", "accepted", "restored", "speculation", "age_s"} or null
              (decode_check.py's throughput.jsonl; only its tail is read),
    "passport": {"age_s", "passport": the file's JSON} or null (the hardware passport).
`router`'s: {"router": {"url", "health": /health answered 200, "workers": {url: {"id",
"healthy", "load"}}}} (node/lib/routers.py); a router that does not answer exits
status.UNEXPECTED with the cause. --json: the result line only.

Exit status 0 (status.py) when it read what there is to read. Standard library only, Python >= 3.9.
"""

import argparse
import calendar
import json
import os
import sys
import time

if __package__:
    from . import venvs
    from .lib import engine_auth, last_good_record, result, status, systemd
    from .lib.guard import guarded
    from .lib.http_probe import server_url
    from .lib.routers import Router, RouterError
else:  # run as a script: our scripts' directory is on sys.path
    import venvs
    from lib import engine_auth, last_good_record, result, status, systemd
    from lib.guard import guarded
    from lib.http_probe import server_url
    from lib.routers import Router, RouterError

PASSPORT = "passport.json"  # the hardware passport, in the state directory (beside the services')
UNIT_PROPS = ("LoadState", "ActiveState", "SubState", "MainPID", "ActiveEnterTimestampMonotonic")
HISTORY_TAIL = 64 * 1024  # bytes of throughput.jsonl read: its last entries, however long it grew
DECODE_KEYS = (
    "time",
    "profile",
    "decode_tok_s",
    "change_pct",
    "baseline",
    "error",
    "accepted",
    "restored",
    "speculation",
)


def _unreadable(exc):
    # Its own key: a decode check's entry has an "error" of its own (why it measured nothing).
    return {"unreadable": "%s: %s" % (type(exc).__name__, exc)}


def unit_state(unit, systemctl=systemd.SYSTEMCTL, monotonic=None):
    show = systemd.unit_show(unit, UNIT_PROPS, systemctl=systemctl)
    entered_us = systemd.as_int(show.get("ActiveEnterTimestampMonotonic"))
    monotonic = time.monotonic() if monotonic is None else monotonic
    return {
        "load": show.get("LoadState"),
        "active": show.get("ActiveState"),
        "sub": show.get("SubState"),
        "main_pid": systemd.as_int(show.get("MainPID")),
        "since_s": round(monotonic - entered_us / 1e6, 1) if entered_us else None,
    }


def answers_ping(port, timeout=1.0, host="127.0.0.1", key=None):
    try:
        with engine_auth.opener(key).open(server_url(host, port) + "/ping", timeout=timeout) as answer:
            return answer.status == 200
    except (OSError, ValueError):
        return False


def running_venv(pid, venvs_dir, proc="/proc"):
    """The venv of ``venvs_dir`` the process ``pid`` runs from (its executable), or None."""
    if not pid:
        return None
    try:
        exe = os.readlink(os.path.join(proc, str(pid), "exe"))
    except OSError:
        return None
    return venvs._venv_of(exe, os.path.realpath(venvs_dir))


def engine(link, venvs_dir, pid=0, proc="/proc"):
    live = venvs.target_name(link, venvs_dir)
    pending = link + venvs.PENDING
    return {
        "link": live,
        "pending": venvs.target_name(pending, venvs_dir) if os.path.islink(pending) else None,
        "running": running_venv(pid, venvs_dir, proc),
        "built_at": venvs.built_at(os.path.realpath(link)) if live else None,
    }


def last_good(directory, now):
    where = last_good_record.locate(directory)
    if where is None:
        return None
    path = os.path.join(where, last_good_record.MANIFEST)
    with open(path) as f:
        manifest = json.load(f)
    target = manifest.get("venv_target")
    return {
        "profile": manifest.get("profile"),
        "saved_at": manifest.get("saved_at"),
        "age_s": round(now - os.stat(path).st_mtime, 1),
        "venv": os.path.basename(target) if target else None,
    }


def tail_lines(path, size=HISTORY_TAIL):
    """The whole lines of a file's last ``size`` bytes (the first, likely cut, is dropped when
    the file is longer); [] when there is no file."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            length = f.tell()
            f.seek(max(0, length - size))
            text = f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return []
    lines = text.splitlines()
    return lines[1:] if length > size else lines


def _utc_seconds(stamp):
    """Seconds since the epoch of decode_check.py's "time" (UTC, %Y-%m-%dT%H:%M:%SZ), or None."""
    try:
        return calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"))
    except (TypeError, ValueError):
        return None


def last_decode(history, now):
    """The last decode check of the history with its age; a torn last line is skipped."""
    for line in reversed(tail_lines(history)):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict):
            continue
        found = {key: entry.get(key) for key in DECODE_KEYS}
        when = _utc_seconds(entry.get("time"))
        found["age_s"] = None if when is None else round(now - when, 1)
        return found
    return None


def passport(path, now):
    if not path or not os.path.isfile(path):
        return None
    with open(path) as f:
        found = json.load(f)
    return {"age_s": round(now - os.stat(path).st_mtime, 1), "passport": found}


def node(args, now=None):
    now = time.time() if now is None else now
    details = {"now": now}
    try:
        details["unit"] = unit_state(args.unit, args.systemctl)
    except (systemd.SystemdError, OSError, ValueError) as exc:
        details["unit"] = _unreadable(exc)
    pid = details["unit"].get("main_pid") or 0
    details["ping"] = answers_ping(args.port, host=args.host, key=engine_auth.key_of(args))
    readers = (
        ("engine", lambda: engine(args.venv_link, args.venvs_dir, pid, args.proc)),
        ("last_good", lambda: last_good(args.last_good_dir, now)),
        ("decode", lambda: last_decode(args.history, now)),
        ("passport", lambda: passport(args.passport, now)),
    )
    for key, read in readers:
        try:
            details[key] = read()
        except (OSError, ValueError) as exc:
            details[key] = _unreadable(exc)
    if not args.json:
        unit = details["unit"]
        print("%s: %s" % (args.unit, unit.get("unreadable") or "%s/%s" % (unit["active"], unit["sub"])))
    return result.emit(status.READY, **details)


def router(args):
    found = Router(args.url, timeout=3.0)
    try:
        view = {"url": found.url, "health": found.health(), "workers": found.workers()}
    except RouterError as exc:
        return result.emit(status.UNEXPECTED, str(exc), router={"url": found.url})
    if not args.json:
        print("router %s: %d worker(s)" % (found.url, len(view["workers"])))
    return result.emit(status.READY, router=view)


@guarded
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print only the result line")
    sub = parser.add_subparsers(dest="action", required=True)
    on_node = sub.add_parser("node", help="the unit, its engine, last known good, decode, passport")
    on_node.add_argument("--unit", required=True)
    on_node.add_argument("--host", default="127.0.0.1", help="the server's --host (0.0.0.0 means 127.0.0.1)")
    on_node.add_argument("--port", type=int, required=True, help="the server's port here")
    on_node.add_argument("--venv-link", required=True, help="the profile's engine.venv")
    on_node.add_argument("--venvs-dir", required=True)
    on_node.add_argument("--last-good-dir", required=True)
    on_node.add_argument("--history", required=True, help="the decode checks (throughput.jsonl)")
    on_node.add_argument("--passport", help="the hardware passport's file")
    on_node.add_argument("--systemctl", default=systemd.SYSTEMCTL)
    on_node.add_argument("--proc", default="/proc")
    engine_auth.add_arguments(on_node)
    on_router = sub.add_parser("router", help="the router's health and its workers")
    on_router.add_argument("--url", required=True)
    for each in (on_node, on_router):  # also after the action, as the controller writes it
        each.add_argument("--json", action="store_true", default=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    return node(args) if args.action == "node" else router(args)


if __name__ == "__main__":
    sys.exit(main())
