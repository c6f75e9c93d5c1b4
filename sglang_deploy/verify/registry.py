"""The one list of `make verify`'s checks, REGISTRY, and the ``@verify_check`` line that adds a
check to it, with what every check shares (the profile's Redactor, reading our facts and a
file's ownership over testinfra).

A check is a function (testinfra host, the host's NodePlan) -> Check or [Check, ...]; its
registration says how it shows in the per-host table (a column, a cell read from the Check's
``data``, never from its prose). Every check's detail and data pass through the profile's
Redactor: node output never carries a secret value into a report.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass

from sglang_deploy.verify.redact import Redactor
from sglang_deploy.verify.verdict import Check


def state_of(name):
    """The table cell of most checks: the state of the check called ``name``."""
    return lambda by_name: by_name[name]["state"] if name in by_name else "-"


@dataclass(frozen=True)
class VerifyCheck:
    name: str  # the Check's name: its line in the output, its entry in the JSON
    function: Callable  # (testinfra host, NodePlan) -> Check or [Check, ...], redacted
    column: str | None  # its header in the table (None: not a column of its own)
    cell: Callable  # {check name: JSON form of the check (its data too)} -> what the table shows
    warning_fails: bool  # whether a warning fails tests/host (a failure always does)

    @property
    def id(self) -> str:
        """The check's name as a pytest id: `test_check[node1-workers-env]`."""
        return re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")

    def run(self, node, plan) -> list[Check]:
        found = self.function(node, plan)
        return found if isinstance(found, list) else [found]


REGISTRY: list[VerifyCheck] = []


def redactor(plan) -> Redactor:
    redact = Redactor.for_profile(plan.profile)
    redact.add(values=plan.secret_values)
    return redact


def verify_check(name, column=None, cell=None, warning_fails=True):
    """Registers the decorated check under ``name``, shown in the table under ``column``
    (default: ``name``; False: no column of its own) by ``cell`` (default: its state)."""

    def register(check_function):
        @functools.wraps(check_function)
        def check(node, plan):
            redact = redactor(plan)
            found = check_function(node, plan)
            return (
                [_redacted(c, redact) for c in found] if isinstance(found, list) else _redacted(found, redact)
            )

        REGISTRY.append(
            VerifyCheck(
                name, check, name if column is None else column or None, cell or state_of(name), warning_fails
            )
        )
        return check

    return register


def _redacted(found: Check, redact: Redactor) -> Check:
    data = {key: redact.text(value) if isinstance(value, str) else value for key, value in found.data.items()}
    return dataclasses.replace(found, detail=redact.text(found.detail), data=data)


def tool_output(node, tool, command):
    """A tool's stdout, or None when the tool is not on the node."""
    if node.run(f"command -v {tool}").rc != 0:
        return None
    return node.run(command).stdout


def read_fact(node, fact_class, **kwargs):
    """A pyinfra fact of ours, gathered over testinfra: the same command, the same parsing."""
    fact = fact_class()
    return fact.process(node.run(fact.command(**kwargs)).stdout.splitlines())


def tp_size(plan) -> int:
    """Schedulers on this node: tp-size, shared by the nodes of a serving group."""
    return plan.profile.tp_size // plan.profile.nnodes


def ownership(node, path, want_user, want_mode, want_group=None):
    """ "<path> is <mode> <user>[:<group>], not ..." when a file or directory is not as wanted."""
    found = node.file(path)
    if not found.exists:
        return [f"{path} is missing"]
    have = (found.user, found.group if want_group else None, found.mode)
    if have == (want_user, want_group, want_mode):
        return []
    owner = lambda user, group: user + (f":{group}" if group else "")  # noqa: E731
    return [f"{path} is {have[2]:o} {owner(*have[:2])}, not {want_mode:o} {owner(want_user, want_group)}"]
