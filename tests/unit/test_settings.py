"""Deploy settings (sglang_deploy/plan/settings/): an unknown key anywhere host data comes from
stops the deploy naming it, where it was set and the nearest setting; every default is written
once; docs/settings.md and docs/profile-keys.md stay current."""

import ast
import subprocess
import sys

import pytest
from pyinfra.api import Inventory

from sglang_deploy import docs
from sglang_deploy.errors import DeployError
from sglang_deploy.node import router_gate
from sglang_deploy.plan import settings
from sglang_deploy.plan.fleet_hosts import router_plan
from sglang_deploy.plan.host_plan import plan_for
from sglang_deploy.plan.hosts import REPO_ROOT, deploy_defaults, gpu_hosts, gpu_routers
from sglang_deploy.plan.settings import group_defaults, settings_of

NODE = {"profile": "baseline", "ssh_hostname": "10.0.0.11"}


def test_a_typo_in_host_data_names_the_key_and_the_nearest_setting():
    with pytest.raises(DeployError) as caught:
        plan_for({**deploy_defaults(), **NODE, "rolback": False}, operator_env={})
    assert str(caught.value) == "host data: rolback: unknown key (did you mean 'rollback'?)"
    with pytest.raises(DeployError, match=r"^r1: router_prot: unknown key \(did you mean 'router_port'\?\)$"):
        settings_of({"router_prot": 30000}, "r1")


def test_pyinfra_keys_and_every_setting_are_legal_and_unknown_values_are_never_shown():
    legal = {
        **group_defaults(),
        **NODE,
        "ssh_user": "root",
        "ssh_port": 2201,
        "ssh_key": "/k",
        "ssh_password": "hunter2",
        "ssh_strict_host_key_checking": "off",
        "ssh_known_hosts_file": "/dev/null",
        "_sudo": True,
    }
    assert settings_of(legal).ssh_port == 2201
    with pytest.raises(DeployError) as caught:
        settings_of({"ssh_pasword": "hunter2"})
    assert "did you mean 'ssh_password'?" in str(caught.value) and "hunter2" not in str(caught.value)


def test_each_layer_of_pyinfra_host_data_is_checked_and_named():
    """--data, a host's inventory entry, a group's data, group_data/all.py: the message says which."""

    def host_data(all_data=None, host=None, group=None, override=None):
        inventory = Inventory(
            ([("n1", {**NODE, **(host or {})})], {**group_defaults(), **(all_data or {})}),
            gpu=(["n1"], group or {}),
            override_data=override or {},
        )
        return inventory.get_host("n1").data

    assert settings_of(host_data(override={"repair": "true"}, group={"rolling_batch": 2})).repair is True
    cases = [
        (host_data(override={"rolback": False}), "--data: rolback: unknown key (did you mean 'rollback'?)"),
        (
            host_data(host={"venvs_kep": 1}),
            "host n1 in the inventory: venvs_kep: unknown key (did you mean 'venvs_keep'?)",
        ),
        (
            host_data(group={"rolling_bach": 2}),
            "group gpu's data (group_data/gpu.py or the inventory): rolling_bach",
        ),
        (
            host_data(all_data={"unit_dirs": "/x"}),
            "group all's data (group_data/all.py): unit_dirs: unknown key (did you mean 'unit_dir'?)",
        ),
        (
            host_data(override={"rolling_batch": 0}),
            "--data: rolling_batch: a count of at least 1 or a percentage such as '25%', got 0",
        ),
    ]
    for data, message in cases:
        with pytest.raises(DeployError) as caught:
            plan_for(data, operator_env={})
        assert message in str(caught.value)


def test_a_typo_in_group_data_all_py_fails(tmp_path):
    all_py = tmp_path / "all.py"
    all_py.write_text((REPO_ROOT / "group_data" / "all.py").read_text() + "\nrolback = False\n")
    with pytest.raises(DeployError, match=r"all.py: rolback: unknown key \(did you mean 'rollback'\?\)"):
        deploy_defaults(all_py)


@pytest.mark.parametrize(
    "text, message",
    [
        ("hosts:\n  a:\n    rolback: false\n", "hosts.a.rolback: unknown key (did you mean 'rollback'?)"),
        (
            "defaults: {venvs_kep: 2}\nhosts: {a: {}}\n",
            "defaults.venvs_kep: unknown key (did you mean 'venvs_keep'?)",
        ),
        (
            "hosts: {a: {}}\nrouters:\n  r1: {router_polcy: cache_aware}\n",
            "routers.r1.router_polcy: unknown key (did you mean 'router_policy'?)",
        ),
        (
            "hosts: {a: {}}\nfleet: {rolling_bach: 2}\n",
            "fleet.rolling_bach: unknown key (did you mean 'rolling_batch'?)",
        ),
        (
            "hosts: {a: {}}\nfleet: {rolling_batch: 0}\n",
            "fleet.rolling_batch: a count of at least 1 or a percentage",
        ),
        ("hosts: {a: {}}\nfleets: {}\n", "fleets: unknown key (did you mean 'fleet'?)"),
    ],
)
def test_an_unknown_key_in_a_hosts_file_names_it_and_suggests_the_nearest(tmp_path, text, message):
    path = tmp_path / "hosts.yml"
    path.write_text(text)
    with pytest.raises(DeployError) as caught:
        gpu_hosts(path)
    assert f"{path}: {message}" in str(caught.value)


def test_hosts_file_entries_take_any_setting_and_pyinfra_key(tmp_path):
    path = tmp_path / "hosts.yml"
    path.write_text(
        "defaults: {ssh_user: root, ssh_password: x, _sudo: true}\n"
        "hosts: {a: {rollback: false, venvs_keep: 1, serving_group: g, node_rank: 0}}\n"
        "routers: {r1: {router_gate_timeout_s: 30, unit_dir: /etc/systemd/system}}\n"
    )
    ((_, data),) = gpu_hosts(path)
    assert settings_of(data).rollback is False and settings_of(data).venvs_keep == 1
    ((_, router),) = gpu_routers(path)
    assert settings_of(router).router_gate_timeout_s == 30


def test_the_deploy_stops_before_any_operation_on_a_typo():
    done = subprocess.run(
        [sys.executable, "-m", "pyinfra", "-y", "--dry", "@local", "deploy.py", "--data", "rolback=false"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "sglang-deploy: @local: --data: rolback: unknown key (did you mean 'rollback'?)" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_group_data_all_py_takes_every_default_from_the_model():
    tree = ast.parse((REPO_ROOT / "group_data" / "all.py").read_text())
    assigned = [node for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign))]
    assert assigned == [], "group_data/all.py writes a default of its own: write it in plan/settings/"
    assert deploy_defaults() == group_defaults()
    assert set(group_defaults()) == set(settings.FIELDS) - {
        "ssh_hostname",
        "ssh_user",
        "ssh_port",
        "ssh_key",
        "sudo",
    }


def test_the_router_gate_timeout_is_the_settings_passed_explicitly():
    plan = router_plan("r1", [("r1", {"role": "router", "ssh_hostname": "10.0.0.5"})])
    assert "--timeout 120.0" in plan.gate("/opt/sglang-deploy/node")
    with pytest.raises(SystemExit):  # no default of its own to drift from the setting
        router_gate.main(["--url", "http://127.0.0.1:9"])


def test_the_unit_directory_is_spelled_once():
    found = []
    for path in [
        REPO_ROOT / "deploy.py",
        *REPO_ROOT.glob("group_data/*.py"),
        *REPO_ROOT.glob("sglang_deploy/**/*.py"),
    ]:
        tree = ast.parse(path.read_text())
        docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and "/etc/systemd/system" in node.value
                and id(node) not in docstrings
            ):
                found.append(str(path.relative_to(REPO_ROOT)))
    assert found == ["sglang_deploy/plan/settings/groups_node.py"]


def test_every_setting_and_profile_key_has_a_description():
    for text in (docs.settings_doc(), docs.profile_doc()):
        rows = [line for line in text.splitlines() if line.startswith("| `")]
        assert rows and [row for row in rows if row.endswith("|  |")] == []


@pytest.mark.parametrize(
    "path, render", [(docs.SETTINGS_DOC, docs.settings_doc), (docs.PROFILE_DOC, docs.profile_doc)]
)
def test_generated_docs_are_current(path, render):
    """The committed docs are what the models say (`make docs` rewrites them)."""
    assert path.read_text() == render(), f"{path.name} is not current: run `make docs`"


def test_each_group_is_a_view_of_the_settings_with_their_values():
    from sglang_deploy.plan import settings as s

    whole = s.validate({"router_port": 31000, "rolling_batch": "25%"})
    views = {name: getattr(whole, name) for name, value in vars(s.Settings).items() if hasattr(value, "func")}
    assert {type(view) for view in views.values()} == set(s.GROUPS)
    assert whole.router.router_port == 31000 and whole.rolling.rolling_batch == "25%"
    for view in views.values():
        assert all(getattr(view, name) == getattr(whole, name) for name in type(view).model_fields)


def test_a_hosts_settings_are_read_once_per_run_and_again_for_data_given_during_it():
    from pyinfra.api import State

    from sglang_deploy.run_state import host_settings

    inventory = Inventory(([("n1", NODE)], group_defaults()))
    State(inventory)
    host = inventory.get_host("n1")
    first = host_settings(host)
    assert host_settings(host.data) is first and first.rollback is True
    host.data.rollback = False
    second = host_settings(host)
    assert second.rollback is False and host_settings(host) is second
    host.data.rolback = True
    with pytest.raises(DeployError, match=r"^data host n1 was given during the deploy: rolback: unknown key"):
        host_settings(host)
    assert host_settings({"rollback": False}, "n2").rollback is False  # a plain mapping: settings_of's
