"""The one list of `make verify`'s checks, REGISTRY, and the ``@verify_check`` line that adds a
check to it, with what every check shares (the profile's Redactor, reading our facts and a
file's ownership over testinfra).

Each check is of one kind, the hosts it looks at: NODE (a serving node; the check takes the
host's NodePlan), ROUTER (a router host: fleet_plan.RouterPlan) or MONITORING (a monitoring
host: plan/monitoring.MonitoringPlan); ``of_kind`` lists one kind's, in the table's order.

A check is a function (testinfra host, the host's plan) -> Check or [Check, ...]; its
registration says how it shows in its kind's table (a column, a cell read from the Check's
``data``, never from its prose). Every node check's detail and data pass through the profile's
Redactor: node output never carries a secret value into a report (router and monitoring hosts
have no profile; their part of the report is redacted as it is printed).
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


NODE, ROUTER, MONITORING = "node", "router", "monitoring"
KINDS = (NODE, ROUTER, MONITORING)


@dataclass(frozen=True)
class VerifyCheck:
    name: str  # the Check's name: its line in the output, its entry in the JSON
    function: Callable  # (testinfra host, the host's plan) -> Check or [Check, ...]; a node's redacted
    column: str | None  # its header in the table (None: not a column of its own)
    cell: Callable  # {check name: JSON form of the check (its data too)} -> what the table shows
    warning_fails: bool  # whether a warning fails tests/host (a failure always does)
    kind: str = NODE  # the hosts it looks at: NODE, ROUTER or MONITORING

    @property
    def id(self) -> str:
        """The check's name as a pytest id: `test_check[node1-workers-env]`."""
        return re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")

    def run(self, node, plan) -> list[Check]:
        found = self.function(node, plan)
        return found if isinstance(found, list) else [found]


REGISTRY: list[VerifyCheck] = []


def of_kind(kind) -> list[VerifyCheck]:
    """The registered checks of one kind (NODE, ROUTER, MONITORING), in the registry's order."""
    return [entry for entry in REGISTRY if entry.kind == kind]


def redactor(plan) -> Redactor:
    redact = Redactor.for_profile(plan.profile)
    redact.add(values=plan.secret_values)
    return redact


def verify_check(name, column=None, cell=None, warning_fails=True, kind=NODE):
    """Registers the decorated check under ``name``, of ``kind``, shown in its kind's table under
    ``column`` (default: ``name``; False: no column of its own) by ``cell`` (default: its state).
    A node check comes back wrapped in its profile's Redactor; the others as they are."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind of check {kind!r}")

    def register(check_function):
        check = _redacting(check_function) if kind == NODE else check_function
        column_name = name if column is None else column or None
        REGISTRY.append(VerifyCheck(name, check, column_name, cell or state_of(name), warning_fails, kind))
        return check

    return register


def _redacting(check_function):
    @functools.wraps(check_function)
    def check(node, plan):
        redact = redactor(plan)
        found = check_function(node, plan)
        return [_redacted(c, redact) for c in found] if isinstance(found, list) else _redacted(found, redact)

    return check


def _redacted(found: Check, redact: Redactor) -> Check:
    data = {key: redact.text(value) if isinstance(value, str) else value for key, value in found.data.items()}
    return dataclasses.replace(found, detail=redact.text(found.detail), data=data)


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
