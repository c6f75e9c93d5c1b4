"""The routers' rows of `make verify`'s report: one per router host, its router_checks."""

from sglang_deploy.plan.fleet import is_router
from sglang_deploy.plan.fleet_hosts import router_plan
from sglang_deploy.plan.hosts import testinfra_host
from sglang_deploy.verify.router_checks import ROUTER_REGISTRY, router_host_checks
from sglang_deploy.verify.verdict import FAILED, OK, Check

__all__ = ["is_router", "router_report", "print_router_table"]


def router_report(name, data, everything):
    plan = router_plan(name, everything)
    try:
        found = router_host_checks(testinfra_host(data), plan)
    except Exception as exc:  # e.g. unreachable: still a row, with the reason
        found = [Check("host", FAILED, f"not checked: {type(exc).__name__}: {exc}")]
    return {
        "host": name,
        "role": "router",
        "router": plan.settings.url,
        "checks": [{"name": c.name, "state": c.state, "detail": c.detail} for c in found],
    }


def print_router_table(reports):
    header = ("router", "url", *(entry.name for entry in ROUTER_REGISTRY))
    rows = [header]
    for report in reports:
        by_name = {c["name"]: c["state"] for c in report["checks"]}
        rows.append(
            (report["host"], report["router"], *(by_name.get(entry.name, "-") for entry in ROUTER_REGISTRY))
        )
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(header))]
    print()
    for cells in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip())
    for report in reports:
        for c in report["checks"]:
            if c["state"] != OK:
                print(f"{report['host']}: {c['name']}: {c['state']}: {c['detail']}")
