"""`make verify`: testinfra against the hosts of a pyinfra inventory (default: the sandbox).

Expected values come from the same profile loader and renderers the deploy uses.
"""

from __future__ import annotations

import runpy
from dataclasses import dataclass
from pathlib import Path

import pytest
import testinfra

from sglang_deploy.plan import NodePlan, plan_for

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULTS = runpy.run_path(str(REPO_ROOT / "group_data" / "all.py"))


def pytest_addoption(parser):
    parser.addoption("--inventory", default="inventory/sandbox.py",
                     help="pyinfra inventory file whose hosts are verified")


def inventory_hosts(path):
    """(name, data) pairs of every host group an inventory file defines."""
    namespace = runpy.run_path(str(REPO_ROOT / path))
    hosts = []
    for value in namespace.values():
        if isinstance(value, list) and all(isinstance(h, tuple) and len(h) == 2 for h in value):
            hosts.extend(value)
    return hosts


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
        metafunc.parametrize("node_spec", hosts, ids=[name for name, _ in hosts], scope="session")


@pytest.fixture(scope="session")
def node(node_spec):
    name, data = node_spec
    data = {**{k: v for k, v in DEFAULTS.items() if not k.startswith("_")}, **data}
    url = f"paramiko://{data.get('ssh_user', 'root')}@{data['ssh_hostname']}:{data.get('ssh_port', 22)}"
    host = testinfra.get_host(url, ssh_identity_file=data.get("ssh_key"))
    return Node(name=name, host=host, plan=plan_for(data))
