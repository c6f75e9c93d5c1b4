"""The one protocol between the on-node scripts and the controller.

Every script prints its human progress lines, then ends with one JSON result line:

    {"result": "FAILED_START", "status": 3, "cause": "oom: ...", ...details}

``result`` and ``status`` name the exit status (status.py), ``cause`` is why it failed (None on
success), the details are the script's own (the profile restored, the report of every worker).
``emit`` prints that line and returns the status, so a script ends with ``return emit(...)``;
``parse`` finds it in a script's output (the last JSON object with a ``status``): the
controller reads nothing else of it.
A script that streams events before its result (lock.py) prints ``{"event": ...}`` lines;
``events`` reads them.

A script whose output the operator watches (the controller streams it) is given a file for its
result line instead (RESULT_FILE_VAR, claimed by the first of our scripts that starts, so the
scripts it runs print theirs for it to read): the operator reads progress, never the JSON.
"""

import json
import os
import subprocess

from . import output, status

if __name__ == "lib.result":  # imported by one of our scripts running on a node (not the controller)
    output.guard()  # a progress line to a closed SSH channel must not kill it (output.py)

RESULT_FILE_VAR = "SGLANG_DEPLOY_RESULT_FILE"
# Claimed at import: this process writes its result there, the processes it starts do not see it.
_RESULT_FILE = os.environ.pop(RESULT_FILE_VAR, None)


def emit(code, cause=None, **details):
    """Print the result line of a script that exits with ``code`` (or write it to the result
    file the controller gave this script); return ``code``."""
    line = json.dumps(dict(details, result=status.name(code), status=code, cause=cause), sort_keys=True)
    if _RESULT_FILE:
        with open(os.open(_RESULT_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(line + "\n")
    else:
        print(line, flush=True)
    return code


def _json_object(line):
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        found = json.loads(line)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def parse(lines):
    """The last result line in a script's output lines, as a dict; None if it printed none (it
    died before its end: see its exit status and stderr)."""
    for line in reversed(list(lines)):
        found = _json_object(line)
        if found is not None and "status" in found:
            return found
    return None


def events(lines):
    """The event lines (``{"event": name, ...}``) among a script's output lines, in order."""
    return [found for found in map(_json_object, lines) if found is not None and "event" in found]


def progress(lines):
    """A script's human lines: its output without the result and event lines."""
    return [
        line
        for line in lines
        if _json_object(line) is None or not ({"status", "event"} & set(_json_object(line)))
    ]


def run_streaming(command):
    """Run another of our scripts (a shell command line), streaming its progress lines through;
    (its exit status, every line it printed): ``parse`` them for its result."""
    proc = subprocess.Popen(
        command, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True
    )
    lines = []
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if progress([line]):
            output.say(line.rstrip("\n"))
    return proc.wait(), lines
