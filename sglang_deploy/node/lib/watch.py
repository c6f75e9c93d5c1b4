"""What the readiness gate watches besides HTTP: the start itself and its output.

UnitWatch reads a systemd unit (`systemctl show`) and the journal of its start; ProcessWatch
reads a plain process (/proc) and its log file, answering in systemctl's terms (ActiveState,
MainPID, ExecMainCode/ExecMainStatus decoded from the zombie's exit status) so that the gate's
rules apply to both unchanged.
"""

import os
import time

from . import procs, systemd


def unit_problem(show, base):
    """Why the start being gated is over, or None while it is still going."""
    active, sub = show.get("ActiveState", "?"), show.get("SubState", "?")
    where = "unit %s/%s, %s" % (active, sub, systemd.describe_exit(show))
    pid = systemd.as_int(show.get("MainPID"))
    if show.get("LoadState", "loaded") != "loaded":
        return "unit %s is not loaded (LoadState=%s)" % (base["unit"], show.get("LoadState"))
    if active not in ("active", "activating", "reloading") or sub == "auto-restart":
        return where
    if show.get("InvocationID", "") != base["InvocationID"] or systemd.as_int(
        show.get("NRestarts")
    ) > systemd.as_int(base["NRestarts"]):
        return "unit was restarted by systemd (%s)" % where
    if pid != base["MainPID"]:
        return "main process changed from %d to %d (%s)" % (base["MainPID"], pid, where)
    if pid <= 0 or not procs.alive(pid):
        return "main process %d is gone (%s)" % (pid, where)
    return None


SYSTEMD_LAG_S = 1.0


def _reaping(show, base):
    """The unit still names the gated main process as running, and that process is gone."""
    pid = systemd.as_int(show.get("MainPID"))
    running = show.get("ActiveState") in ("active", "activating", "reloading")
    return running and pid == base["MainPID"] and pid > 0 and not procs.alive(pid)


class UnitWatch:
    """What the gate watches by default: a systemd unit (`systemctl show`) and its journal."""

    source = "journal"

    def __init__(self, unit, systemctl=systemd.SYSTEMCTL, journalctl=systemd.JOURNALCTL, since_cursor=None):
        self.unit, self.systemctl, self.journalctl = unit, systemctl, journalctl
        self.since_cursor = since_cursor
        self.matches = None

    @property
    def label(self):
        return self.unit

    def show(self):
        return systemd.unit_show(self.unit, systemctl=self.systemctl)

    def begin(self, show):
        """Select the lines of the start being gated."""
        self.matches = ["-u", self.unit] if self.since_cursor else systemd.start_matches(self.unit, show)

    def read(self, cursor):
        """([(monotonic seconds or None, line)], cursor) of the lines after cursor."""
        return systemd.journal_read(self.matches, cursor, journalctl=self.journalctl)

    def problem(self, show, base):
        return unit_problem(show, base)

    def look(self, base):
        """(show, problem) now. The main process can be gone a moment before systemd has reaped
        it: while the unit still says it runs that process, read again (up to SYSTEMD_LAG_S),
        so that the cause names systemd's view of the end, not the moment before it."""
        show = self.show()
        deadline = time.monotonic() + SYSTEMD_LAG_S
        while _reaping(show, base) and time.monotonic() < deadline:
            time.sleep(0.05)
            show = self.show()
        return show, unit_problem(show, base)

    def no_start(self, show):
        """(problem, cause key) when there is no start to gate at all, else None."""
        if show.get("LoadState", "loaded") != "loaded":
            return unit_problem(show, {"unit": self.unit}), "unit-not-loaded"
        if systemd.as_int(show.get("ExecMainStartTimestampMonotonic")) <= 0:
            return "unit %s has not been started" % self.unit, "not-started"
        return None

    def state(self, show):
        return "unit %s/%s" % (show.get("ActiveState"), show.get("SubState"))


def parse_exit_code(stat_text):
    """The waitpid()-style exit status in /proc/PID/stat (field 52, Linux >= 3.5; set once the
    process is a zombie), or None where the kernel does not give it."""
    fields = stat_text.rpartition(")")[2].split()  # fields[0] is field 3 (state)
    try:
        return int(fields[49])
    except (IndexError, ValueError):
        return None


def exit_props(wait_status):
    """systemd's ExecMainCode/ExecMainStatus for a waitpid()-style status (None: unknown)."""
    if wait_status is None:
        return {"ExecMainCode": "0", "ExecMainStatus": "0"}
    if wait_status & 0x7F == 0:
        return {"ExecMainCode": "1", "ExecMainStatus": str((wait_status >> 8) & 0xFF)}
    return {"ExecMainCode": "3" if wait_status & 0x80 else "2", "ExecMainStatus": str(wait_status & 0x7F)}


class ProcessWatch:
    """A plain process instead of a unit: alive = active, its log file = its journal.

    show() answers in systemctl's terms (LoadState, ActiveState, MainPID, ExecMain*...) so that
    the gate's rules apply unchanged. A process that died is a zombie until its parent reaps it:
    its exit status is read from /proc/PID/stat then. Log lines are handed over whole (a line
    still being written waits for its newline, unless the process is gone).
    """

    source = "log"

    def __init__(self, pid, log, proc=procs.PROC):
        self.pid, self.log, self.proc = pid, log, proc
        stat = procs.read_stat(pid, proc)
        self.starttime = stat["starttime"] if stat else None

    @property
    def label(self):
        return "pid %d (log %s)" % (self.pid, self.log)

    def _stat_text(self):
        try:
            with open("%s/%d/stat" % (self.proc, self.pid)) as f:
                return f.read()
        except OSError:
            return None

    def started_monotonic_us(self):
        """When the process started, on CLOCK_MONOTONIC (stat counts clock ticks since boot)."""
        if self.starttime is None:
            return 0
        since_boot = self.starttime / float(os.sysconf("SC_CLK_TCK"))
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - since_boot
        return max(0, int((time.monotonic() - age) * 1e6))

    def alive(self):
        return self.starttime is not None and procs.alive(self.pid, self.starttime, self.proc)

    def show(self):
        props = {
            "LoadState": "loaded",
            "MainPID": str(self.pid),
            "InvocationID": "",
            "NRestarts": "0",
            "ExecMainStartTimestampMonotonic": str(self.started_monotonic_us()),
        }
        if self.alive():
            props.update(ActiveState="active", SubState="running", **exit_props(None))
            return props
        wait_status = None
        text = self._stat_text() if self.starttime is not None else None
        if text is not None:
            try:
                if procs.parse_stat(text)["starttime"] == self.starttime:  # not a reused pid
                    wait_status = parse_exit_code(text)
            except (ValueError, IndexError):
                pass
        props.update(ActiveState="failed", SubState="dead", **exit_props(wait_status))
        return props

    def begin(self, show):
        pass

    def read(self, cursor):
        offset = int(cursor or 0)
        try:
            with open(self.log, "rb") as f:
                if os.fstat(f.fileno()).st_size < offset:  # truncated: start over
                    offset = 0
                f.seek(offset)
                data = f.read()
        except FileNotFoundError:
            return [], cursor
        end = len(data) if not self.alive() else data.rfind(b"\n") + 1
        text = data[:end].decode("utf-8", "replace")
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        return [(None, line.rstrip("\r")) for line in lines], offset + end

    def look(self, base):
        show = self.show()
        return show, self.problem(show, base)

    def problem(self, show, base):
        if show.get("ActiveState") == "active":
            return None
        if show.get("ExecMainCode", "0") == "0":
            return "process %d is gone (exit status unknown: already reaped)" % self.pid
        return "process %d is gone (%s)" % (self.pid, systemd.describe_exit(show))

    def no_start(self, show):
        if self.starttime is None:
            return "process %d does not exist" % self.pid, "no-process"
        return None

    def state(self, show):
        return "process alive" if show.get("ActiveState") == "active" else "process gone"


def watch_of(args):
    """What gate.py's arguments name: a plain process (--pid, --log), else a unit (--unit)."""
    if args.pid is not None:
        return ProcessWatch(args.pid, args.log)
    return UnitWatch(args.unit, args.systemctl, args.journalctl, args.since_cursor)
