"""A server started as a plain process, as the unit would start it but without systemd: its own
process group, its output in a log file, its death seen the moment it happens (without reaping
it: the gate reads a dead launcher's exit status from /proc while it is a zombie), its stop by
SIGTERM to the launcher, and HTTP timings. Standard library only.
"""

import http.client
import os
import signal
import socket
import subprocess
import threading
import time

from .report import exit_status

POLL_S = 0.02


def proc_state(pid):
    """The state letter of /proc/<pid>/stat (Z: a zombie), or None when there is no such process."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return None


def group_members(pgid):
    """Live (not zombie) processes whose process group is pgid."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            found.append(int(name))
    return found


class Server:
    def __init__(self, python, argv, env, log_path, cwd):
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [python, "-m", "sglang.launch_server", *argv],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,  # its own process group (and session): stopped as a whole
        )
        self.pid = self.proc.pid
        self.died_at = None
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self):
        while proc_state(self.pid) not in (None, "Z"):
            time.sleep(POLL_S)
        self.died_at = time.monotonic()

    def stop(self, timeout_s):
        """SIGTERM to the launcher, as systemd's stop does: {exit_status, how, seconds, outlived,
        outlived_s, killed_leftovers}. The launcher is killed after timeout_s."""
        t0 = time.monotonic()
        os.kill(self.pid, signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.pid, signal.SIGKILL)
            rc = self.proc.wait(30)
        ended = time.monotonic()
        left = group_members(self.pid)
        outlived = len(left)
        while left and time.monotonic() - ended < 10:
            time.sleep(POLL_S)
            left = group_members(self.pid)
        gone = time.monotonic()
        killed = bool(left)
        self.kill()
        code, how = exit_status(rc)
        return {
            "returncode": rc,
            "exit_status": code,
            "how": how,
            "seconds": round(ended - t0, 2),
            "outlived": outlived,
            "outlived_s": round(gone - ended, 2) if outlived else None,
            "killed_leftovers": killed,
        }

    def kill(self):
        """Every process of its group killed, the launcher reaped; the log closed."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            pass
        self._log.close()

    def log_text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")


def port_free(host, port):
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((host, port)) != 0


def timed_get(host, port, path, timeout=30, headers=None):
    """(HTTP status or 0 on no answer, milliseconds)."""
    t0 = time.monotonic()
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path, headers=headers or {})
        response = conn.getresponse()
        response.read()
        code = response.status
    except OSError:
        code = 0
    finally:
        conn.close()
    return code, round((time.monotonic() - t0) * 1000, 1)


def cmdlines_holding(text):
    """Pids whose /proc/<pid>/cmdline holds ``text`` (any process of the machine)."""
    needle, found = text.encode(), []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % name, "rb") as f:
                if needle in f.read():
                    found.append(int(name))
        except OSError:
            continue
    return found
