"""Several services on one node (plan/shared_nodes.py): each service's engine link and venvs are
its own by default (the service sglang keeps /opt/sglang/venv and /opt/sglang/venvs), so two
services' plans write no path of each other's; and an inventory whose hosts of one node would
share one is refused before any host is touched, naming both."""

from types import SimpleNamespace

import pytest

from sglang_deploy.errors import DeployError
from sglang_deploy.facts.gpu import acs_unit_services, acs_unit_text
from sglang_deploy.plan import shared_nodes
from sglang_deploy.plan.host_plan import plan_for
from sglang_deploy.plan.hosts import deploy_defaults
from sglang_deploy.plan.serving_group import profile_of
from sglang_deploy.profile.schema import load_profile
from sglang_deploy.verify import gpu_checks
from sglang_deploy.verify.verdict import FAILED, OK

SERVICE_B = {"name": "sglang-b", "port": 30101}


def node_host(name, service=None, ssh_port=None, model=None, **data):
    """A host on the node 10.0.0.11 (its SSH port: 22 unless given), serving the sandbox
    profile; ``service``: its profile's service section; ``model``: its model directory (the
    sandbox profile stages it; unset: /models/<name>, each host its own)."""
    overrides = {
        "model": {"path": model or f"/models/{name}"},
        **data.pop("profile_overrides", {}),
        **({"service": service} if service else {}),
    }
    return name, {
        "ssh_hostname": "10.0.0.11",
        **({"ssh_port": ssh_port} if ssh_port else {}),
        "profile": "sandbox",
        "profile_overrides": overrides,
        **data,
    }


def plan(data, python_version="3.11"):
    found = plan_for({**deploy_defaults(), **data}, operator_env={})
    found.bind_venv(python_version)
    return found


# -- Each service's own paths --------------------------------------------------------------------


def test_the_service_sglang_keeps_the_engine_paths_it_always_had():
    found = plan(node_host("node1")[1])
    assert found.profile.engine.venv == "/opt/sglang/venv"
    assert found.venvs_dir == "/opt/sglang/venvs"
    assert found.venv.startswith("/opt/sglang/venvs/sglang-0.5.23+sandbox-")
    assert found.hook_python == f"{found.venv}/bin/python"
    assert load_profile("baseline").engine.venv == "/opt/sglang/venv"


def test_another_service_gets_an_engine_link_and_venvs_of_its_own():
    found = plan(node_host("node1-b", SERVICE_B)[1])
    assert found.profile.engine.venv == "/opt/sglang/services/sglang-b/venv"
    assert found.venvs_dir == "/opt/sglang/services/sglang-b/venvs"
    assert found.venv.startswith("/opt/sglang/services/sglang-b/venvs/sglang-0.5.23+sandbox-")
    # The start-up hook goes into the venv's site-packages: into this service's own venv.
    assert found.hook_python == f"{found.venv}/bin/python"
    # A unit name's ':' stays out of a venv path (VenvPath: plain).
    odd = load_profile("sandbox", overrides={"service": {"name": "llm:b"}})
    assert odd.engine.venv == "/opt/sglang/services/llm_b/venv"


def test_an_engine_link_or_venvs_directory_given_is_kept():
    _, data = node_host(
        "node1-b", SERVICE_B, venvs_dir="/srv/venvs", profile_overrides={"engine": {"venv": "/srv/link"}}
    )
    found = plan(data)
    assert (found.profile.engine.venv, found.venvs_dir) == ("/srv/link", "/srv/venvs")
    assert found.venv.startswith("/srv/venvs/sglang-0.5.23+sandbox-")


def test_two_services_of_one_node_plan_no_path_of_each_others():
    a, b = plan(node_host("node1")[1]), plan(node_host("node1-b", SERVICE_B)[1])
    # Same pins, so a venv of the same name: in two directories.
    assert a.venv.rsplit("/", 1)[1] == b.venv.rsplit("/", 1)[1]

    def paths(p):
        return {
            "unit": f"{p.settings.unit_dir}/{p.unit}",
            "env file": p.env_path,
            "engine link": p.profile.engine.venv,
            "staged switch": p.profile.engine.venv + ".next",
            "venvs": p.venvs_dir,
            "venv (and its hook)": p.venv,
            "last known good": p.scripts.last_good_dir,
            "deploy lock": p.lock_path,
        }

    mine, theirs = paths(a), paths(b)
    for what, path in mine.items():
        clashes = [other for other in theirs.values() if other == path or other.startswith(path + "/")]
        assert not clashes, f"{what} {path}: {clashes}"
    assert a.profile.argv()[a.profile.argv().index("--port") + 1] == "30000"
    assert b.profile.argv()[b.profile.argv().index("--port") + 1] == "30101"


# -- Refused: what two services of one node must not share ---------------------------------------


def test_services_of_one_node_that_share_nothing_are_planned_with_every_unit_of_the_node():
    hosts = [node_host("node1"), node_host("node1-b", SERVICE_B), node_host("node2", ssh_port=2222)]
    units = shared_nodes.checked(hosts, profile_of, limited={"node1-b", "node2"})
    assert units == {
        "node1": ("sglang-b.service", "sglang.service"),
        "node1-b": ("sglang-b.service", "sglang.service"),
    }


@pytest.mark.parametrize(
    ("b", "said"),
    [
        pytest.param({"service": {"port": 30101}}, "both run sglang.service", id="service name"),
        pytest.param({"service": {"name": "sglang-b"}}, "both serve on port 30000", id="port"),
        pytest.param(
            {"service": SERVICE_B, "profile_overrides": {"engine": {"venv": "/opt/sglang/venv"}}},
            "both have /opt/sglang/venv as their engine link",
            id="engine link given",
        ),
        pytest.param(
            {"service": SERVICE_B, "venvs_dir": "/opt/sglang/venvs"},
            "both have /opt/sglang/venvs as their venvs directory",
            id="venvs directory given",
        ),
        pytest.param(
            {"service": SERVICE_B, "profile_overrides": {"engine": {"venv": "/opt/sglang/venvs/b"}}},
            "node1's venvs directory /opt/sglang/venvs and node1-b's engine link /opt/sglang/venvs/b overlap",
            id="link inside the other's venvs",
        ),
        pytest.param(
            {"service": SERVICE_B, "profile_overrides": {"pcie": {"disable_acs": True}}},
            "pcie.disable_acs differs",
            id="ACS unit",
        ),
        pytest.param(
            {"service": SERVICE_B, "node_exporter": True, "node_exporter_port": 9101},
            "node_exporter_port 9100 for one and 9101 for the other",
            id="node exporter",
        ),
    ],
)
def test_two_services_of_one_node_that_would_share_are_refused_naming_both(b, said):
    a_data = node_host("node1", node_exporter=True)
    b_data = node_host("node1-b", b.pop("service"), **b)
    with pytest.raises(DeployError, match="node1 and node1-b are one node") as refused:
        shared_nodes.checked([a_data, b_data], profile_of, limited={"node1"})
    assert "(10.0.0.11:22)" in str(refused.value) and said in str(refused.value), str(refused.value)


def test_both_hooking_the_system_interpreter_is_refused():
    system = {"hook": {"system_wide": True}}
    hosts = [
        node_host("node1", profile_overrides=system),
        node_host("node1-b", SERVICE_B, profile_overrides=system),
    ]
    with pytest.raises(DeployError, match=r"start-up hook into the system interpreter \(hook.system_wide\)"):
        shared_nodes.checked(hosts, profile_of)


def test_a_model_directory_one_of_them_stages_is_refused_one_the_other_only_reads_is_not():
    # The sandbox profile stages its model from the controller.
    hosts = [node_host("node1", model="/models/m"), node_host("node1-b", SERVICE_B, model="/models/m")]
    with pytest.raises(DeployError, match="node1 stages the model directory /models/m, which node1-b reads"):
        shared_nodes.checked(hosts, profile_of, limited={"node1"})
    in_place = {"model": {"path": "/models/m", "source": "path"}}
    hosts = [
        node_host("node1", profile_overrides=in_place),
        node_host("node1-b", SERVICE_B, profile_overrides=in_place),
    ]
    assert set(shared_nodes.checked(hosts, profile_of, limited={"node1"})) == {"node1", "node1-b"}


def test_two_services_of_one_node_in_one_run_are_refused_one_per_run_is_not():
    hosts = [node_host("node1"), node_host("node1-b", SERVICE_B)]
    with pytest.raises(DeployError, match="deploy one of them per run") as refused:
        shared_nodes.checked(hosts, profile_of)
    assert "--limit node1, then --limit node1-b" in str(refused.value)
    for limited in ({"node1"}, {"node1-b"}):
        assert set(shared_nodes.checked(hosts, profile_of, limited)) == {"node1", "node1-b"}


def test_hosts_of_one_address_on_other_ssh_ports_are_other_nodes_and_routers_are_left_out():
    # Sandbox nodes share 127.0.0.1, each behind an SSH port of its own.
    hosts = [node_host("node1", ssh_port=2201), node_host("node2", ssh_port=2202)]
    hosts.append(("router1", {"ssh_hostname": "10.0.0.11", "role": "router"}))
    assert shared_nodes.checked(hosts, profile_of) == {}


def test_a_deploy_checks_the_inventory_once_per_run(monkeypatch):
    from pyinfra.context import ctx_state

    from sglang_deploy.steps import node as steps

    inventory = [
        SimpleNamespace(name=name, data=data)
        for name, data in (node_host("node1"), node_host("node1-b", SERVICE_B))
    ]
    monkeypatch.setattr(steps, "inventory", inventory)
    monkeypatch.setattr(steps, "host", SimpleNamespace(name="node1-b"))
    state = SimpleNamespace(is_host_in_limit=lambda h: h.name == "node1-b")
    with ctx_state.use(state):
        assert steps.node_units() == ("sglang-b.service", "sglang.service")
        inventory.append(SimpleNamespace(name="node1-c", data=node_host("node1-c", SERVICE_B)[1]))
        assert steps.node_units() == ("sglang-b.service", "sglang.service")  # checked once
    inventory.pop()
    state = SimpleNamespace(is_host_in_limit=lambda h: True)
    with ctx_state.use(state), pytest.raises(DeployError, match="node1 and node1-b are one node"):
        steps.node_units()


# -- The node's one ACS unit: ordered before every service of the node ----------------------------


def test_the_acs_unit_orders_itself_before_every_service_of_the_node_and_verify_accepts_it():
    one = acs_unit_text("/opt/sglang-deploy/node", "sglang.service")
    assert "Before=sglang.service multi-user.target\n" in one  # as it always was
    both = acs_unit_text("/opt/sglang-deploy/node", "sglang.service", "sglang-b.service")
    assert "Before=sglang-b.service sglang.service multi-user.target\n" in both
    assert acs_unit_services(both) == ["sglang-b.service", "sglang.service"]
    for name, installed, state in (("node1-b", both, OK), ("node1-b", one, FAILED)):
        found = gpu_checks.acs_unit(AcsNode(installed), plan(node_host(name, SERVICE_B, **ACS)[1]))
        assert found.state == state, found.detail


ACS = {"profile_overrides": {"pcie": {"disable_acs": True}}}


class AcsNode:
    """A node whose ACS unit is ``text``, enabled and run (what verify asks over testinfra)."""

    def __init__(self, text):
        self.text = text

    def file(self, path):
        return SimpleNamespace(exists=True, content_string=self.text)

    def run(self, command):
        if command.startswith("systemctl show"):
            return SimpleNamespace(rc=0, stdout="UnitFileState=enabled\nActiveState=active\nResult=success\n")
        return SimpleNamespace(rc=0, stdout="")
