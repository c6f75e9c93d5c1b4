"""The routers' part of `make verify`'s report: one per router host, its router_checks."""

from sglang_deploy.plan.fleet import is_router
from sglang_deploy.plan.fleet_hosts import router_plan
from sglang_deploy.plan.hosts import testinfra_host
from sglang_deploy.verify import layout
from sglang_deploy.verify.router_checks import ROUTER_REGISTRY, router_host_checks
from sglang_deploy.verify.verdict import FAILED, Check

__all__ = ["is_router", "router_report", "router_lines"]


def router_report(name, data, everything):
    plan = router_plan(name, everything)
    try:
        found = router_host_checks(testinfra_host(data), plan)
    except Exception as exc:  # e.g. unreachable: still a row, with the reason
        found = [Check("host", FAILED, f"not checked: {type(exc).__name__}: {exc}")]
    report = {
        "host": name,
        "role": "router",
        "router": plan.settings.url,
        "checks": [c.as_json() for c in found],
    }
    report["table"] = dict(zip(_header(), _row(report)))
    return report


def _header():
    return ("router", "url", *(entry.name for entry in ROUTER_REGISTRY))


def _row(report):
    by_name = {c["name"]: c["state"] for c in report["checks"]}
    return (report["host"], report["router"], *(by_name.get(entry.name, "-") for entry in ROUTER_REGISTRY))


def router_lines(reports, width, wide, redact):
    """The routers' table (``wide``) or one block per router, then what is not ok; redacted."""
    if wide:
        lines = layout.table([_header()] + [_row(r) for r in reports], redact)
    else:
        lines = []
        for report in reports:
            title = f"{report['host']} (router at {report['router']})"
            lines += [*layout.block(title, report["checks"], width, redact), ""]
    return lines + layout.problems(reports, width, redact)
