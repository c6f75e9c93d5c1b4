"""`make verify`: testinfra against the hosts of a pyinfra inventory (default: the sandbox).

Expected values come from the same profile loader and renderers the deploy uses.

The tests are sglang_deploy.verify.checks.REGISTRY, one per host and check of the host's kind
(a serving node's, a router's, a monitoring host's). No secret value reaches the
output, passing or failing, at any verbosity: the checks get a plan whose env text has its
secrets masked, mask secret-bearing node data (the env file, a worker's environ) as they read
it and redact every detail; and every report passes through sglang_deploy.verify.pytest_redaction before
anything prints it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest
import testinfra

from sglang_deploy.plan.fleet import is_monitoring, is_router, serves
from sglang_deploy.plan.fleet_hosts import router_plan
from sglang_deploy.plan.host_plan import NodePlan, plan_for
from sglang_deploy.plan.hosts import inventory_hosts, testinfra_host
from sglang_deploy.plan.monitoring import monitoring_plan
from sglang_deploy.plan.serving_group import profile_of, resolve_checked
from sglang_deploy.verify.checks import MONITORING, NODE, ROUTER, of_kind
from sglang_deploy.verify.pytest_redaction import ReportRedaction
from sglang_deploy.verify.redact import Redactor

# The session's secrets: every verified host's secret names and the operator's values of them.
SECRETS = Redactor()


def pytest_addoption(parser):
    parser.addoption(
        "--inventory", default="inventory/sandbox.py", help="pyinfra inventory file whose hosts are verified"
    )
    parser.addoption("--limit", default="", help="comma-separated host names to verify (default: all)")


def pytest_configure(config):
    config.pluginmanager.register(ReportRedaction(SECRETS), "sglang-deploy-report-redaction")


@dataclass
class Node:
    name: str
    host: testinfra.host.Host
    plan: NodePlan  # env_text with secrets masked, secret_values empty


def redacted_plan(plan: NodePlan, redact: Redactor) -> NodePlan:
    return dataclasses.replace(plan, env_text=redact.text(plan.env_text), secret_values=[])


def _hosts_in_limit(config):
    everything = inventory_hosts(config.getoption("inventory"))
    limit = set(filter(None, config.getoption("limit").split(",")))
    return everything, [(name, data) for name, data in everything if not limit or name in limit]


def pytest_ignore_collect(collection_path, config):
    """No router (monitoring host) in the run: no router (monitoring) checks at all (rather
    than a line of skips)."""
    if collection_path.name == "test_router_host.py":
        return not any(is_router(data) for _, data in _hosts_in_limit(config)[1])
    if collection_path.name == "test_monitoring_host.py":
        return not any(is_monitoring(data) for _, data in _hosts_in_limit(config)[1])
    return None


def pytest_generate_tests(metafunc):
    if "monitoring" in metafunc.fixturenames:
        everything, in_limit = _hosts_in_limit(metafunc.config)
        hosts = [
            (name, monitoring_plan(name, everything), data) for name, data in in_limit if is_monitoring(data)
        ]
        metafunc.parametrize("monitoring_spec", hosts, ids=[h[0] for h in hosts], scope="session")
    if "monitoring_check" in metafunc.fixturenames:
        parametrize_checks(metafunc, "monitoring_check", MONITORING)
    if "node" in metafunc.fixturenames or "router" in metafunc.fixturenames:
        everything, in_limit = _hosts_in_limit(metafunc.config)
        # Router hosts have their own checks (tests/host/test_router_host.py).
        wanted = "router" in metafunc.fixturenames
        hosts = [(name, data) for name, data in in_limit if (is_router if wanted else serves)(data)]
        if wanted:
            hosts = [
                (name, router_plan(name, everything), data)
                for name, _ in hosts
                for data in [dict(everything)[name]]
            ]
            metafunc.parametrize("router_spec", hosts, ids=[h[0] for h in hosts], scope="session")
        else:
            # Serving groups: each member's rank (the hosts verified and their groups' members).
            limit = set(filter(None, metafunc.config.getoption("limit").split(",")))
            members = resolve_checked(everything, profile_of, limited=limit or None, whole=False)
            hosts = [(name, data, members.get(name)) for name, data in hosts]
            metafunc.parametrize("node_spec", hosts, ids=[name for name, _, _ in hosts], scope="session")
    if "router_check" in metafunc.fixturenames:
        parametrize_checks(metafunc, "router_check", ROUTER)
    if "check" in metafunc.fixturenames:
        parametrize_checks(metafunc, "check", NODE)


def parametrize_checks(metafunc, fixture, kind):
    """One test per registered check of ``kind``, its id the check's (`...[node1-serving]`)."""
    found = of_kind(kind)
    metafunc.parametrize(fixture, found, ids=[check.id for check in found])


@pytest.fixture(scope="session")
def node(node_spec):
    name, data, member = node_spec
    plan = plan_for(data, member=member)
    redact = Redactor.for_profile(plan.profile)
    redact.add(values=plan.secret_values)
    SECRETS.add(redact.names, plan.secret_values)
    SECRETS.add_profile(plan.profile)
    return Node(name=name, host=testinfra_host(data), plan=redacted_plan(plan, redact))


@pytest.fixture(scope="session")
def router(router_spec):
    name, plan, data = router_spec
    return name, testinfra_host(data), plan


@pytest.fixture(scope="session")
def monitoring(monitoring_spec):
    name, plan, data = monitoring_spec
    return name, testinfra_host(data), plan
