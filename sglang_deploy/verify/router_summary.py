"""The routers' part of `make verify`'s report: one per router host, its checks of kind ROUTER
(router_checks)."""

from sglang_deploy.plan.fleet import is_router
from sglang_deploy.plan.fleet_hosts import router_plan
from sglang_deploy.plan.hosts import testinfra_host
from sglang_deploy.verify.checks import ROUTER, host_checks
from sglang_deploy.verify.host_report import HostKind

__all__ = ["is_router", "router_report", "router_lines"]

ROUTERS = HostKind(ROUTER, "router", ("router", "url"))


def router_report(name, data, everything):
    plan = router_plan(name, everything)
    return ROUTERS.report(name, plan.router.url, lambda: host_checks(testinfra_host(data), plan, ROUTER))


def router_lines(reports, width, wide, redact):
    """The routers' table (``wide``) or one block per router, then what is not ok; redacted."""
    return ROUTERS.lines(reports, lambda r: f"{r['host']} (router at {r['router']})", width, wide, redact)
