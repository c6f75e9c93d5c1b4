"""The state a deploy leaves on a node, asserted from the outside."""

import json
import shlex

import pytest

from sglang_deploy import checks
from sglang_deploy.envfile import parse_env_file

# Run on the node with an empty environment, so only the start-up hook can set variables.
HOOK_PROBE = (
    "import json, os, sys; "
    "hook = sys.modules.get('sglang_deploy_env'); "
    "print(json.dumps({'hook': hook and hook.__file__, 'env': dict(os.environ)}))"
)


def test_env_file_is_private_and_rendered_from_the_profile(node):
    env_dir = node.host.file(node.plan.env_dir)
    assert (env_dir.user, env_dir.mode) == ("root", 0o700)
    env_file = node.host.file(node.plan.env_path)
    assert (env_file.user, env_file.group, env_file.mode) == ("root", "root", 0o600)
    on_node = node.env_file()
    expected = parse_env_file(node.plan.env_text)
    for name in node.plan.profile.hook_vars():
        assert on_node.get(name) == expected[name], f"{name} differs in {node.plan.env_path}"
    # The secrets the operator exported are there (by name: values never appear in a report).
    for name in node.plan.profile.secrets:
        if name in expected:
            assert name in on_node, f"secret {name} missing from {node.plan.env_path}"


def test_last_known_good_copy_of_the_env_file_is_as_private(node):
    """The last configuration that passed the gate keeps a copy of the env file (secrets
    included) for rollback: root-only like the original."""
    last_good = node.host.file(node.plan.scripts.last_good_dir)
    if not last_good.exists:
        pytest.skip(f"{node.name}: no configuration has passed the gate here yet")
    state_dir = node.host.file(last_good.path.rsplit("/", 1)[0])
    assert (last_good.user, last_good.mode) == ("root", 0o700)
    assert state_dir.user == "root" and not state_dir.mode & 0o022
    copy = node.host.file(f"{last_good.path}/env")
    assert (copy.user, copy.group, copy.mode) == ("root", "root", 0o600)


def test_unit_is_valid_enabled_and_active(node):
    unit_path = f"{node.plan.unit_dir}/{node.plan.unit}"
    assert node.host.file(unit_path).content_string == node.plan.unit_text
    node.run_ok("systemd-analyze verify %s", unit_path)
    service = node.host.service(node.plan.profile.service.name)
    assert service.is_enabled
    assert service.is_running


def test_port_listens_and_server_is_ready(node):
    port = str(node.plan.profile.service.port)
    assert node.host.socket(f"tcp://0.0.0.0:{port}").is_listening
    health = node.run_ok("curl -s -o /dev/null -w '%%{http_code}' -m 5 http://127.0.0.1:%s/health", port)
    assert health.strip() == "200"
    models = json.loads(node.run_ok("curl -s -m 5 http://127.0.0.1:%s/v1/models", port))
    assert node.plan.profile.model.served_name in [m["id"] for m in models["data"]]


def test_hook_is_what_the_venv_interpreter_really_imports(node):
    python = f"{node.plan.profile.engine.venv}/bin/python"
    probe = json.loads(node.run_ok(f"env -i {python} -c {shlex.quote(HOOK_PROBE)}"))
    probe["env"] = node.redact.mapping(probe["env"])
    assert probe["hook"], "the venv interpreter did not import sglang_deploy_env at start-up"
    site_dirs = json.loads(node.run_ok(
        f"{python} -c 'import json, site; print(json.dumps(site.getsitepackages()))'"))
    assert probe["hook"].rsplit("/", 1)[0] in site_dirs
    for name, value in node.plan.profile.hook_vars().items():
        assert probe["env"].get(name) == value, f"fresh {python}: {name}"


def test_hook_leaves_variables_already_set_alone(node):
    python = f"{node.plan.profile.engine.venv}/bin/python"
    name = next(iter(node.plan.profile.hook_vars()))
    probe = json.loads(node.run_ok(f"env -i {name}=set-by-caller {python} -c {shlex.quote(HOOK_PROBE)}"))
    probe["env"] = node.redact.mapping(probe["env"])
    assert probe["env"][name] == "set-by-caller"


def test_every_scheduler_carries_the_profile_environment(node):
    main_pid = node.run_ok("systemctl show -p MainPID --value %s", node.plan.unit).strip()
    processes = [line.split(None, 2) for line in node.run_ok("ps -e -o pid=,ppid=,args=").splitlines()]
    schedulers = [pid for pid, ppid, args in processes
                  if ppid == main_pid and args.startswith("sglang::scheduler")]
    assert len(schedulers) == int(node.plan.profile.server_args.get("tp-size", 1))
    for pid in schedulers:
        pairs = node.environ(pid)
        for name, value in node.plan.profile.hook_vars().items():
            assert pairs.get(name) == value, f"scheduler pid {pid}: {name}"


def test_installed_engine_matches_the_pins(node):
    python = f"{node.plan.profile.engine.venv}/bin/python"
    for pin in node.plan.profile.engine.packages:
        name, _, version = pin.partition("==")
        installed = node.run_ok(
            f"{python} -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' %s", name)
        assert installed.strip() == version


def test_engine_files_match_their_wheels(node):
    check = checks.drift(node.host, node.plan)
    assert check.state == "ok", f"{node.name}: {check.line()}"


def test_nccl_confirms_the_profile_values_on_every_rank(node):
    check = checks.nccl_confirmation(node.host, node.plan)
    if check.state == "warning":
        pytest.skip(f"{node.name}: {check.line()}")
    assert check.state == "ok", f"{node.name}: {check.line()}"


def test_gpu_and_pcie_health(node):
    found = checks.gpus(node.host, node.plan)
    failed = [check.line() for check in found if check.state == "failed"]
    assert not failed, f"{node.name}: {failed}"
    unchecked = [check.line() for check in found if not check.checked]
    if len(unchecked) == len(found):
        pytest.skip(f"{node.name}: {'; '.join(unchecked)}")


def test_the_last_start_passed_the_readiness_gate(node):
    check = checks.last_start(node.host, node.plan)
    if "no gate report" in check.detail:
        pytest.skip(f"{node.name}: {check.line()}")
    assert check.state == "ok", f"{node.name}: {check.line()}"
