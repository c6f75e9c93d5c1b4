"""Every check `make verify` makes: the one list of them is REGISTRY (verify/registry.py),
filled by the subject modules below, imported in the table's column order.

A check is a function (testinfra host, the host's plan) -> Check or [Check, ...], registered
by its `@verify_check(...)` line, which also says its kind (the hosts it looks at: NODE, the
default; ROUTER; MONITORING) and how it shows in its kind's table (a cell read from the Check's
``data``). From REGISTRY, by kind, come tests/host (one test per host and check), the tables and
reports/verify.json (sglang_deploy.verify.summary).

To add a check: write the function, with its `@verify_check("name")` line above it, in the
module of its subject (a new subject: a new module, named in SUBJECTS):

- service_checks: last known good, serving, the serving group, the last start
- env_checks: env file, unit, start-up hook, the workers' environment, NCCL's confirmation
- engine_checks: engine drift, the engine venv that runs, model files
- lock_checks: the engine venv holds exactly its lock
- gpu_checks: GPUs, links, ACS, IOMMU, the node's settings
- passport_checks: the node's hardware passport, alone and against its peers
- router_checks (kind ROUTER): the router's venv, unit and view of the fleet
- monitoring_checks (kind MONITORING): Prometheus' package, configuration and targets

Every node check's detail and data pass through the profile's Redactor: node output (journal
lines, a gate report's cause, a script's message, a file's values) never carries a secret value
into a report.
"""

from __future__ import annotations

import importlib

from sglang_deploy.verify.registry import MONITORING, NODE, REGISTRY, ROUTER, of_kind, verify_check
from sglang_deploy.verify.service_checks import last_passed
from sglang_deploy.verify.verdict import Check

__all__ = [
    "MONITORING",
    "NODE",
    "REGISTRY",
    "ROUTER",
    "SUBJECTS",
    "host_checks",
    "last_passed",
    "of_kind",
    "verify_check",
]

# The subjects, in the tables' column order (within one, the order of its functions).
SUBJECTS = (
    "service_checks",
    "env_checks",
    "engine_checks",
    "lock_checks",
    "gpu_checks",
    "passport_checks",
    "router_checks",
    "monitoring_checks",
)
for _subject in SUBJECTS:
    importlib.import_module(f"sglang_deploy.verify.{_subject}")  # registers its checks
REGISTRY.sort(key=lambda entry: SUBJECTS.index(entry.function.__module__.rsplit(".", 1)[1]))


def host_checks(node, plan, kind=NODE) -> list[Check]:
    """Every check of ``kind`` on one host, given its plan."""
    return [found for entry in of_kind(kind) for found in entry.run(node, plan)]
