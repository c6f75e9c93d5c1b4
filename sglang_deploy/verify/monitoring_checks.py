"""What `make verify` checks on a monitoring host: the checks of kind MONITORING in the one
registry (verify/registry.py). A monitoring host has no profile, so its checks take its plan,
plan/monitoring.MonitoringPlan.

A check is a function (testinfra host, MonitoringPlan, scripts dir) -> Check, registered by
``@verify_check("name", kind=MONITORING)``.
"""

from __future__ import annotations

import shlex

from sglang_deploy.node.lib import result
from sglang_deploy.plan.monitoring import unmet_pins
from sglang_deploy.plan.render import SCRIPTS_DIR
from sglang_deploy.verify.registry import MONITORING, verify_check
from sglang_deploy.verify.verdict import FAILED, OK, Check


def installed_versions(text) -> dict:
    """{package: [version]} from `dpkg-query -W -f '${Package} ${Version}\\n'` lines."""
    found = {}
    for line in text.splitlines():
        name, _, version = line.strip().partition(" ")
        if name and version:
            found.setdefault(name, []).append(version)
    return found


@verify_check("prometheus package", kind=MONITORING)
def package(node, plan, scripts_dir=SCRIPTS_DIR):
    names = " ".join(shlex.quote(pin.partition("=")[0]) for pin in plan.packages)
    listed = node.run(f"dpkg-query -W -f '${{Package}} ${{Version}}\\n' {names} 2>/dev/null").stdout
    unmet = unmet_pins(plan.packages, installed_versions(listed))
    if unmet:
        have = installed_versions(listed)
        wrong = [
            f"{pin} (installed: {', '.join(have.get(pin.partition('=')[0], [])) or 'none'})" for pin in unmet
        ]
        return Check("prometheus package", FAILED, "; ".join(wrong))
    return Check("prometheus package", OK, ", ".join(plan.packages))


@verify_check("prometheus configuration", kind=MONITORING)
def configuration(node, plan, scripts_dir=SCRIPTS_DIR):
    """The configuration and rules as rendered from the inventory, the unit active and enabled."""
    for path, text in plan.files.items():
        found = node.file(path)
        if not found.exists:
            return Check("prometheus configuration", FAILED, f"{path} is missing")
        if found.content_string != text:
            return Check(
                "prometheus configuration",
                FAILED,
                f"{path} differs from the rendered one (the inventory changed: deploy)",
            )
    state = node.run(f"systemctl is-active {shlex.quote(plan.unit)}").stdout.strip()
    enabled = node.run(f"systemctl is-enabled {shlex.quote(plan.unit)}").stdout.strip()
    if (state, enabled) != ("active", "enabled"):
        return Check("prometheus configuration", FAILED, f"{plan.unit} is {state}, {enabled}")
    return Check(
        "prometheus configuration",
        OK,
        f"{len(plan.targets)} target(s), {len(plan.rules)} rule file(s), as rendered",
    )


@verify_check("prometheus targets", kind=MONITORING)
def targets(node, plan, scripts_dir=SCRIPTS_DIR):
    """Every target of the inventory up in Prometheus; each that is not is named, with its state."""
    run = node.run(plan.targets_check(scripts_dir))
    found = result.parse(run.stdout.splitlines())
    if found is None:
        return Check(
            "prometheus targets", FAILED, f"target check printed no result: {run.stderr.strip()[-200:]}"
        )
    if found["status"] != 0:
        return Check("prometheus targets", FAILED, found.get("cause") or "not every target is up")
    return Check("prometheus targets", OK, f"{len(found['targets'])} target(s) up at {plan.local_url}")
