"""Process titles and parent-death handling with the standard library only.

SGLang calls setproctitle("sglang::scheduler_TP0") in each subprocess; tools (ps, the
deploy's worker check) then see that title as the process's command line. setproctitle is
a C extension; the same effect, on Linux:

* /proc/<pid>/cmdline is read from the process's own argv memory, between the addresses
  arg_start and arg_end (fields 48 and 49 of /proc/self/stat). Overwriting that memory in
  place, NUL-padded to its original length, changes what every reader sees. The title is
  truncated if it is longer than the original argv (a spawned child's argv is ~100 bytes).
* The kernel's short name (comm, 15 bytes, shown by `ps -o comm` and in /proc/<pid>/stat)
  is set with prctl(PR_SET_NAME).

Python copied argv into its own objects at start-up, so sys.argv is unaffected.
"""

from __future__ import annotations

import ctypes
import signal

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _arg_area():
    """(arg_start, arg_end) of this process, or None if the kernel does not show them."""
    with open("/proc/self/stat", "rb") as f:
        data = f.read()
    # Fields after the ")" that closes the command name start at field 3.
    fields = data[data.rfind(b")") + 2 :].split()
    arg_start, arg_end = int(fields[48 - 3]), int(fields[49 - 3])
    if arg_start == 0 or arg_end <= arg_start:
        return None
    return arg_start, arg_end


def setproctitle(title: str) -> bool:
    """Set the command line (/proc/self/cmdline) and comm of this process to `title`.

    Returns False if the argv area could not be found (then only comm is set).
    """
    raw = title.encode("utf-8", "replace")
    try:
        _libc().prctl(PR_SET_NAME, ctypes.c_char_p(raw[:15]), 0, 0, 0)
    except (OSError, AttributeError):
        pass
    try:
        area = _arg_area()
    except (OSError, ValueError, IndexError):
        return False
    if area is None:
        return False
    arg_start, arg_end = area
    size = arg_end - arg_start
    # Keep the last byte NUL: the kernel then reports exactly [arg_start, arg_end).
    text = raw[: size - 1]
    ctypes.memmove(arg_start, text + b"\0" * (size - len(text)), size)
    return True


def kill_itself_when_parent_died() -> None:
    """SIGKILL this process when its parent dies (SGLang does the same with prctl), so no
    scheduler outlives a launcher that was killed with SIGKILL."""
    try:
        _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
