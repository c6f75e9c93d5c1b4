"""`make verify`: testinfra against the hosts of a pyinfra inventory (default: the sandbox).

Expected values come from the same profile loader and renderers the deploy uses.

The tests are sglang_deploy.checks.REGISTRY, one per host and check. No secret value reaches the
output, passing or failing, at any verbosity: the checks get a plan whose env text has its
secrets masked, mask secret-bearing node data (the env file, a worker's environ) as they read
it and redact every detail; and every report passes through sglang_deploy.redact_reports before
anything prints it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest
import testinfra

from sglang_deploy.checks import REGISTRY
from sglang_deploy.inventory import inventory_hosts, testinfra_host
from sglang_deploy.plan import NodePlan, plan_for
from sglang_deploy.serving_group import profile_of, resolve_checked
from sglang_deploy.redact import Redactor
from sglang_deploy.redact_reports import ReportRedaction

# The session's secrets: every verified host's secret names and the operator's values of them.
SECRETS = Redactor()


def pytest_addoption(parser):
    parser.addoption("--inventory", default="inventory/sandbox.py",
                     help="pyinfra inventory file whose hosts are verified")
    parser.addoption("--limit", default="",
                     help="comma-separated host names to verify (default: all)")


def pytest_configure(config):
    config.pluginmanager.register(ReportRedaction(SECRETS), "sglang-deploy-report-redaction")


@dataclass
class Node:
    name: str
    host: testinfra.host.Host
    plan: NodePlan  # env_text with secrets masked, secret_values empty


def redacted_plan(plan: NodePlan, redact: Redactor) -> NodePlan:
    return dataclasses.replace(plan, env_text=redact.text(plan.env_text), secret_values=[])


def pytest_generate_tests(metafunc):
    if "node" in metafunc.fixturenames:
        hosts = inventory_hosts(metafunc.config.getoption("inventory"))
        limit = set(filter(None, metafunc.config.getoption("limit").split(",")))
        # Serving groups: each member's rank (the hosts verified and their groups' members).
        members = resolve_checked(hosts, profile_of, limited=limit or None, whole=False)
        hosts = [(name, data, members.get(name)) for name, data in hosts if not limit or name in limit]
        metafunc.parametrize("node_spec", hosts, ids=[name for name, _, _ in hosts], scope="session")
    if "check" in metafunc.fixturenames:
        metafunc.parametrize("check", REGISTRY, ids=[check.id for check in REGISTRY])


@pytest.fixture(scope="session")
def node(node_spec):
    name, data, member = node_spec
    plan = plan_for(data, member=member)
    redact = Redactor.for_profile(plan.profile)
    redact.add(values=plan.secret_values)
    SECRETS.add(redact.names, plan.secret_values)
    SECRETS.add_profile(plan.profile)
    return Node(name=name, host=testinfra_host(data), plan=redacted_plan(plan, redact))
