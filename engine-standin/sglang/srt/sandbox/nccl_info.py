"""NCCL's own confirmation lines, printed by each scheduler when NCCL itself does not run.

With NCCL_DEBUG=INFO, NCCL logs every tuning variable it finds in the process's
environment while it initialises a communicator:

    vm:446:446 [0] NCCL INFO NCCL_MAX_NCHANNELS set by environment to 16.

Format `<host>:<pid>:<tid> [<cudaDev>] NCCL INFO <VAR> set by environment to <value>`;
integer parameters end with a period (src/misc/param.cc), string ones do not. NCCL_PROTO and
NCCL_ALGO are read by the tuning code, which only runs for two or more ranks. The values
come from the scheduler's OWN os.environ, so these lines prove what reached the worker.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import threading
from collections.abc import Mapping

NCCL_VERSION = "2.28.9"

# (variable, is an integer parameter, NCCL's default for integer parameters)
TUNING_VARS = (
    ("NCCL_CUMEM_ENABLE", True, 1),
    ("NCCL_NVLS_ENABLE", True, 2),
    ("NCCL_P2P_LEVEL", False, None),
    ("NCCL_MAX_NCHANNELS", True, -2),
    ("NCCL_BUFFSIZE", True, 4194304),
    ("NCCL_NTHREADS", True, -2),
    ("NCCL_PROTO", False, None),
    ("NCCL_ALGO", False, None),
)
NEEDS_TWO_RANKS = ("NCCL_PROTO", "NCCL_ALGO")

# strtoll(str, &end, 0) accepts decimal, 0x-hex and 0-octal, with an optional sign.
_STRTOLL = re.compile(r"[+-]?(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")


def _strtoll0(text: str):
    if not _STRTOLL.fullmatch(text):
        return None
    return int(text, 0) if not re.fullmatch(r"[+-]?0[0-7]+", text) else int(text, 8)


def debug_info_enabled(env: Mapping[str, str]) -> bool:
    """NCCL prints INFO lines for NCCL_DEBUG=INFO or TRACE (case-insensitive)."""
    return env.get("NCCL_DEBUG", "").strip().upper() in ("INFO", "TRACE")


def confirmation_lines(env: Mapping[str, str], cuda_dev: int, world_size: int) -> list[str]:
    """The lines NCCL would print for this environment (empty without NCCL_DEBUG=INFO)."""
    if not debug_info_enabled(env):
        return []
    host = socket.gethostname().split(".")[0]
    head = f"{host}:{os.getpid()}:{threading.get_native_id()} [{cuda_dev}] NCCL INFO "
    lines = []
    for name, is_int, default in TUNING_VARS:
        if name not in env or (name in NEEDS_TWO_RANKS and world_size < 2):
            continue
        value = env[name]
        if is_int:
            parsed = _strtoll0(value)
            if parsed is None:
                lines.append(head + f"Invalid value {value} for {name}, using default {default}.")
            else:
                lines.append(head + f"{name} set by environment to {parsed}.")
        else:
            lines.append(head + f"{name} set by environment to {value}")
    return lines


def version_line(env: Mapping[str, str], cuda_dev: int) -> list[str]:
    if not debug_info_enabled(env):
        return []
    host = socket.gethostname().split(".")[0]
    return [
        f"{host}:{os.getpid()}:{threading.get_native_id()} [{cuda_dev}] NCCL INFO "
        f"NCCL version {NCCL_VERSION}+cuda13.0"
    ]


def warn_line(env: Mapping[str, str], cuda_dev: int, where: str, message: str) -> list[str]:
    """An NCCL WARN line (printed at NCCL_DEBUG=WARN and above)."""
    if env.get("NCCL_DEBUG", "").strip().upper() not in ("WARN", "INFO", "TRACE"):
        return []
    host = socket.gethostname().split(".")[0]
    return [f"{host}:{os.getpid()}:{threading.get_native_id()} [{cuda_dev}] {where} NCCL WARN {message}"]


def emit(lines: list[str]) -> None:
    """NCCL writes with printf to stdout, without SGLang's log prefix."""
    for line in lines:
        print(line, file=sys.stdout, flush=True)
