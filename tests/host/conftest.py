"""`make verify`: testinfra against the hosts of a pyinfra inventory (default: the sandbox).

Expected values come from the same profile loader and renderers the deploy uses.

No secret value reaches the output, passing or failing, at any verbosity: tests get a plan whose
env text has its secrets masked, and read secret-bearing node data (the env file, a worker's
environ) only through Node's redacting readers; and every report passes through
sglang_deploy.redact_reports before anything prints it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest
import testinfra

from sglang_deploy.envfile import parse_env_file
from sglang_deploy.inventory import inventory_hosts, testinfra_host
from sglang_deploy.plan import NodePlan, plan_for
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
    redact: Redactor

    def run_ok(self, command, *args):
        result = self.host.run(command, *args)
        assert result.rc == 0, self.redact.text(
            f"{self.name}: {command % args if args else command}: {result.stderr}")
        return result.stdout

    def env_file(self) -> dict:
        """The env file on the node as systemd reads it, secrets masked."""
        return self.redact.mapping(parse_env_file(self.host.file(self.plan.env_path).content_string))

    def environ(self, pid) -> dict:
        """A process's /proc/<pid>/environ, secrets masked."""
        items = self.host.file(f"/proc/{pid}/environ").content.split(b"\0")
        return self.redact.mapping(dict(item.decode(errors="replace").split("=", 1)
                                        for item in items if b"=" in item))


def redacted_plan(plan: NodePlan, redact: Redactor) -> NodePlan:
    return dataclasses.replace(plan, env_text=redact.text(plan.env_text), secret_values=[])


def pytest_generate_tests(metafunc):
    if "node" in metafunc.fixturenames:
        hosts = inventory_hosts(metafunc.config.getoption("inventory"))
        limit = set(filter(None, metafunc.config.getoption("limit").split(",")))
        hosts = [(name, data) for name, data in hosts if not limit or name in limit]
        metafunc.parametrize("node_spec", hosts, ids=[name for name, _ in hosts], scope="session")


@pytest.fixture(scope="session")
def node(node_spec):
    name, data = node_spec
    plan = plan_for(data)
    redact = Redactor.for_profile(plan.profile)
    redact.add(values=plan.secret_values)
    SECRETS.add(redact.names, plan.secret_values)
    SECRETS.add_profile(plan.profile)
    return Node(name=name, host=testinfra_host(data), plan=redacted_plan(plan, redact), redact=redact)
