"""SGLang's log wording, in one place: start-up phases and failure causes.

    phase_of(line)  -> phase key ('loading', 'graphs', 'http', 'warmup', 'ready') or None
    cause_of(lines) -> (cause key, one-line explanation) or None
    death_of(lines) -> the same, for a known cause only (what a serving server dies of)

CLI: python3 sglang_log.py [FILE]   (reads stdin without FILE) prints the phases seen and
the classified cause of a saved log.
"""

import argparse
import re
import sys

# Start-up phases in the order SGLang goes through them. 'starting' is the time before the
# first recognised line (interpreter start, imports, distributed init).
PHASES = (
    ("starting", "starting", None),
    ("loading", "loading weights", r"Load weight begin"),
    # 0.5.23 says "Capture target decode CUDA graph begin."; older releases "Capture cuda graph begin".
    ("graphs", "capturing CUDA graphs", r"Capture (?:[\w ]+ )?cuda graph begin"),
    ("http", "HTTP server started", r"Uvicorn running on|Application startup complete"),
    # The warmup polls /model_info (0.5.23) or /get_model_info (older releases).
    ("warmup", "warming up", r'"GET /(?:get_)?model_info HTTP/1\.[01]" 200'),
    ("ready", "fired up", r"The server is fired up and ready to roll"),
)
PHASE_KEYS = tuple(key for key, _, _ in PHASES)
PHASE_LABELS = {key: label for key, label, _ in PHASES}
_PHASE_RES = [(key, re.compile(rx, re.I)) for key, _, rx in PHASES if rx]
# Phases that legitimately stay silent for minutes (no hang detection there).
LONG_PHASES = frozenset({"loading", "graphs"})

# Failure causes, most specific (root cause) first: a dying scheduler or a failed warmup is
# usually the consequence of one of the earlier ones.
CAUSES = (
    ("cuda-oom", "CUDA out of memory", r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory"),
    (
        "nccl-error",
        "NCCL error",
        r"NCCL error|ncclSystemError|ncclUnhandledCudaError|ncclInternalError|ncclInvalidUsage"
        r"|ncclRemoteError|DistBackendError",
    ),
    # Multi-node groups (torch's tcp:// rendezvous at --dist-init-addr, then gloo): group_join.py
    # says which node.
    (
        "group-incomplete",
        "not every node of the multi-node group joined in time",
        r"waiting for clients\. \d+/\d+ clients joined"
        r"|The client socket has timed out after \d+ms while trying to connect to",
    ),
    (
        "group-peer-lost",
        "a node of the multi-node group was lost (died or stopped)",
        r"Connection closed by peer \[|Read error \[[^\]]*\]:\d+: Connection reset by peer",
    ),
    (
        "bad-argument",
        "SGLang rejected a command-line argument",
        r"error: unrecognized arguments|error: argument |error: the following arguments are required"
        r"|error: ambiguous option",
    ),
    (
        "model-missing",
        "model path missing or not a model directory (no config.json)",
        r"does not appear to have a file named config\.json|Can't load the configuration of"
        r"|Incorrect path_or_model_id|No such file or directory: '[^']*config\.json'"
        r"|is not a local folder and is not a valid model identifier",
    ),
    ("port-in-use", "the port is already in use", r"address already in use|Errno 98"),
    ("warmup-failed", "warmup request failed", r"Initialization failed\. warmup error"),
    (
        "host-oom",
        "a process was killed by the kernel OOM killer (host RAM)",
        r"killed by the OOM killer|Failed with result 'oom-kill'",
    ),
    (
        "scheduler-died",
        "a scheduler process died",
        r"scheduler died during initialization|scheduler is dead|Child process unexpectedly failed"
        r"|Subprocess scheduler_\d+ \(pid=\d+\) crashed",
    ),
    (
        "exec-failed",
        "systemd could not execute the ExecStart command",
        r"status=203/EXEC|Failed to execute|Failed at step EXEC",
    ),
)
_CAUSE_RES = [(key, summary, re.compile(rx)) for key, summary, rx in CAUSES]
CAUSE_SUMMARIES = {key: summary for key, summary, _ in CAUSES}
CAUSE_SUMMARIES["exception"] = "Python exception"

_EXCEPTION_RE = re.compile(r"(?:^|[\s\]])((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception)): ")
_EXIT_CODE_RE = re.compile(r"exit ?code[:= ]+(-?\d+)", re.I)
_PROBE_RE = re.compile(r'"(?:GET|HEAD) /(?:health|health_generate|ping|ready|v1/models) HTTP/1\.[01]"')
MAX_EXCERPT = 200


def phase_of(line):
    """The phase a log line starts, or None."""
    for key, rx in _PHASE_RES:
        if rx.search(line):
            return key
    return None


def phase_index(key):
    return PHASE_KEYS.index(key)


def is_probe_access(line):
    """An access-log line of a readiness probe (/health, /ping, /ready, /v1/models): not
    start-up activity."""
    return bool(_PROBE_RE.search(line))


def _excerpt(line):
    line = " ".join(line.split())
    return line if len(line) <= MAX_EXCERPT else line[: MAX_EXCERPT - 3] + "..."


def _root_exception(lines, died_rx):
    """The first exception line that is not the launcher's report of a dead scheduler."""
    for line in lines:
        if _EXCEPTION_RE.search(line) and not died_rx.search(line):
            return line[_EXCEPTION_RE.search(line).start(1) :]
    return None


def cause_of(lines):
    """Classify why a start failed: (cause key, one-line explanation) or None.

    Causes are tried in priority order; for each, the first matching line is quoted.
    Without a known cause, the last Python exception line is used ('exception').
    """
    lines = [line for line in lines if line]
    for key, summary, rx in _CAUSE_RES:
        for line in lines:
            if rx.search(line):
                text = summary
                if key == "scheduler-died":
                    m = _EXIT_CODE_RE.search(line)
                    if m and m.group(1) == "-9":
                        text += " (killed by SIGKILL, often the host OOM killer)"
                    # The scheduler's own exception, logged before the launcher's "died" line,
                    # says why; the launcher's line only says that it happened.
                    root = _root_exception(lines, rx)
                    if root:
                        line = root
                return key, "%s: %s" % (text, _excerpt(line))
    for line in reversed(lines):
        if _EXCEPTION_RE.search(line):
            return "exception", "%s: %s" % (CAUSE_SUMMARIES["exception"], _excerpt(line))
    return None


def death_of(lines):
    """A known cause (CAUSES) among lines a server logged after it was up, or None. Not any
    exception line: a request's error is logged and the server serves on; a scheduler's crash or
    an OOM kill is the end of the server (its main process follows, SIGQUIT'd)."""
    found = cause_of(lines)
    return found if found and found[0] != "exception" else None


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Show SGLang start-up phases and the failure cause of a log."
    )
    parser.add_argument("file", nargs="?", help="log file (default: stdin)")
    args = parser.parse_args(argv)
    if args.file:
        with open(args.file, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    else:
        lines = sys.stdin.read().splitlines()
    for n, line in enumerate(lines, 1):
        phase = phase_of(line)
        if phase:
            print("line %d: phase: %s" % (n, PHASE_LABELS[phase]))
    cause = cause_of(lines)
    print("cause: %s: %s" % cause if cause else "cause: none recognised")
    return 0


if __name__ == "__main__":
    sys.exit(main())
