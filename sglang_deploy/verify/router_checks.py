"""What `make verify` checks on a router host: the checks of kind ROUTER in the one registry
(verify/registry.py). A router host has no profile, so its checks take the router's plan,
fleet_plan.RouterPlan.

A check is a function (testinfra host, RouterPlan, scripts dir) -> Check, registered by
``@verify_check("name", kind=ROUTER)``.
"""

from __future__ import annotations

import shlex

from sglang_deploy.node.lib import result, status
from sglang_deploy.plan.commands import exact_command
from sglang_deploy.plan.render import SCRIPTS_DIR
from sglang_deploy.verify.registry import ROUTER, verify_check
from sglang_deploy.verify.verdict import FAILED, OK, Check


@verify_check("router packages", kind=ROUTER)
def packages(node, plan, scripts_dir=SCRIPTS_DIR):
    """The router's venv holds exactly its lock (exact.py, run by the venv's interpreter)."""
    venv, lock = plan.router.venv, plan.locked.remote_lock
    if not node.file(f"{venv}/bin/python").exists:
        return Check("router packages", FAILED, f"no venv at {venv}")
    if not node.file(lock).exists:
        return Check("router packages", FAILED, f"no lock at {lock}: deploy")
    found = result.parse(node.run(exact_command(f"{venv}/bin/python", scripts_dir, lock)).stdout.splitlines())
    if found is None:
        return Check("router packages", FAILED, f"exact.py printed no result for {venv}")
    if found["status"] != status.READY:
        return Check("router packages", FAILED, (found.get("cause") or "differs from its lock") + " (deploy)")
    pins = ", ".join(plan.router.settings.router_packages)
    return Check("router packages", OK, f"{pins}: {found['locked']} distributions, exactly the lock's")


@verify_check("router unit", kind=ROUTER)
def unit(node, plan, scripts_dir=SCRIPTS_DIR):
    path = plan.unit_path
    installed = node.file(path)
    if not installed.exists:
        return Check("router unit", FAILED, f"{path} is missing")
    if installed.content_string != plan.unit_text:
        return Check(
            "router unit",
            FAILED,
            f"{path} differs from the rendered unit (worker list or settings changed: deploy)",
        )
    state = node.run(f"systemctl is-active {shlex.quote(plan.unit)}").stdout.strip()
    enabled = node.run(f"systemctl is-enabled {shlex.quote(plan.unit)}").stdout.strip()
    if (state, enabled) != ("active", "enabled"):
        return Check("router unit", FAILED, f"{plan.unit} is {state}, {enabled}")
    return Check("router unit", OK, f"{plan.unit} active, enabled, as rendered")


@verify_check("router workers", kind=ROUTER)
def workers(node, plan, scripts_dir=SCRIPTS_DIR):
    """/readiness 200 and every serving node listed healthy in /workers."""
    run = node.run(plan.gate(scripts_dir, timeout=0))
    found = result.parse(run.stdout.splitlines())
    if found is None:
        return Check("router workers", FAILED, f"router gate printed no result: {run.stderr.strip()[-200:]}")
    if found["status"] != 0:
        return Check("router workers", FAILED, found.get("cause") or "not ready")
    return Check("router workers", OK, f"{len(found['workers'])} worker(s) healthy at {plan.router.url}")
