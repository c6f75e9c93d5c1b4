"""Process-wide helpers: SGLang's log format, process-tree teardown, ports, limits."""

from __future__ import annotations

import logging
import os
import resource
import signal
import socket
import sys
import time
import traceback

logger = logging.getLogger(__name__)

# SGLang's log format: "[2026-11-29 10:00:00 TP0] message" (the prefix is empty in the
# parent and " TP<rank>" in a scheduler).
LOG_DATEFMT = "%Y-%m-%d %H:%M:%S"


def configure_logger(prefix: str = "") -> None:
    """Configure the root logger like SGLang: INFO, to stderr, one flush per line.

    journald reads the unit's stdout/stderr through a pipe, where Python would otherwise
    block-buffer; line buffering keeps every phase line visible the moment it happens.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True)
        except (AttributeError, ValueError):
            pass
    logging.basicConfig(
        level=logging.INFO,
        format=f"[%(asctime)s{prefix}] %(message)s",
        datefmt=LOG_DATEFMT,
        force=True,
    )


def timestamp() -> str:
    return time.strftime(LOG_DATEFMT)


def uvicorn_log(level: str, message: str, stream=None) -> None:
    """A line in uvicorn's format as SGLang configures it: `[ts] INFO:     message`.

    Server lifecycle lines go to stderr, access lines to stdout (uvicorn's defaults).
    """
    prefix = (level + ":").ljust(9)
    print(f"[{timestamp()}] {prefix} {message}", file=stream or sys.stderr, flush=True)


def get_exception_traceback() -> str:
    return "".join(traceback.format_exception(*sys.exc_info()))


def _children_map() -> dict:
    """{ppid: [pid, ...]} for every process visible in /proc."""
    children: dict = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        # The command name may contain spaces and parentheses: split after the last ')'.
        fields = data[data.rfind(b")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def descendants(pid: int) -> list[int]:
    """All descendants of pid, parents before children."""
    tree = _children_map()
    out, todo = [], list(tree.get(pid, []))
    while todo:
        child = todo.pop(0)
        out.append(child)
        todo.extend(tree.get(child, []))
    return out


def kill_process_tree(parent_pid: int, include_parent: bool = True, grace: float = 0.0) -> None:
    """Kill a process and its descendants (SGLang's teardown), found through /proc.

    With grace > 0 the descendants first get SIGTERM and that long to exit; whatever is
    left then gets SIGKILL, so the whole call is bounded by `grace` plus a few ms.
    """
    pids = descendants(parent_pid)
    if grace > 0 and pids:
        _signal_all(pids, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.01)
    _signal_all([p for p in pids if _alive(p)], signal.SIGKILL)
    if include_parent:
        os.kill(parent_pid, signal.SIGKILL)


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _alive(pid: int) -> bool:
    """True while pid runs (a zombie counts as gone: it only waits to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return False
    return data[data.rfind(b")") + 2 :][:1] not in (b"Z", b"X")


def get_free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def set_ulimit(target_soft_limit: int = 65535) -> None:
    """Raise the open-files soft limit like SGLang does (never above the hard limit)."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < target_soft_limit:
            new_soft = target_soft_limit if hard == resource.RLIM_INFINITY else min(target_soft_limit, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (new_soft, hard))
    except (ValueError, OSError) as e:
        logger.warning(f"Fail to set RLIMIT_NOFILE: {e}")
