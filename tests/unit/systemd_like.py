"""What systemd does when it stops a service, done to a local process: enough of systemd to judge
a unit's stop settings (KillMode=, KillSignal=, TimeoutStopSec=, SuccessExitStatus=,
RestartForceExitStatus=, Restart=) against a real server process, without systemd. The process
must run in a session of its own (Popen(start_new_session=True)): its process group stands for
the unit's cgroup."""

import os
import signal
import subprocess
import time

# A main process killed by one of these exited cleanly (systemd.service(5), SuccessExitStatus=).
CLEAN_SIGNALS = (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE)


def settings(unit_text):
    """The [Service] section's settings: the last value of each, SuccessExitStatus= and
    RestartForceExitStatus= accumulated (as systemd reads them)."""
    found, section = {}, None
    for line in unit_text.splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == "[Service]" and "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            if key in ("SuccessExitStatus", "RestartForceExitStatus"):
                found[key] = (found.get(key, "") + " " + value).strip()
            else:
                found[key] = value
    return found


def _statuses(value):
    """Exit codes and signal numbers of a SuccessExitStatus=-style list."""
    codes, signals = set(), set()
    for word in (value or "").split():
        if word.isdigit():
            codes.add(int(word))
        else:
            signals.add(int(getattr(signal, word if word.startswith("SIG") else "SIG" + word)))
    return codes, signals


def _listed(returncode, value):
    codes, signals = _statuses(value)
    return -returncode in signals if returncode < 0 else returncode in codes


def result(returncode, unit):
    """systemd's Result= for a main process that ended with ``returncode`` (Popen's: negative
    for a signal): success, exit-code or signal."""
    if returncode == 0 or -returncode in CLEAN_SIGNALS or _listed(returncode, unit.get("SuccessExitStatus")):
        return "success"
    return "signal" if returncode < 0 else "exit-code"


def restarts(returncode, unit, stopped=False):
    """Whether systemd starts the service again after its main process ended so (never after a
    stop it was asked for)."""
    if stopped:
        return False
    if _listed(returncode, unit.get("RestartForceExitStatus")):
        return True
    policy, ended = unit.get("Restart", "no"), result(returncode, unit)
    return policy == "always" or (policy == "on-failure" and ended != "success")


def stop(proc, unit_text, timeout=None):
    """`systemctl stop` of the unit ``unit_text`` whose main process is ``proc``: KillSignal= to
    the main process (KillMode=mixed, process) or to every process (control-group), up to
    TimeoutStopSec= (or ``timeout``) for the main process to end, then SIGKILL to what is left
    (mixed, control-group: every process). Returns (Result=, seconds the stop took)."""
    unit = settings(unit_text)
    mode, sig = unit.get("KillMode", "control-group"), getattr(signal, unit.get("KillSignal", "SIGTERM"))
    limit = timeout if timeout is not None else float(unit.get("TimeoutStopSec", 90))
    started = time.monotonic()
    if mode == "control-group":
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    try:
        proc.wait(timeout=limit)
        ended = result(proc.returncode, unit)
    except subprocess.TimeoutExpired:
        ended = "timeout"
    if mode in ("mixed", "control-group"):
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the final SIGKILL: whatever is left of the unit
        except ProcessLookupError:
            pass
    else:
        proc.kill()
    proc.wait()
    return ended, time.monotonic() - started
