"""Progress output that can never kill a node script.

A script's stdout is often the controller's SSH channel. When the controller goes away (a lid
closed, a VPN drop) the channel closes and the next progress line fails with EPIPE: Python
ignores SIGPIPE, so print raises BrokenPipeError and the script would die mid-step (between a
`systemctl stop` and its `start`). ``guard()`` wraps stdout and stderr so that the first broken
write points the stream at /dev/null and every later line is dropped silently: the script goes
on, and its result still reaches the result file (result.py). result.py calls it at import, so
every one of our scripts has it.
"""

import errno
import os
import sys


def _broken(exc):
    return isinstance(exc, BrokenPipeError) or getattr(exc, "errno", None) in (errno.EPIPE, errno.ECONNRESET)


class SafeStream:
    """A text stream whose writes and flushes survive a reader that went away."""

    def __init__(self, stream):
        self._stream = stream
        self.closed_reader = False

    def _to_devnull(self):
        """Point the stream's descriptor at /dev/null: what is buffered and every later write
        (ours, and the interpreter's flush at exit) then succeed, going nowhere."""
        self.closed_reader = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass

    def write(self, text):
        if self.closed_reader:
            return len(text)
        try:
            return self._stream.write(text)
        except OSError as exc:
            if not _broken(exc):
                raise
            self._to_devnull()
            return len(text)

    def flush(self):
        if self.closed_reader:
            return
        try:
            self._stream.flush()
        except OSError as exc:
            if not _broken(exc):
                raise
            self._to_devnull()

    def __getattr__(self, name):
        return getattr(self._stream, name)


def guard():
    """Make this process's stdout and stderr survive a closed reader (idempotent)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, SafeStream):
            setattr(sys, name, SafeStream(stream))


def say(text):
    """Print one progress line now; never fails for a reader that went away (guarded or not:
    this leaves the process's streams as they are)."""
    stream = sys.stdout if isinstance(sys.stdout, SafeStream) else SafeStream(sys.stdout)
    stream.write(text + "\n")
    stream.flush()
