"""The monitoring hosts' part of `make verify`'s report: one per monitoring host, its
monitoring_checks."""

from sglang_deploy.plan.hosts import testinfra_host
from sglang_deploy.plan.monitoring import monitoring_plan
from sglang_deploy.verify import layout
from sglang_deploy.verify.monitoring_checks import MONITORING_REGISTRY, monitoring_host_checks
from sglang_deploy.verify.verdict import FAILED, Check


def monitoring_report(name, data, everything):
    plan = monitoring_plan(name, everything)
    try:
        found = monitoring_host_checks(testinfra_host(data), plan)
    except Exception as exc:  # e.g. unreachable: still a row, with the reason
        found = [Check("host", FAILED, f"not checked: {type(exc).__name__}: {exc}")]
    report = {
        "host": name,
        "role": "monitoring",
        "prometheus": f"{name}:{plan.port}",
        "checks": [c.as_json() for c in found],
    }
    report["table"] = dict(zip(_header(), _row(report)))
    return report


def _header():
    return ("monitoring", "prometheus", *(entry.name for entry in MONITORING_REGISTRY))


def _row(report):
    by_name = {c["name"]: c["state"] for c in report["checks"]}
    return (
        report["host"],
        report["prometheus"],
        *(by_name.get(entry.name, "-") for entry in MONITORING_REGISTRY),
    )


def monitoring_lines(reports, width, wide, redact):
    """The monitoring hosts' table (``wide``) or one block per host, then what is not ok; redacted."""
    if wide:
        lines = layout.table([_header()] + [_row(r) for r in reports], redact)
    else:
        lines = []
        for report in reports:
            title = f"{report['host']} (Prometheus, {len(report['checks'])} check(s))"
            lines += [*layout.block(title, report["checks"], width, redact), ""]
    return lines + layout.problems(reports, width, redact)
