"""The registry of verify checks: every check is a column of the per-host table, a line of
reports/verify.json and a test of tests/host; what a check asserts, against a fake node."""

import json
import secrets
from dataclasses import dataclass, field

import pytest

from sglang_deploy.plan.host_plan import plan_for
from sglang_deploy.verify import checks, env_checks, service_checks, summary
from sglang_deploy.verify.verdict import FAILED, OK, WARNING

SECRET = "hf_" + secrets.token_hex(16)
HOST_DATA = {
    "profile": "baseline",
    "sglang_deploy_dir": "/opt/d",
    "env_dir": "/etc/s",
    "unit_dir": "/etc/systemd/system",
    "state_dir": "/var/lib/d",
    "deploy_lock_wait_s": 1,
    "rollback": True,
    "repair": False,
}


@dataclass
class Result:
    rc: int
    stdout: str = ""
    stderr: str = ""


@dataclass
class File:
    path: str
    exists: bool = True
    user: str = "root"
    group: str = "root"
    mode: int = 0o600
    content_string: str = ""


@dataclass
class Node:
    """A testinfra-like host: files by path, command outputs by a word of the command."""

    files: dict = field(default_factory=dict)
    outputs: dict = field(default_factory=dict)
    listening: bool = True
    running: bool = True

    def file(self, path):
        return self.files.get(path, File(path, exists=False))

    def run(self, command):
        return next((result for word, result in self.outputs.items() if word in command), Result(1))

    def socket(self, spec):
        return type("Socket", (), {"is_listening": self.listening})()

    def service(self, name):
        return type("Service", (), {"is_enabled": True, "is_running": self.running})()


@pytest.fixture
def plan(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", SECRET)
    return plan_for(HOST_DATA)


def deployed(plan, **changes):
    """A node as the deploy leaves it (files only), with ``changes`` to its files."""
    files = {
        plan.settings.env_dir: File(plan.settings.env_dir, mode=0o700),
        plan.env_path: File(plan.env_path, content_string=plan.env_text),
        f"{plan.settings.unit_dir}/{plan.unit}": File(
            f"{plan.settings.unit_dir}/{plan.unit}", mode=0o644, content_string=plan.unit_text
        ),
    }
    return Node(files={**files, **changes}, outputs={"systemd-analyze": Result(0)})


def test_every_registered_check_is_a_column_of_the_table():
    every = [entry.name for entry in checks.REGISTRY]
    assert len(set(every)) == len(every) and len({e.id for e in checks.REGISTRY}) == len(every)
    names = [entry.name for entry in checks.of_kind(checks.NODE)]
    report = {
        "host": "node1",
        "profile": "p",
        "last_passed_gate": "p",
        "checks": [{"name": name, "state": FAILED, "detail": "x"} for name in names],
    }
    row = dict(zip(summary.COLUMNS, summary.row(report)))
    assert list(row)[:3] == ["host", "checked against", "last passed gate"]
    for entry in checks.of_kind(checks.NODE):
        if entry.name != "last good":
            assert row[entry.column] == FAILED, entry.name
    assert set(summary.COLUMNS) >= {"env file", "unit", "hook", "serving", "workers' env"}


def test_every_registered_check_runs_and_no_detail_carries_a_secret(plan):
    """A node whose every answer holds the secret: each check still gives a verdict, redacted."""
    leaky = Result(1, "", f"error: {SECRET}; HF_TOKEN={SECRET}")
    node = Node(
        files={
            path: File(path, content_string=f"HF_TOKEN={SECRET}\n")
            for path in (plan.env_path, plan.settings.env_dir)
        },
        outputs={"": leaky},
        listening=False,
    )
    found = checks.host_checks(node, plan)
    registered = [e.name for e in checks.of_kind(checks.NODE)]
    assert [c.name for c in found if c.name in registered] == registered
    assert not any(SECRET in c.detail for c in found), [c.line() for c in found]
    assert {c.name: c.state for c in found}["env file"] == FAILED


def test_env_file_check_asserts_modes_and_every_value(plan):
    assert env_checks.env_file(deployed(plan), plan).state == OK
    name = next(iter(plan.profile.hook_vars()))
    edited = plan.env_text.replace(f'{name}="', f'{name}="edited-')
    found = env_checks.env_file(
        deployed(
            plan,
            **{
                plan.settings.env_dir: File(plan.settings.env_dir, mode=0o755),
                plan.env_path: File(plan.env_path, mode=0o644, content_string=edited),
            },
        ),
        plan,
    )
    assert found.state == FAILED
    assert f"{plan.settings.env_dir} is 755 root, not 700 root" in found.detail
    assert f"{plan.env_path} is 644 root:root, not 600 root:root" in found.detail
    assert f"{name} is 'edited-" in found.detail and SECRET not in found.detail


def test_unit_check_asserts_content_verify_enabled_and_running(plan):
    assert env_checks.unit(deployed(plan), plan).state == OK
    path = f"{plan.settings.unit_dir}/{plan.unit}"
    node = deployed(plan, **{path: File(path, content_string=plan.unit_text.replace("Restart=", "#"))})
    node.running = False
    node.outputs["systemd-analyze"] = Result(1, stderr="Unknown key")
    found = env_checks.unit(node, plan)
    assert found.state == FAILED
    assert "differs from the profile's rendering" in found.detail and "-#" in found.detail
    assert "systemd-analyze verify: Unknown key" in found.detail and "not running" in found.detail


def test_serving_needs_the_port_listening_on_every_address(plan):
    ready = json.dumps({"health": 200, "models": [plan.profile.model.served_name], "ready": True})
    node = Node(outputs={"urllib": Result(0, ready)})
    assert service_checks.serving(node, plan).state == OK
    node.listening = False
    assert service_checks.serving(node, plan).state == FAILED
    assert "nothing listens on 0.0.0.0" in service_checks.serving(node, plan).detail


def test_workers_env_needs_tp_size_schedulers_each_with_every_variable(plan):
    worker = {"pid": 7, "title": "sglang::scheduler_TP0", "ok": True, "error": None, "mismatches": []}
    report = {"status": 0, "message": None, "workers": [worker]}
    found = env_checks.workers_env(Node(outputs={"workers.py": Result(0, json.dumps(report))}), plan)
    assert found.state == FAILED and found.detail == "1 schedulers, tp-size 8"
    name = next(iter(plan.profile.hook_vars()))
    worker = {**worker, "ok": False, "mismatches": [{"var": name, "expected": "a", "actual": "b"}]}
    report = {"status": 7, "message": None, "workers": [worker] * 8}
    found = env_checks.workers_env(Node(outputs={"workers.py": Result(0, json.dumps(report))}), plan)
    assert found.state == FAILED and f"pid 7: {name} is 'b', expected 'a'" in found.detail


def test_hook_check_asserts_site_dir_every_value_and_precedence(plan):
    site = "/opt/sglang/venv/lib/python3.11/site-packages"
    env = plan.profile.hook_vars()
    name = next(iter(env))
    probe = lambda env: Result(0, json.dumps({"hook": f"{site}/sglang_deploy_env.py", "env": env}))  # noqa: E731
    node = Node(
        outputs={
            f"env -i {name}=set-by-caller": probe({**env, name: "set-by-caller"}),
            "env -i": probe(env),
            "getsitepackages": Result(0, json.dumps([site])),
        }
    )
    assert env_checks.hook(node, plan).state == OK
    node.outputs[f"env -i {name}=set-by-caller"] = probe(env)
    found = env_checks.hook(node, plan)
    assert found.state == FAILED and f"the hook overrides {name} that the caller set" in found.detail
    node.outputs["env -i"] = Result(0, json.dumps({"hook": None, "env": {}}))
    assert "did not import sglang_deploy_env" in env_checks.hook(node, plan).detail


def test_last_good_asserts_its_env_copy_is_private_and_still_names_the_profile(plan):
    directory = plan.scripts.last_good_dir
    manifest = json.dumps({"profile": "baseline", "saved_at": "2026-11-30 19:00:00 UTC"})
    node = Node(
        files={
            directory: File(directory, mode=0o700),
            directory.rsplit("/", 1)[0]: File(directory.rsplit("/", 1)[0], mode=0o755),
            f"{directory}/env": File(f"{directory}/env", mode=0o644),
        },
        outputs={"manifest.json": Result(0, manifest)},
    )
    found = service_checks.last_good(node, plan)
    assert found.state == FAILED and f"{directory}/env is 644 root:root, not 600 root:root" in found.detail
    assert checks.last_passed({"last good": found.as_json()}) == "baseline"
    node.files[f"{directory}/env"].mode = 0o600
    assert service_checks.last_good(node, plan).state == OK


def test_nothing_to_check_is_a_warning_that_does_not_apply(plan):
    for found in (service_checks.last_good(Node(), plan), service_checks.last_start(Node(), plan)):
        assert found.state == WARNING and not found.applies


def group_plans():
    from sglang_deploy.plan import serving_group

    data = {
        **HOST_DATA,
        "serving_group": "g1",
        "profile_overrides": {"server_args": {"tp-size": 8, "nnodes": 2}},
    }
    hosts = [("node1", {**data, "ssh_hostname": "10.0.0.1"}), ("node2", {**data, "ssh_hostname": "10.0.0.2"})]
    members = serving_group.resolve_checked(hosts, serving_group.profile_of)
    return {name: plan_for(data, operator_env={}, member=members[name]) for name, data in hosts}


def test_a_followers_dummy_health_is_its_serving_and_the_group_is_judged_at_rank_0():
    follower = group_plans()["node2"]
    dummy = json.dumps({"health": 200, "models": [], "ready": False})
    found = service_checks.serving(Node(outputs={"urllib": Result(0, dummy)}), follower)
    assert found.state == OK and "rank 0 node1 serves the API" in found.detail
    # The same answer from rank 0 is no readiness.
    assert (
        service_checks.serving(Node(outputs={"urllib": Result(0, dummy)}), group_plans()["node1"]).state
        == FAILED
    )
    ready = json.dumps({"health": 200, "models": [follower.profile.model.served_name], "ready": True})
    node = Node(outputs={"http://10.0.0.1:30000 ": Result(0, ready), "urllib": Result(0, dummy)})
    found = service_checks.serving_group(node, follower)
    assert found.state == OK
    assert found.detail.startswith("group g1 node-rank 1 of 2: rank 0 node1 serves")
    found = service_checks.serving_group(Node(outputs={"urllib": Result(0, dummy)}), follower)
    assert found.state == FAILED and "rank 0 node1 does not serve at 10.0.0.1:30000" in found.detail


def test_a_group_member_runs_its_share_of_the_schedulers_and_a_lone_host_has_no_group(plan):
    worker = {"pid": 7, "title": "sglang::scheduler_TP4", "ok": True, "error": None, "mismatches": []}
    report = json.dumps({"status": 0, "message": None, "workers": [worker] * 4})
    assert (
        env_checks.workers_env(Node(outputs={"workers.py": Result(0, report)}), group_plans()["node2"]).state
        == OK
    )
    alone = service_checks.serving_group(Node(), plan)
    assert (alone.state, alone.detail) == (OK, "serves alone (no serving_group)")
    assert service_checks._group_cell({"serving group": alone.as_json()}) == "-"


def test_the_table_shows_each_members_rank_and_the_groups_verdict():
    follower = group_plans()["node2"]
    found = service_checks.serving_group(Node(), follower).as_json()
    assert service_checks._group_cell({"serving group": found}) == "g1 rank 1/2: failed"
    # The cell reads the check's data, never its prose: a detail that reads like a rank is none.
    prose = {"state": OK, "detail": "group g9 node-rank 5 of 6", "data": {}}
    assert service_checks._group_cell({"serving group": prose}) == "-"


def test_what_the_table_reads_of_a_check_is_redacted_like_its_detail(plan):
    """A check's data (here the profile a node's last good names) is node output too."""
    directory = plan.scripts.last_good_dir
    manifest = json.dumps({"profile": f"leak-{SECRET}", "saved_at": "2026-11-30 19:00:00 UTC"})
    node = Node(
        files={
            directory: File(directory, mode=0o700),
            directory.rsplit("/", 1)[0]: File(directory.rsplit("/", 1)[0], mode=0o755),
            f"{directory}/env": File(f"{directory}/env", mode=0o600),
        },
        outputs={"manifest.json": Result(0, manifest)},
    )
    found = service_checks.last_good(node, plan)
    assert found.data["profile"] == "leak-***" and SECRET not in json.dumps(found.as_json())
    assert checks.last_passed({"last good": found.as_json()}) == "leak-***"


def test_the_last_start_cell_is_the_time_to_ready_not_the_whole_detail(plan):
    report = {
        "status": 0,
        "status_name": "READY",
        "elapsed_s": 12.34,
        "phases": {"loading": 10.0, "ready": 12.34},
    }
    found = service_checks.last_start(Node(outputs={"gate": Result(0, json.dumps(report))}), plan)
    assert found.detail == "ready in 12.3s (loading 10.0s)"
    assert service_checks._last_start_cell({"last start": found.as_json()}) == "ready in 12.3s"


def test_the_columns_follow_the_subjects_whatever_was_imported_first():
    modules = [entry.function.__module__.rsplit(".", 1)[1] for entry in checks.REGISTRY]
    assert modules == sorted(modules, key=checks.SUBJECTS.index)
    assert [e.name for e in checks.REGISTRY][:4] == ["last good", "serving", "serving group", "last start"]


def test_router_and_monitoring_checks_are_of_their_kind_in_the_one_registry():
    by_kind = {kind: [e.name for e in checks.of_kind(kind)] for kind in (checks.ROUTER, checks.MONITORING)}
    assert by_kind == {
        checks.ROUTER: ["router packages", "router unit", "router workers"],
        checks.MONITORING: ["prometheus package", "prometheus configuration", "prometheus targets"],
    }
    assert [e.id for e in checks.of_kind(checks.ROUTER)] == [
        "router-packages",
        "router-unit",
        "router-workers",
    ]
    assert {e.kind for e in checks.REGISTRY} == {checks.NODE, checks.ROUTER, checks.MONITORING}
    assert not set(summary.COLUMNS) & set(by_kind[checks.ROUTER] + by_kind[checks.MONITORING])
    with pytest.raises(ValueError):
        checks.verify_check("x", kind="gateway")


def test_a_locked_engine_s_venv_is_the_one_named_after_its_lock():
    from sglang_deploy.verify import engine_checks

    plan = plan_for({**HOST_DATA, "profile": "sandbox"}, operator_env={})
    assert plan.locked is not None
    wanted = plan.venv_for("3.11.2")
    node = Node(
        outputs={
            "platform.python_version": Result(0, "3.11.2\n"),
            "readlink -f": Result(0, wanted + "\n"),
            "systemctl show": Result(0, "MainPID=442\n"),
            "readlink /proc/442/exe": Result(0, wanted + "/bin/python\n"),
        }
    )
    found = engine_checks.engine_venv(node, plan)
    assert found.state == OK and wanted.rsplit("/", 1)[1] in found.detail


def test_the_gpu_checks_judge_one_passport_collected_on_the_node(plan):
    from sglang_deploy.verify import gpu_checks

    collected = {
        "gpus": {"not_checked": "nvidia-smi not found"},
        "topology": {"not_checked": "nvidia-smi not found"},
        "acs": {"bridges": [{"bdf": "0000:00:01.0", "control": "0000"}]},
        "iommu": {"sysfs": [], "cmdline": ""},
    }
    asked = []

    class Counting(Node):
        def run(self, command):
            asked.append(command)
            return super().run(command)

    node = Counting(
        outputs={"passport.py collect": Result(0, json.dumps({"status": 0, "passport": collected}))}
    )
    found = gpu_checks.gpus(node, plan)
    assert [c.line() for c in found] == [
        "gpus: not checked (nvidia-smi missing)",
        "gpu topology: not checked (nvidia-smi missing)",
        "pcie acs: ok - ACS disabled on 1 device",
        "iommu: ok - off",
    ]
    assert asked == [f"python3 {plan.scripts.directory}/passport.py collect"]
    nothing = gpu_checks.gpus(Node(outputs={"passport.py": Result(2, "", "python3: can't open file")}), plan)
    assert {c.state for c in nothing} == {"not checked (passport.py missing)"}
    assert nothing[0].detail == "passport.py collect printed no passport: python3: can't open file"
