"""Parent-death handling of SGLang's subprocesses, with the standard library only.

Their titles (`sglang::scheduler_TP0`, `sglang::detokenizer`) are set as SGLang sets them,
with the `setproctitle` package: a C extension that reuses the process's argv and environ
memory for the title, so /proc/<pid>/cmdline shows the title and /proc/<pid>/environ reads
as NUL bytes (seen on SGLang 0.5.17; the stand-in depends on the same package).
"""

from __future__ import annotations

import ctypes
import signal

PR_SET_PDEATHSIG = 1


def kill_itself_when_parent_died() -> None:
    """SIGKILL this process when its parent dies (SGLang does the same with prctl), so no
    scheduler outlives a launcher that was killed with SIGKILL."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
