"""Run a restart cycle on this node detached from the deploy's SSH session, and follow it.

    python3 detach.py start --dir /run/sglang-deploy/sglang --service sglang --id ID
                            --profile NAME --command 'ROTATION OR CYCLE COMMAND'
    python3 detach.py follow --dir DIR --id ID --from-offset N [--for 10]
    python3 detach.py status --dir DIR [--mark-reported]
    python3 detach.py ack --dir DIR --id ID    # the controller has read the cycle's end
    python3 detach.py run --dir DIR --id ID      # the unit's own process (start runs it)

`start` launches the command as a transient systemd service, sglang-deploy-cycle-<service>-<id>
(systemd-run --collect): it lives outside the SSH session's cgroup, so a controller that dies
(a lid closed, a VPN drop) leaves it running to its end: the node serving the new
configuration gated, or rolled back, and back in every router. Its progress goes to
DIR/cycle-<id>.log (0600), its result line to DIR/cycle-<id>.result (result.py's result file),
its exit status to DIR/cycle-<id>.end; DIR/cycle-<id>.json says what was started and when.
Without systemd, start ends NO_SYSTEMD and starts nothing (the caller runs the command itself);
while another cycle of the service runs, LOCKED.

`follow` prints the log's lines from byte --from-offset as they come (read every --interval),
for up to --for seconds or until the cycle ended; its result line says where it stopped
("offset": the next call's --from-offset, so no line is shown twice or skipped), "state"
("running" or "ended") and, once ended, the cycle's own result line ("cycle", null when it
wrote none) and "exit_status". The controller that read the end says so with `ack`, which
marks the cycle reported: never `follow` itself, whose SSH session may outlive a controller
that died (the cycle would then be marked reported with nobody having read it).

`status` lists the cycles nobody reported yet (still running, or ended while no controller
watched), each with its result; --mark-reported marks the ended ones reported.
"""

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import time

if __package__:
    from .lib import output, result, status
else:  # run as a script: our scripts' directory is on sys.path
    from lib import output, result, status

UNIT_PREFIX = "sglang-deploy-cycle-"
RUNNING_STATES = ("active", "activating", "deactivating", "reloading")
KEEP_REPORTED = 5  # ended and reported cycles whose files stay, newest first


def unit_name(service, cycle_id):
    return "%s%s-%s.service" % (UNIT_PREFIX, service, cycle_id)


def paths(directory, cycle_id):
    base = os.path.join(directory, "cycle-%s" % cycle_id)
    return {
        "meta": base + ".json",
        "log": base + ".log",
        "result": base + ".result",
        "end": base + ".end",
        "reported": base + ".reported",
    }


def _read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _write_json(path, data):
    """Written beside and renamed in: a reader never sees half of it."""
    tmp = "%s.tmp-%d" % (path, os.getpid())
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        json.dump(data, f, sort_keys=True)
    os.replace(tmp, path)


def unit_running(unit, systemctl):
    """Whether systemd still runs the unit (a collected unit is "inactive")."""
    try:
        done = subprocess.run(
            [systemctl, "is-active", unit], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
    except OSError:
        return False
    return done.stdout.strip() in RUNNING_STATES


def cycles(directory):
    """The ids of the cycles recorded in ``directory``, oldest first."""
    found = []
    for meta in glob.glob(os.path.join(directory, "cycle-*.json")):
        data = _read_json(meta)
        if data and "id" in data:
            found.append((data.get("started_at", 0), data["id"]))
    return [cycle_id for _, cycle_id in sorted(found)]


def state_of(directory, cycle_id, systemctl):
    """One cycle as recorded: its meta, "state" (running | ended), "cycle" (its result line or
    None), "exit_status" (None: unknown), "reported"."""
    files = paths(directory, cycle_id)
    meta = _read_json(files["meta"]) or {}
    end = _read_json(files["end"])
    # The end file is written before the unit's process exits: no end and no unit is a cycle
    # that was killed (or its node rebooted), read again in case it just ended.
    running = end is None and unit_running(meta.get("unit", ""), systemctl)
    if not running and end is None:
        end = _read_json(files["end"])
    found = result.parse(_lines(files["result"]))
    return dict(
        meta,
        state="running" if running else "ended",
        cycle=found,
        exit_status=(end or {}).get("exit_status"),
        ended=(end or {}).get("ended"),
        reported=os.path.exists(files["reported"]),
    )


def _lines(path):
    try:
        with open(path, errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        return []


def _mark_reported(directory, cycle_id):
    os.close(os.open(paths(directory, cycle_id)["reported"], os.O_WRONLY | os.O_CREAT, 0o600))


def _prune(directory):
    """Drop the files of old cycles that were reported (the newest KEEP_REPORTED stay)."""
    done = [c for c in cycles(directory) if os.path.exists(paths(directory, c)["reported"])]
    for cycle_id in done[:-KEEP_REPORTED] if len(done) > KEEP_REPORTED else []:
        for path in paths(directory, cycle_id).values():
            try:
                os.unlink(path)
            except OSError:
                pass


def start(args):
    if not (os.path.isdir(args.booted) and shutil.which(args.systemd_run)):
        return result.emit(status.NO_SYSTEMD, "no systemd-run on this node (systemd is not running)")
    os.makedirs(args.dir, mode=0o700, exist_ok=True)
    for other in cycles(args.dir):
        found = state_of(args.dir, other, args.systemctl)
        if found["state"] == "running":
            return result.emit(
                status.LOCKED,
                "the restart cycle %s (started %s) still runs" % (found.get("unit"), found.get("started")),
                unit=found.get("unit"),
            )
    _prune(args.dir)
    files = paths(args.dir, args.id)
    unit = unit_name(args.service, args.id)
    now = time.time()
    meta = {
        "id": args.id,
        "unit": unit,
        "service": args.service,
        "profile": args.profile,
        "command": args.command,
        "started_at": now,
        "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)),
        "log": files["log"],
        "result": files["result"],
    }
    os.close(os.open(files["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
    _write_json(files["meta"], meta)
    launch = [
        args.systemd_run,
        "--unit=" + unit,
        "--collect",
        "--quiet",
        "--description=sglang-deploy restart cycle of %s" % args.service,
        # Stopping the unit (the operator's last resort) gives the cycle time to end a step (an
        # A/B: to go home, a restart and its gate).
        "--property=TimeoutStopSec=%d" % args.stop_timeout,
        "--setenv=PATH=" + os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "--setenv=PYTHONUNBUFFERED=1",
        "--",
        sys.executable,
        os.path.abspath(__file__),
        "run",
        "--dir",
        args.dir,
        "--id",
        args.id,
    ]
    done = subprocess.run(launch, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        for path in files.values():
            if os.path.exists(path):
                os.unlink(path)
        why = done.stdout.strip().splitlines()[-1:] or ["exit status %d" % done.returncode]
        return result.emit(status.FAILED_START, "systemd-run: %s" % why[0], unit=unit)
    return result.emit(status.READY, None, unit=unit, id=args.id, started=meta["started"], offset=0)


def run(args):
    """The unit's process: the command, its output appended to the log, its result line to
    the result file; then its exit status to the end file."""
    files = paths(args.dir, args.id)
    meta = _read_json(files["meta"])
    env = dict(os.environ, **{result.RESULT_FILE_VAR: files["result"], "PYTHONUNBUFFERED": "1"})
    with open(os.open(files["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "wb") as log:
        proc = subprocess.Popen(
            ["/bin/sh", "-c", meta["command"]],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
        code = proc.wait()
    _write_json(files["end"], {"exit_status": code, "ended": time.strftime("%Y-%m-%d %H:%M:%S")})
    return code


def _show(chunk):
    for line in chunk.decode("utf-8", errors="replace").splitlines():
        output.say(line)


def follow(args):
    files = paths(args.dir, args.id)
    if not os.path.exists(files["meta"]):
        return result.emit(status.UNEXPECTED, "no restart cycle %s in %s" % (args.id, args.dir))
    offset, deadline = args.from_offset, time.monotonic() + args.for_s
    while True:
        found = state_of(args.dir, args.id, args.systemctl)
        ended = found["state"] == "ended"  # read before the log: its last lines are in by then
        with open(files["log"], "rb") as log:
            log.seek(offset)
            chunk = log.read()
        # Whole lines only while it runs: the rest of a line comes with the next read.
        shown = chunk if ended else chunk[: chunk.rfind(b"\n") + 1]
        _show(shown)
        offset += len(shown)
        if ended:
            return result.emit(
                status.READY,
                None,
                state="ended",
                offset=offset,
                cycle=found["cycle"],
                exit_status=found["exit_status"],
                unit=found.get("unit"),
            )
        if time.monotonic() >= deadline:
            return result.emit(status.READY, None, state="running", offset=offset, unit=found.get("unit"))
        time.sleep(args.interval)


def report(args):
    listed = []
    for cycle_id in cycles(args.dir) if os.path.isdir(args.dir) else []:
        found = state_of(args.dir, cycle_id, args.systemctl)
        if found["reported"]:
            continue
        if args.mark_reported and found["state"] == "ended":
            _mark_reported(args.dir, cycle_id)
        listed.append(
            {
                key: found.get(key)
                for key in ("id", "unit", "profile", "started", "state", "cycle", "exit_status", "ended")
            }
        )
    return result.emit(status.READY, None, cycles=listed)


def ack(args):
    if not os.path.exists(paths(args.dir, args.id)["meta"]):
        return result.emit(status.UNEXPECTED, "no restart cycle %s in %s" % (args.id, args.dir))
    _mark_reported(args.dir, args.id)
    return result.emit(status.READY, None)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="action", required=True)
    parsers = {name: sub.add_parser(name) for name in ("start", "run", "follow", "status", "ack")}
    for one in parsers.values():
        one.add_argument("--dir", required=True, help="the service's cycle files (0700)")
        one.add_argument("--systemctl", default="systemctl")
    for name in ("start", "run", "follow", "ack"):
        parsers[name].add_argument("--id", required=True)
    parsers["start"].add_argument("--service", required=True)
    parsers["start"].add_argument("--profile", default="")
    parsers["start"].add_argument("--command", required=True, help="the cycle's shell command line")
    parsers["start"].add_argument(
        "--stop-timeout", type=int, default=30, help="seconds a stop of the unit leaves it to end"
    )
    parsers["start"].add_argument("--systemd-run", default="systemd-run")
    parsers["start"].add_argument("--booted", default="/run/systemd/system", help="exists when systemd runs")
    parsers["follow"].add_argument("--from-offset", type=int, default=0)
    parsers["follow"].add_argument("--for", dest="for_s", type=float, default=10.0)
    parsers["follow"].add_argument("--interval", type=float, default=0.25)
    parsers["status"].add_argument("--mark-reported", action="store_true")
    args = parser.parse_args(argv)
    actions = {"start": start, "run": run, "follow": follow, "status": report, "ack": ack}
    return actions[args.action](args)


if __name__ == "__main__":
    sys.exit(main())
