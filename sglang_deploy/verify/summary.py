"""Per-host report of what an inventory's nodes serve and whether it is what they should:
`python -m sglang_deploy.verify.summary [INVENTORY] [--limit H1,H2] [--json FILE]`. Exit 1 when any check failed.

Columns: host, the profile it was checked against, then one per check of
sglang_deploy.verify.checks.REGISTRY (the same checks `make verify`'s tests assert, their details
already redacted of secret values; "last passed gate" is the profile the host last passed its
readiness gate with: it differs from the one checked against after a rollback), warnings. A host
that cannot be checked at all gets a row saying so; the table is printed whatever failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sglang_deploy.cli import exit_on_deploy_error
from sglang_deploy.plan.host_plan import plan_for
from sglang_deploy.plan.hosts import inventory_hosts, testinfra_host
from sglang_deploy.plan.serving_group import profile_of, resolve_checked
from sglang_deploy.verify import checks
from sglang_deploy.verify.redact import Redactor
from sglang_deploy.verify.router_summary import is_router, print_router_table, router_report
from sglang_deploy.verify.verdict import FAILED, OK, WARNING, Check

COLUMNS = (
    "host",
    "checked against",
    *(entry.column for entry in checks.REGISTRY if entry.column),
    "warnings",
)


def host_report(name, data, member=None):
    plan = plan_for(data, member=member)
    try:
        found = checks.host_checks(testinfra_host(data), plan)
    except Exception as exc:  # e.g. unreachable: still a row, with the reason
        redact = Redactor.for_profile(plan.profile)
        redact.add(values=plan.secret_values)
        found = [Check("host", FAILED, redact.text(f"not checked: {type(exc).__name__}: {exc}"))]
    report = {
        "host": name,
        "profile": plan.profile.name,
        "checks": [{"name": c.name, "state": c.state, "detail": c.detail} for c in found],
    }
    report["last_passed_gate"] = last_passed(report)
    return report


def row(report):
    by_name = {c["name"]: c for c in report["checks"]}
    warnings = [c for c in report["checks"] if c["state"] == WARNING]
    return (
        report["host"],
        report["profile"],
        *(entry.cell(by_name) for entry in checks.REGISTRY if entry.column),
        str(len(warnings)),
    )


def last_passed(report):
    """The profile name the node last passed its gate with, or "none"."""
    return checks.last_passed({c["name"]: c for c in report["checks"]})


def failed(report):
    return any(c["state"] == FAILED for c in report["checks"])


def print_table(rows):
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for cells in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inventory", nargs="?", default="inventory/sandbox.py")
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    parser.add_argument("--limit", default="", help="comma-separated host names (default: all)")
    args = parser.parse_args(argv)
    limit = set(filter(None, args.limit.split(",")))
    with exit_on_deploy_error():
        everything = inventory_hosts(args.inventory)
        # Serving groups: each member's rank (the hosts verified and their groups' members).
        members = resolve_checked(everything, profile_of, limited=limit or None, whole=False)
        reports = [
            host_report(name, data, members.get(name))
            for name, data in everything
            if (not limit or name in limit) and not is_router(data)
        ]
        routers = [
            router_report(name, data, everything)
            for name, data in everything
            if (not limit or name in limit) and is_router(data)
        ]
    print_table([COLUMNS] + [row(r) for r in reports])
    for report in reports:
        for c in report["checks"]:
            if c["state"] != OK:
                print(f"{report['host']}: {c['name']}: {c['state']}: {c['detail']}")
    if routers:
        print_router_table(routers)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(reports + routers, indent=2) + "\n")
    return 1 if any(failed(r) for r in reports + routers) else 0


if __name__ == "__main__":
    sys.exit(main())
