"""A monitoring host as a deploy leaves it: Prometheus' pinned package, its configuration and
rules as rendered from the inventory, and every target of the inventory up (a down one is
named): sglang_deploy.verify.monitoring_checks."""

from sglang_deploy.verify.verdict import OK


def test_monitoring_check(monitoring, monitoring_check):
    name, host, plan = monitoring
    for found in monitoring_check.run(host, plan):
        assert found.state == OK, f"{name}: {found.line()}"
