"""The routers' part of `make verify`'s report: one per router host, its router_checks."""

from sglang_deploy.plan.fleet import is_router
from sglang_deploy.plan.fleet_hosts import router_plan
from sglang_deploy.plan.hosts import testinfra_host
from sglang_deploy.verify.host_report import HostKind
from sglang_deploy.verify.router_checks import ROUTER_REGISTRY, router_host_checks

__all__ = ["is_router", "router_report", "router_lines"]

ROUTERS = HostKind("router", "router", ("router", "url"), ROUTER_REGISTRY)


def router_report(name, data, everything):
    plan = router_plan(name, everything)
    return ROUTERS.report(name, plan.settings.url, lambda: router_host_checks(testinfra_host(data), plan))


def router_lines(reports, width, wide, redact):
    """The routers' table (``wide``) or one block per router, then what is not ok; redacted."""
    return ROUTERS.lines(reports, lambda r: f"{r['host']} (router at {r['router']})", width, wide, redact)
