"""What a save of the last known good checks on the node first: the engine's installed
versions (read by the venv's own interpreter) and whether the unit's server runs the installed
configuration (started after every file and distribution of it was last written, the unit file
loaded). Standard library only (lastgood.py)."""

import json
import os
import subprocess
import time

from . import installed, systemd


def installed_versions(venv):
    out = subprocess.run(
        [os.path.join(venv, "bin", "python"), "-c", installed.VERSIONS_PY],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    ).stdout
    return json.loads(out)


def installed_engine(venv):
    """{distribution: (version, install time or None)} of a venv."""
    out = subprocess.run(
        [os.path.join(venv, "bin", "python"), "-c", installed.INSTALLED_PY],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    ).stdout
    return {name: tuple(value) for name, value in json.loads(out).items()}


def start_wallclock(show, now=None, monotonic=None):
    """Wall-clock time of the main process' start, from systemd's monotonic timestamp."""
    started_us = systemd.as_int(show.get("ExecMainStartTimestampMonotonic"))
    if not started_us:
        return None
    now = time.time() if now is None else now
    monotonic = time.monotonic() if monotonic is None else monotonic
    return now - (monotonic - started_us / 1e6)


def not_running(show, written, now=None, monotonic=None):
    """Why the unit's server does not run the installed configuration, or None when it does.
    ``written``: {what: when it was last written (wall clock)}."""
    if show.get("ActiveState") != "active" or not systemd.as_int(show.get("MainPID")):
        return "%s is %s/%s, not running" % (
            show.get("Id") or "the unit",
            show.get("ActiveState"),
            show.get("SubState"),
        )
    if show.get("NeedDaemonReload") == "yes":
        return "systemd has not loaded the installed unit file (daemon-reload pending)"
    started = start_wallclock(show, now, monotonic)
    if started is None:
        return "the unit's start time is unknown"
    later = sorted(what for what, when in written.items() if when is not None and when > started)
    if later:
        return "the server started before %s changed: it does not run the installed configuration" % (
            ", ".join(later)
        )
    return None


def running_check(unit, files, engine_installed, venv=None):
    show = systemd.unit_show(
        unit,
        ("Id", "ActiveState", "SubState", "MainPID", "NeedDaemonReload", "ExecMainStartTimestampMonotonic"),
    )
    written = {role: os.stat(path).st_mtime for role, path in files.items()}
    written.update({name: when for name, (_, when) in engine_installed.items()})
    if venv and os.path.islink(venv):  # the link's own time is its switch's
        written["the engine venv link"] = os.lstat(venv).st_mtime
    return not_running(show, written)
