"""Hosts files and sandbox state read into (name, data) pairs, with clear errors."""

import json
import subprocess
import sys

import pytest

from sglang_deploy.errors import DeployError
from sglang_deploy.plan.hosts import REPO_ROOT, gpu_hosts, sandbox_hosts
from sglang_deploy.profile.schema import load_profile


def test_example_hosts_file_is_valid_and_layers_defaults():
    hosts = dict(gpu_hosts(REPO_ROOT / "inventory" / "hosts.example.yml"))
    assert hosts["gpu-node-01"] == {
        "ssh_user": "root",
        "ssh_key": "~/.ssh/id_ed25519",
        "profile": "baseline",
        "ssh_hostname": "10.20.0.11",
    }
    assert hosts["gpu-node-02"]["profile"] == "eagle3-2step"
    assert hosts["gpu-node-03"]["profile_overrides"] == {"service": {"port": 30010}}


@pytest.mark.parametrize(
    "text, message",
    [
        ("hosts: [unclosed", "invalid YAML"),
        ("hosts:\n  a:\n    ssh_prot: 22\n", "hosts.a.ssh_prot: unknown key (did you mean 'ssh_port'?)"),
        (
            "hosts:\n  a:\n    ssh_port: 70000\n",
            "hosts.a.ssh_port: Input should be less than or equal to 65535",
        ),
        ("defaults: {}\n", "hosts: Field required"),
        ("hosts: {}\n", "no hosts listed under 'hosts:'"),
    ],
)
def test_bad_hosts_files_say_what_is_wrong(tmp_path, text, message):
    path = tmp_path / "hosts.yml"
    path.write_text(text)
    with pytest.raises(DeployError) as caught:
        gpu_hosts(path)
    assert message in str(caught.value) and str(path) in str(caught.value)


def test_a_host_written_twice_is_refused_naming_both_lines(tmp_path):
    # YAML keeps the last of two equal keys: the first host would be neither deployed nor a
    # router's worker, and nothing would say so.
    path = tmp_path / "hosts.yml"
    path.write_text(
        "hosts:\n  node1:\n    profile: baseline\n  node2: {}\n  node1:\n    profile: eagle3-2step\n"
    )
    with pytest.raises(DeployError) as caught:
        gpu_hosts(path)
    assert str(caught.value) == f"{path}:5: duplicate key 'node1' (first on line 2)"


def test_profile_overrides_keep_yaml_1_1_numbers_as_written(tmp_path):
    path = tmp_path / "hosts.yml"
    path.write_text(
        "defaults:\n  profile_overrides:\n    env: {UMASK: 0755}\n"
        "hosts:\n  node1:\n    profile: baseline\n    profile_overrides:\n"
        "      env: {UMASK: 0755, VERSION: 12.10, COUNT: 8}\n"
        "      server_args: {max-prefill-tokens: 0042, tp-size: 8}\n"
        "      service: {port: 30010}\n"
    )
    hosts = gpu_hosts(path)
    overrides = dict(hosts)["node1"]["profile_overrides"]
    assert overrides["env"] == {"UMASK": "0755", "VERSION": "12.10", "COUNT": 8}
    assert overrides["server_args"] == {"max-prefill-tokens": "0042", "tp-size": 8}
    assert overrides["service"] == {"port": 30010}
    profile = load_profile("baseline", overrides=overrides)
    assert (profile.env["UMASK"], profile.env["VERSION"]) == ("0755", "12.10")
    argv = profile.argv()
    assert argv[argv.index("--max-prefill-tokens") + 1] == "0042" and profile.tp_size == 8


def test_a_yaml_1_1_boolean_in_profile_overrides_is_refused_with_its_line(tmp_path):
    path = tmp_path / "hosts.yml"
    path.write_text("hosts:\n  node1:\n    profile_overrides:\n      server_args: {enable-x: on}\n")
    with pytest.raises(DeployError) as caught:
        gpu_hosts(path)
    assert str(caught.value).startswith(f"{path}:4: server_args.enable-x: 'on' is a YAML 1.1 boolean")


def test_missing_hosts_file_is_one_line_and_exit_1(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "pyinfra", "-y", "inventory/gpu.py", "deploy.py"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env={"SGLANG_DEPLOY_HOSTS": str(tmp_path / "none.yml"), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 1
    assert f"sglang-deploy: hosts file {tmp_path / 'none.yml'} not found" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_sandbox_state_gives_each_node_its_port_and_chosen_profile(tmp_path, monkeypatch):
    state = tmp_path / "state.json"
    state.write_text(
        json.dumps(
            {
                "key": "/k",
                "nodes": [
                    {
                        "name": "node1",
                        "ssh_host": "127.0.0.1",
                        "ssh_port": 2201,
                        "ssh_user": "root",
                        "server_port": 30001,
                    },
                    {
                        "name": "node2",
                        "ssh_host": "127.0.0.1",
                        "ssh_port": 2202,
                        "ssh_user": "root",
                        "server_port": 30002,
                    },
                ],
            }
        )
    )
    monkeypatch.setenv("SGLANG_DEPLOY_SANDBOX_PROFILES", "node2=sandbox-eagle3")
    hosts = dict(sandbox_hosts(state))
    assert hosts["node1"]["profile"] == "sandbox"
    assert hosts["node2"]["profile"] == "sandbox-eagle3"
    assert hosts["node2"]["profile_overrides"] == {"service": {"port": 30002}}
    assert (hosts["node1"]["ssh_port"], hosts["node1"]["ssh_key"]) == (2201, "/k")


def test_sandbox_profile_choices_must_be_node_equals_profile(tmp_path, monkeypatch):
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"key": "/k", "nodes": []}))
    monkeypatch.setenv("SGLANG_DEPLOY_SANDBOX_PROFILES", "node1")
    with pytest.raises(DeployError, match="expected NODE=PROFILE"):
        sandbox_hosts(state)
