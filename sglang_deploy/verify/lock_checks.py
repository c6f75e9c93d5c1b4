"""`make verify`'s "exact lock" check: the live engine venv holds exactly the profile's lock
(node/exact.py: no distribution more, none missing, the same versions, the lock's Python)."""

from __future__ import annotations

from sglang_deploy.node.lib import status
from sglang_deploy.node.lib.result import parse as parse_result
from sglang_deploy.plan.commands import exact_command
from sglang_deploy.plan.locks import node_lock_path
from sglang_deploy.verify.registry import verify_check
from sglang_deploy.verify.verdict import FAILED, OK, Check

NAME = "exact lock"


def exactness_command(plan) -> str:
    """exact.py run by the live venv's interpreter against the lock on the node."""
    lock = node_lock_path(plan.scripts.directory, plan.profile.engine)
    return exact_command(f"{plan.profile.engine.venv}/bin/python", plan.scripts.directory, lock)


def verdict(report, lock) -> Check:
    """The check from exact.py's result line (None: it printed none)."""
    if report is None:
        return Check(NAME, FAILED, f"exact.py printed no result (is {lock} on the node?)")
    if report["status"] == status.READY:
        return Check(NAME, OK, f"{report['locked']} distributions, exactly the lock's")
    return Check(
        NAME, FAILED, (report.get("cause") or "differs from its lock") + " (`make repair` reinstalls it)"
    )


@verify_check(NAME)
def exact_lock(node, plan) -> Check:
    lock = node_lock_path(plan.scripts.directory, plan.profile.engine)
    if not node.file(lock).exists:
        return Check.nothing_to_check(NAME, f"no lock on the node ({lock}): not installed from a lock")
    return verdict(parse_result(node.run(exactness_command(plan)).stdout.splitlines()), lock)
