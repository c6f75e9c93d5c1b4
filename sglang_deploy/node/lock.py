"""Hold a node's deploy lock for as long as the caller's connection lives.

    python3 lock.py --path /run/sglang-deploy/sglang.lock --wait 600 --holder "alice@laptop pid 42"

Takes an exclusive flock on PATH (waiting up to --wait seconds), writes the holder and the time
to the file, prints the event `{"event": "locked"}`, then holds the lock until standard input closes: the deploy keeps
the SSH session open, so when the deploy ends — or its process dies — the session closes, this
process exits and the kernel releases the lock. Nothing stale survives a crashed deploy.
While it waits it prints `{"event": "waiting", "holder": "<holder> since <time>"}`; if the lock
stays busy, `{"event": "busy", "holder": ...}` and exits 9 (status.LOCKED). One JSON event per
line, read by result.events on the controller.
With --cycles-dir (the service's detached restart cycles, node/detach.py), the lock is not
given while a cycle of the service still runs: a deploy whose controller died leaves its cycle
running to the end. It prints `{"event": "cycle_running", "unit", "started", "profile"}`, then
the cycle's progress as `{"event": "cycle_progress", "line"}` events, and takes the lock once
the cycle ended; still running at --wait: `busy`, the holder being that cycle. Every cycle that
ended while no controller watched it is then said once, `{"event": "previous_cycle", "started",
"profile", "outcome", "cause", "restored_profile", "exit_status"}`, and marked reported.
Standard library only: it is sent inline, before our scripts (result.py, status.py, detach.py)
are on the node, so it writes its events and reads the cycle files itself.
"""

import argparse
import fcntl
import glob
import json
import os
import subprocess
import sys
import time

LOCKED_STATUS = 9  # status.LOCKED; this script runs before status.py is uploaded


def event(name, **details):
    print(json.dumps(dict(details, event=name), sort_keys=True), flush=True)


def try_lock(fd):
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _cycles(directory, systemctl):
    """The service's detached cycles not reported yet: (meta, running, result line or None,
    exit status or None), oldest first (the files of node/detach.py)."""
    found = []
    for path in sorted(glob.glob(os.path.join(directory, "cycle-*.json"))):
        base = path[: -len(".json")]
        try:
            meta = json.loads(_read(path) or "")
        except ValueError:
            continue
        if os.path.exists(base + ".reported"):
            continue
        end = _read(base + ".end")
        running = end is None and _active(meta.get("unit", ""), systemctl)
        end = end if running else _read(base + ".end")
        line = None
        for text in reversed((_read(base + ".result") or "").splitlines()):
            try:
                line = json.loads(text)
                break
            except ValueError:
                continue
        try:
            code = json.loads(end)["exit_status"] if end else None
        except (ValueError, KeyError, TypeError):
            code = None
        found.append((dict(meta, base=base), running, line if isinstance(line, dict) else None, code))
    return sorted(found, key=lambda one: one[0].get("started_at", 0))


def _active(unit, systemctl):
    try:
        done = subprocess.run(
            [systemctl, "is-active", unit], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
    except OSError:
        return False
    return done.stdout.decode().strip() in ("active", "activating", "deactivating", "reloading")


def wait_for_cycles(directory, systemctl, deadline):
    """Until no cycle of the service runs (its progress as events); the one still running at
    the deadline, or None."""
    while True:
        running = [meta for meta, busy, _, _ in _cycles(directory, systemctl) if busy]
        if not running:
            return None
        meta = running[0]
        event(
            "cycle_running", unit=meta.get("unit"), started=meta.get("started"), profile=meta.get("profile")
        )
        offset = 0
        while _active(meta.get("unit", ""), systemctl) and time.monotonic() < deadline:
            offset = _progress(meta["base"] + ".log", offset)
            time.sleep(0.5)
        offset = _progress(meta["base"] + ".log", offset)
        if time.monotonic() >= deadline and _active(meta.get("unit", ""), systemctl):
            return meta


def _progress(log, offset):
    """The log's whole lines from ``offset`` as events; the offset after them."""
    try:
        with open(log, "rb") as f:
            f.seek(offset)
            chunk = f.read()
    except OSError:
        return offset
    chunk = chunk[: chunk.rfind(b"\n") + 1]
    for line in chunk.decode("utf-8", errors="replace").splitlines():
        event("cycle_progress", line=line)
    return offset + len(chunk)


def report_cycles(directory, systemctl):
    """Say each cycle that ended while no controller watched it, once."""
    for meta, running, line, code in _cycles(directory, systemctl):
        if running:
            continue
        line = line or {}
        restored = [s.get("profile") for s in line.get("steps") or [] if s.get("profile")]
        event(
            "previous_cycle",
            started=meta.get("started"),
            profile=meta.get("profile"),
            outcome=line.get("outcome"),
            cause=line.get("cause"),
            restored_profile=line.get("profile") or (restored[-1] if restored else None),
            exit_status=code,
        )
        os.close(os.open(meta["base"] + ".reported", os.O_WRONLY | os.O_CREAT, 0o600))


def acquire(path, wait, holder, cycles_dir=None, systemctl="systemctl"):
    """Take the lock at ``path`` for ``holder``, waiting up to ``wait`` seconds (and, with
    ``cycles_dir``, for the service's detached restart cycles), saying so in events: the open
    descriptor that holds it (closing it, or the process's end, releases it), or None when it
    stayed busy (a ``busy`` event said who holds it). Another of our scripts that must not run
    under a deploy (nccl_ab.py --stop-server) takes it here too."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + wait
    announced = False
    while not try_lock(fd):
        holder_now = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "unknown"
        if time.monotonic() >= deadline:
            event("busy", holder=holder_now)
            os.close(fd)
            return None
        if not announced:
            event("waiting", holder=holder_now)
            announced = True
        time.sleep(0.2)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{holder} since {time.strftime('%Y-%m-%d %H:%M:%S %Z')}\n".encode(), 0)
    if cycles_dir and os.path.isdir(cycles_dir):
        still = wait_for_cycles(cycles_dir, systemctl, deadline)
        if still is not None:
            event(
                "busy",
                holder="the restart cycle %s (started %s), still running"
                % (still.get("unit"), still.get("started")),
            )
            release(fd)
            return None
        report_cycles(cycles_dir, systemctl)
    return fd


def release(fd):
    """Give the lock ``acquire`` took back (its holder line cleared)."""
    os.ftruncate(fd, 0)
    os.close(fd)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", required=True)
    parser.add_argument("--wait", type=float, default=600.0)
    parser.add_argument("--holder", required=True)
    parser.add_argument("--cycles-dir", help="the service's detached restart cycles (node/detach.py)")
    parser.add_argument("--systemctl", default="systemctl")
    args = parser.parse_args(argv)
    fd = acquire(args.path, args.wait, args.holder, args.cycles_dir, args.systemctl)
    if fd is None:
        return LOCKED_STATUS
    event("locked")
    sys.stdin.read()  # until the deploy's session closes
    release(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
