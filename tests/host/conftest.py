"""`make verify`: testinfra against the hosts of a pyinfra inventory (default: the sandbox).

Expected values come from the same profile loader and renderers the deploy uses.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import testinfra

from sglang_deploy.inventory import inventory_hosts, testinfra_host
from sglang_deploy.plan import NodePlan, plan_for


def pytest_addoption(parser):
    parser.addoption("--inventory", default="inventory/sandbox.py",
                     help="pyinfra inventory file whose hosts are verified")
    parser.addoption("--limit", default="",
                     help="comma-separated host names to verify (default: all)")


@dataclass
class Node:
    name: str
    host: testinfra.host.Host
    plan: NodePlan

    def run_ok(self, command, *args):
        result = self.host.run(command, *args)
        assert result.rc == 0, f"{self.name}: {command % args if args else command}: {result.stderr}"
        return result.stdout


def pytest_generate_tests(metafunc):
    if "node" in metafunc.fixturenames:
        hosts = inventory_hosts(metafunc.config.getoption("inventory"))
        limit = set(filter(None, metafunc.config.getoption("limit").split(",")))
        hosts = [(name, data) for name, data in hosts if not limit or name in limit]
        metafunc.parametrize("node_spec", hosts, ids=[name for name, _ in hosts], scope="session")


@pytest.fixture(scope="session")
def node(node_spec):
    name, data = node_spec
    return Node(name=name, host=testinfra_host(data), plan=plan_for(data))

