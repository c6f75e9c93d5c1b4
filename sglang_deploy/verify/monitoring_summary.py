"""The monitoring hosts' part of `make verify`'s report: one per monitoring host, its
checks of kind MONITORING (monitoring_checks)."""

from sglang_deploy.plan.hosts import testinfra_host
from sglang_deploy.plan.monitoring import monitoring_plan
from sglang_deploy.verify.checks import MONITORING, host_checks
from sglang_deploy.verify.host_report import HostKind

MONITORS = HostKind(MONITORING, "prometheus", ("monitoring", "prometheus"))


def monitoring_report(name, data, everything):
    plan = monitoring_plan(name, everything)
    checks = lambda: host_checks(testinfra_host(data), plan, MONITORING)  # noqa: E731
    return MONITORS.report(name, f"{name}:{plan.port}", checks)


def monitoring_lines(reports, width, wide, redact):
    """The monitoring hosts' table (``wide``) or one block per host, then what is not ok; redacted."""
    title = lambda r: f"{r['host']} (Prometheus, {len(r['checks'])} check(s))"  # noqa: E731
    return MONITORS.lines(reports, title, width, wide, redact)
