"""The `monitoring` group: from a hosts file's `monitoring:` section and from sandbox nodes
recorded with role monitoring (`sandbox.py up --monitoring N`); a monitoring host serves
nothing, and the sandbox's shared network gives every exporter a port of its own."""

import json
from types import SimpleNamespace

import pytest

from sglang_deploy.errors import DeployError
from sglang_deploy.plan.fleet import is_monitoring, is_router, serves
from sglang_deploy.plan.hosts import (
    REPO_ROOT,
    gpu_hosts,
    gpu_monitoring,
    sandbox_hosts,
    sandbox_monitoring,
    sandbox_routers,
)
from sglang_deploy.plan.monitoring import monitoring_plan


def sandbox_state(tmp_path):
    nodes = [
        {"name": f"node{i}", "ssh_host": "127.0.0.1", "ssh_port": 2200 + i, "ssh_user": "root"}
        | {"server_port": 30000 + i, "role": role}
        for i, role in enumerate(["node", "node", "node", "router", "monitoring"], 1)
    ]
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"key": "/k", "nodes": nodes}))
    return path


def test_sandbox_monitoring_nodes_are_their_own_group_on_their_server_port(tmp_path, monkeypatch):
    monkeypatch.delenv("SGLANG_DEPLOY_SANDBOX_PROFILES", raising=False)
    state = sandbox_state(tmp_path)
    assert [name for name, _ in sandbox_hosts(state)] == ["node1", "node2", "node3"]
    ((name, data),) = sandbox_monitoring(state)
    assert name == "node5" and data["role"] == "monitoring" and data["prometheus_port"] == 30005
    assert is_monitoring(data) and not is_router(data) and not serves(data)
    assert sandbox_monitoring(tmp_path / "absent.json") == []


def test_the_whole_sandbox_fleet_plans_without_two_exporters_on_one_port(tmp_path, monkeypatch):
    monkeypatch.delenv("SGLANG_DEPLOY_SANDBOX_PROFILES", raising=False)
    state = sandbox_state(tmp_path)
    hosts = sandbox_hosts(state) + sandbox_routers(state) + sandbox_monitoring(state)
    plan = monitoring_plan("node5", hosts, root=tmp_path)
    addresses = [t.address for t in plan.targets]
    assert len(addresses) == len(set(addresses)) == 3 + 1 + 5 + 1
    assert "127.0.0.1:28001" in addresses and "127.0.0.1:30005" in addresses  # node1's exporter, Prometheus
    assert "127.0.0.1:29004" in addresses  # the router's exporter


def test_a_host_in_the_monitoring_group_is_a_monitoring_host():
    host = SimpleNamespace(groups=[SimpleNamespace(name="monitoring")], data={})
    assert is_monitoring(host) and not is_router(host)


def test_the_example_hosts_file_has_a_monitoring_host_with_the_defaults_ssh_keys():
    ((name, data),) = gpu_monitoring(REPO_ROOT / "inventory" / "hosts.example.yml")
    assert name == "monitor-01"
    assert data == {
        "ssh_user": "root",
        "ssh_key": "~/.ssh/id_ed25519",
        "ssh_hostname": "10.20.0.6",
        "role": "monitoring",
    }


def test_a_monitoring_host_listed_as_a_serving_host_too_is_refused(tmp_path):
    path = tmp_path / "hosts.yml"
    path.write_text("hosts:\n  a: {}\nmonitoring:\n  a: {}\n")
    with pytest.raises(DeployError, match="monitoring: a is also under hosts or routers"):
        gpu_hosts(path)
    path.write_text("hosts:\n  a: {}\nmonitoring:\n  m:\n    prometheus_prot: 1\n")
    with pytest.raises(DeployError, match="did you mean 'prometheus_port'"):
        gpu_hosts(path)
