"""A serving group's follower (--node-rank >= 1) on this node: its stop, and why it ended.

    python3 follower.py stop --unit sglang.service --wait 20 [--poll 0.1]
    python3 follower.py cause --unit sglang.service

SGLang 0.5.23's follower launcher ignores a SIGTERM of its own; it ends on rank 0's ShutdownReq
broadcast (rank 0, stopped by the unit's SIGTERM to its launcher, drained and exited cleanly)
or, when rank 0 went away without one (killed, crashed: docs/sglang-shutdown.md), at its next
collective with the peer lost. `stop`, run once rank 0 is stopped, waits up to --wait seconds for the unit to
end by itself (at once when it serves alone: no --node-rank in its argv, nodes becoming a group),
SIGKILLs what is left of it then, naming it, and finally runs `systemctl stop`
(instant by then) so that a follower that ended with an error is not restarted by
`Restart=on-failure`. One line per step, with seconds since the script started:
    [   0.1s] sglang.service ended on rank 0's shutdown (inactive/dead)
    [  20.0s] still running after 20s: killing pids 1234 (python3 -m sglang.launch_server ...)
`cause` reads the journal of the unit's last start and says why it ended (sglang_log causes,
e.g. group-peer-lost), for the controller's report of a follower that died during a start.
Each ends with the result line (result.py): stop: READY or STOP_TIMEOUT; cause: READY with
{cause, key, state}.
"""

import argparse
import subprocess
import sys
import time

if __package__:
    from .lib import procs, result, sglang_log, status, systemd
else:  # run as a script: our scripts' directory is on sys.path
    from lib import procs, result, sglang_log, status, systemd

ENDED = ("inactive", "failed")


def _ended(show):
    # "activating/auto-restart": it ended and systemd waits RestartSec to start it again.
    return show.get("ActiveState") in ENDED or show.get("SubState") == "auto-restart"


def node_rank_of(argv):
    """The --node-rank a server's argv names (0 when it names none: a server alone)."""
    for i, arg in enumerate(argv):
        if arg == "--node-rank" and i + 1 < len(argv):
            return int(argv[i + 1]) if argv[i + 1].isdigit() else 0
        if arg.startswith("--node-rank="):
            value = arg.partition("=")[2]
            return int(value) if value.isdigit() else 0
    return 0


def runs_alone(show, cgroup):
    """The unit's main process serves alone (no --node-rank >= 1: nodes becoming a group), so
    nothing rank 0 does ends it. Only a process of the unit's own cgroup is asked."""
    pid = int(show.get("MainPID") or 0)
    if not (pid and cgroup and pid in procs.cgroup_pids(cgroup)):
        return False
    argv = procs.read_cmdline(pid)
    return bool(argv) and node_rank_of(argv) == 0


def stop(args):
    t0 = time.monotonic()

    def say(text):
        print("[%6.1fs] %s" % (time.monotonic() - t0, text), flush=True)

    props = ("ActiveState", "SubState", "MainPID", "ControlGroup", "Result")
    show = systemd.unit_show(args.unit, props, systemctl=args.systemctl)
    cgroup = procs.cgroup_dir(show.get("ControlGroup", ""))
    killed = False
    alone = not _ended(show) and runs_alone(show, cgroup)
    if alone:
        say("%s serves alone (no --node-rank): stopped now, nothing of rank 0's ends it" % args.unit)
    while not alone and not _ended(show):
        if time.monotonic() - t0 >= args.wait:
            left = procs.cgroup_pids(cgroup) if cgroup else []
            say(
                "still running %gs after rank 0 stopped: killing %s"
                % (
                    args.wait,
                    ", ".join("pid %d (%s)" % (pid, procs.title(pid, limit=80) or "?") for pid in left)
                    or "the unit",
                )
            )
            systemd.systemctl(["kill", "--signal=SIGKILL", args.unit], args.systemctl)
            killed = True
            break
        time.sleep(args.poll)
        show = systemd.unit_show(args.unit, props, systemctl=args.systemctl)
    if not (killed or alone):
        say(
            "%s ended on rank 0's shutdown (%s/%s)"
            % (args.unit, show.get("ActiveState"), show.get("SubState"))
        )
    try:  # no processes left to signal: returns at once; cancels a pending auto-restart
        systemd.systemctl(["stop", args.unit], args.systemctl, timeout=max(5.0, args.wait))
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + 10
    while cgroup and procs.cgroup_pids(cgroup):
        if time.monotonic() >= deadline:
            text = "stop timeout: still there: " + ", ".join(
                "pid %d (%s)" % (pid, procs.title(pid, limit=80) or "?") for pid in procs.cgroup_pids(cgroup)
            )
            say(text)
            return result.emit(status.STOP_TIMEOUT, text, killed=killed)
        time.sleep(args.poll)
    say("stopped%s" % (" (killed)" if killed else ""))
    return result.emit(status.READY, killed=killed, seconds=round(time.monotonic() - t0, 2))


def cause(args):
    show = systemd.unit_show(args.unit, systemctl=args.systemctl)
    lines, _ = systemd.journal_lines(
        args.unit, show=show, journalctl=args.journalctl, systemctl=args.systemctl
    )
    found = sglang_log.cause_of(lines)
    state = "%s/%s, %s" % (show.get("ActiveState"), show.get("SubState"), systemd.describe_exit(show))
    if found:
        key, text = found
    else:
        key, text = "ended", "unrecognised cause; its journal: journalctl -u %s" % args.unit
    tail = [line for line in lines if line.strip()][-args.lines :]
    for line in tail:
        print("    " + line, flush=True)
    return result.emit(status.READY, key=key, cause="%s: %s (%s)" % (key, text, state), state=state)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systemctl", default=systemd.SYSTEMCTL)
    parser.add_argument("--journalctl", default=systemd.JOURNALCTL)
    sub = parser.add_subparsers(dest="action", required=True)
    p_stop = sub.add_parser("stop", help="wait for the unit to end on rank 0's shutdown, kill after --wait")
    p_stop.add_argument("--unit", required=True)
    p_stop.add_argument("--wait", type=float, required=True)
    p_stop.add_argument("--poll", type=float, default=0.1)
    p_cause = sub.add_parser("cause", help="why the unit's last start ended")
    p_cause.add_argument("--unit", required=True)
    p_cause.add_argument("--lines", type=int, default=8, help="journal lines shown")
    args = parser.parse_args(argv)
    return stop(args) if args.action == "stop" else cause(args)


if __name__ == "__main__":
    sys.exit(main())
