"""Hold a node's deploy lock for as long as the caller's connection lives.

    python3 lock.py --path /run/sglang-deploy/sglang.lock --wait 600 --holder "alice@laptop pid 42"

Takes an exclusive flock on PATH (waiting up to --wait seconds), writes the holder and the time
to the file, prints the event `{"event": "locked"}`, then holds the lock until standard input closes: the deploy keeps
the SSH session open, so when the deploy ends — or its process dies — the session closes, this
process exits and the kernel releases the lock. Nothing stale survives a crashed deploy.
While it waits it prints `{"event": "waiting", "holder": "<holder> since <time>"}`; if the lock
stays busy, `{"event": "busy", "holder": ...}` and exits 9 (status.LOCKED). One JSON event per
line, read by result.events on the controller.
Standard library only: it is sent inline, before our scripts (result.py, status.py) are on the
node, so it writes its events itself.
"""

import argparse
import fcntl
import json
import os
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", required=True)
    parser.add_argument("--wait", type=float, default=600.0)
    parser.add_argument("--holder", required=True)
    args = parser.parse_args(argv)
    os.makedirs(os.path.dirname(args.path), exist_ok=True)
    fd = os.open(args.path, os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + args.wait
    announced = False
    while not try_lock(fd):
        holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "unknown"
        if time.monotonic() >= deadline:
            event("busy", holder=holder)
            return LOCKED_STATUS
        if not announced:
            event("waiting", holder=holder)
            announced = True
        time.sleep(0.2)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{args.holder} since {time.strftime('%Y-%m-%d %H:%M:%S %Z')}\n".encode(), 0)
    event("locked")
    sys.stdin.read()  # until the deploy's session closes
    os.ftruncate(fd, 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
