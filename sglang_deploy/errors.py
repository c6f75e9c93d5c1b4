"""The project's exceptions, defined once.

Anything raised as a DeployError is meant for the operator: the command line prints its
message and exits, without a traceback. Everything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class DeployError(Exception):
    """A problem the operator can fix; the message says what and where."""


class ProfileError(DeployError):
    """A profile that cannot be used: ``file:line: key.path: reason`` (unknown parts left out)."""

    def __init__(
        self, reason: str, *, file: str | None = None, key: str | None = None, line: int | None = None
    ):
        self.reason, self.file, self.key, self.line = reason, file, key, line
        where = ":".join(str(part) for part in (file, line) if part is not None)
        super().__init__("".join(f"{part}: " for part in (where, key) if part) + reason)
