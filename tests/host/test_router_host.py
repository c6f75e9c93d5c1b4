"""A router host as a deploy leaves it: its pinned venv, its unit as rendered, and its view of
the fleet (/readiness 200, every serving node healthy): sglang_deploy.verify.router_checks."""

from sglang_deploy.verify.verdict import OK


def test_router_check(router, router_check):
    name, host, plan = router
    for found in router_check.run(host, plan):
        assert found.state == OK, f"{name}: {found.line()}"
