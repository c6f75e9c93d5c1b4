"""One verdict of `make verify`: a Check, named, with a state and a one-line detail.

States: "ok", "warning", "failed", or "not checked (<tool> missing)" — a check that could not
look is never "ok". ``applies=False`` marks a warning that says there was nothing to check here
(not requested, nothing recorded yet): tests/host skips it instead of judging it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

OK = "ok"
WARNING = "warning"
FAILED = "failed"
_NOT_CHECKED = re.compile(r"^not checked \(.+ missing\)$")


@dataclass(frozen=True)
class Check:
    name: str
    state: str  # OK, WARNING, FAILED, or "not checked (<tool> missing)"
    detail: str = ""
    applies: bool = True  # False: nothing to check here (a skip in tests/host)
    # What the per-host table shows of it, as values (the profile last passed, a member's
    # rank): the table reads these, never the detail's prose. Redacted like the detail.
    data: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.state not in (OK, WARNING, FAILED) and not _NOT_CHECKED.match(self.state):
            raise ValueError("unknown check state %r" % self.state)

    @classmethod
    def not_checked(cls, name: str, tool: str, detail: str = "") -> Check:
        return cls(name, "not checked (%s missing)" % tool, detail)

    @classmethod
    def nothing_to_check(cls, name: str, detail: str) -> Check:
        return cls(name, WARNING, detail, applies=False)

    @property
    def ok(self) -> bool:
        return self.state == OK

    @property
    def checked(self) -> bool:
        return not self.state.startswith("not checked")

    def as_json(self) -> dict:
        """The check in reports/verify.json, and as the table's cells read it."""
        return {"name": self.name, "state": self.state, "detail": self.detail, "data": dict(self.data)}

    def line(self) -> str:
        return "%s: %s%s" % (self.name, self.state, " - " + self.detail if self.detail else "")
