"""Per-host report of what an inventory's nodes serve and whether it is what they should:
`python -m sglang_deploy.verify.summary [INVENTORY] [--limit H1,H2] [--json FILE] [--wide]`.
Exit 1 when any check failed.

Printed to fit the terminal (COLUMNS, else its width): a short table (host, the profile it was
checked against, the profile it last passed its readiness gate with: they differ after a
rollback, the verdict, warnings), then one block per host, every node check
of sglang_deploy.verify.checks.REGISTRY with its state and its detail wrapped (the same checks
`make verify`'s tests assert, their details already redacted of secret values), then what is
not ok, one line each. ``--wide``: the full table instead, one column per check (about 400
columns). The JSON has every check and each host's full table row ("table"). A host that
cannot be checked at all gets a row saying so; the report is printed whatever failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sglang_deploy.cli import exit_on_deploy_error
from sglang_deploy.plan.fleet import is_monitoring, serves
from sglang_deploy.plan.host_plan import plan_for
from sglang_deploy.plan.hosts import inventory_hosts, testinfra_host
from sglang_deploy.plan.serving_group import profile_of, resolve_checked
from sglang_deploy.verify import checks, layout
from sglang_deploy.verify.monitoring_summary import monitoring_lines, monitoring_report
from sglang_deploy.verify.redact import Redactor
from sglang_deploy.verify.registry import redactor
from sglang_deploy.verify.router_summary import is_router, router_lines, router_report
from sglang_deploy.verify.verdict import FAILED, WARNING, Check

COLUMNS = (
    "host",
    "checked against",
    *(entry.column for entry in checks.of_kind(checks.NODE) if entry.column),
    "warnings",
)
OVERVIEW = ("host", "checked against", "last passed gate", "verdict", "warnings")


def host_report(name, data, member=None, secrets=None):
    """A host's report; ``secrets``: the session's Redactor, given this host's secrets."""
    plan = plan_for(data, member=member)
    redact = redactor(plan)
    if secrets is not None:
        secrets.add(redact.names, plan.secret_values)
        secrets.add_profile(plan.profile)
    try:
        found = checks.host_checks(testinfra_host(data), plan)
    except Exception as exc:  # e.g. unreachable: still a row, with the reason
        found = [Check("host", FAILED, redact.text(f"not checked: {type(exc).__name__}: {exc}"))]
    report = {"host": name, "profile": plan.profile.name, "checks": [c.as_json() for c in found]}
    report["last_passed_gate"] = last_passed(report)
    report["table"] = dict(zip(COLUMNS, row(report)))
    return report


def row(report):
    by_name = {c["name"]: c for c in report["checks"]}
    return (
        report["host"],
        report["profile"],
        *(entry.cell(by_name) for entry in checks.of_kind(checks.NODE) if entry.column),
        str(len(warnings(report))),
    )


def warnings(report):
    return [c for c in report["checks"] if c["state"] == WARNING]


def last_passed(report):
    """The profile name the node last passed its gate with, or "none"."""
    return checks.last_passed({c["name"]: c for c in report["checks"]})


def failed(report):
    return any(c["state"] == FAILED for c in report["checks"])


def verdict(report):
    """ "ok", or "failed (N)": how many of its checks failed."""
    count = sum(c["state"] == FAILED for c in report["checks"])
    return f"failed ({count})" if count else "ok"


def report_lines(reports, routers, width, wide=False, secrets=None, monitors=()):
    """What the summary prints, every line redacted: the full table (``wide``), or the overview
    and one block per host fitted to ``width``; then what is not ok."""
    secrets = secrets or Redactor()
    if wide:
        lines = layout.table([COLUMNS] + [row(r) for r in reports], secrets)
    else:
        lines = layout.table(
            [OVERVIEW]
            + [
                (r["host"], r["profile"], r["last_passed_gate"], verdict(r), len(warnings(r)))
                for r in reports
            ],
            secrets,
        )
        for report in reports:
            title = f"{report['host']} (checked against {report['profile']})"
            lines += ["", *layout.block(title, report["checks"], width, secrets)]
    problems = layout.problems(reports, width, secrets)
    lines += ([""] if problems and not wide else []) + problems
    if routers:
        lines += ["", *router_lines(routers, width, wide, secrets)]
    if monitors:
        lines += ["", *monitoring_lines(monitors, width, wide, secrets)]
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inventory", nargs="?", default="inventory/sandbox.py")
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    parser.add_argument("--limit", default="", help="comma-separated host names (default: all)")
    parser.add_argument("--wide", action="store_true", help="the full table, one column per check")
    args = parser.parse_args(argv)
    limit = set(filter(None, args.limit.split(",")))
    secrets = Redactor()  # every verified host's secrets: over everything printed or written
    with exit_on_deploy_error():
        everything = inventory_hosts(args.inventory)
        # Serving groups: each member's rank (the hosts verified and their groups' members).
        members = resolve_checked(everything, profile_of, limited=limit or None, whole=False)
        reports = [
            host_report(name, data, members.get(name), secrets)
            for name, data in everything
            if (not limit or name in limit) and serves(data)
        ]
        routers = [
            router_report(name, data, everything)
            for name, data in everything
            if (not limit or name in limit) and is_router(data)
        ]
        monitors = [
            monitoring_report(name, data, everything)
            for name, data in everything
            if (not limit or name in limit) and is_monitoring(data)
        ]
    for line in report_lines(reports, routers, layout.terminal_width(), args.wide, secrets, monitors):
        print(line)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(secrets.text(json.dumps(reports + routers + monitors, indent=2)) + "\n")
    return 1 if any(failed(r) for r in reports + routers + monitors) else 0


if __name__ == "__main__":
    sys.exit(main())
