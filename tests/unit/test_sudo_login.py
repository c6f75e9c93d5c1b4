"""A login user with sudo (`ubuntu`, `admin`): every command our FunctionCommands and SSH
channels run gets the operation's privilege arguments (operations/remote.py), a secret reaches
the node on a command's stdin and never lands in a file another user can read (the shell script
runs here, for real), and `sudo: true` in a hosts file or the sandbox's state is pyinfra's
`_sudo`."""

import importlib
import os
import signal
import stat
import subprocess
import time
from types import SimpleNamespace

import pytest
from pyinfra.api import Config, FunctionCommand, Inventory, State, StringCommand
from pyinfra.api.command import FileUploadCommand
from pyinfra.connectors.util import CommandOutput, OutputLine, make_unix_command, write_stdin
from pyinfra.context import ctx_host

from sglang_deploy.errors import DeployError
from sglang_deploy.operations import group_restart, remote, rollout, service, streamed
from sglang_deploy.operations import model as model_ops
from sglang_deploy.plan import hosts
from sglang_deploy.plan.model_sources import HubClient, StagingTarget
from sglang_deploy.profile.schema import Source

# The module (the package's `deploy_lock` is the operation of the same name).
deploy_lock_ops = importlib.import_module("sglang_deploy.operations.deploy_lock")
SUDO = {"_sudo": True, "_sudo_user": None, "_sudo_password": "", "_use_sudo_login": False, "_su_user": None}
# What pyinfra's current_op_global_arguments also holds: none of it is ours to pass on.
NOT_PRIVILEGE = {"_env": {"A": "1"}, "_timeout": 5, "_success_exit_codes": [0], "_ignore_errors": False}


class Host:
    """A host in an operation run with ``arguments``; records every command with its keywords."""

    name = "node1"

    def __init__(self, arguments=None, lines=('{"status": 0}',)):
        self.current_op_global_arguments = arguments
        self.ran, self.lines = [], list(lines)
        self.data = {}  # host data: every setting at its default
        self.connector_data = {}

    def run_shell_command(self, command, **kwargs):
        self.ran.append((str(command), kwargs))
        return True, CommandOutput([OutputLine("stdout", line) for line in self.lines])

    def log(self, *args, **kwargs):
        pass

    log_styled = log


def test_the_privilege_arguments_are_the_current_operations_and_only_those():
    host = Host({**SUDO, **NOT_PRIVILEGE})
    assert remote.arguments(host) == {"_sudo": True}
    assert remote.arguments(Host({**SUDO, "_sudo_user": "svc", "_sudo_password": "pw"})) == {
        "_sudo": True,
        "_sudo_user": "svc",
        "_sudo_password": "pw",
    }
    assert remote.arguments(Host({"_sudo": False, **NOT_PRIVILEGE})) == {}  # root: run as before


def test_outside_an_operation_the_hosts_data_and_the_runs_config_decide():
    """A serving group's rank 0 runs commands on its followers: their own data says sudo."""
    inventory = Inventory((["node1", ("node2", {"_sudo": True})], {}))
    state = State(inventory, Config())
    assert remote.arguments(inventory.get_host("node2")) == {"_sudo": True}
    assert remote.arguments(inventory.get_host("node1")) == {}
    state.config.SUDO = True  # pyinfra --sudo
    assert remote.arguments(inventory.get_host("node1")) == {"_sudo": True}


def test_run_merges_them_into_the_command_and_lets_the_caller_win():
    host = Host(SUDO)
    remote.run(host, "id -u", print_output=True)
    remote.run(host, "true", _sudo=False)
    assert host.ran == [("id -u", {"_sudo": True, "print_output": True}), ("true", {"_sudo": False})]


@pytest.mark.parametrize(
    "call",
    [
        lambda host: streamed.run_streamed(host, "restart.py"),
        lambda host: service.run_cycle(host, "cycle.py"),
        lambda host: rollout._keep_previous(
            host,
            SimpleNamespace(restore_last_good=lambda: "lastgood.py restore"),
            SimpleNamespace(note=lambda *a: None),
            "stopped",
        ),
        lambda host: group_restart.run_on(host, "systemctl show sglang.service"),
    ],
    ids=["streamed script", "restart cycle", "last-good restore", "a group member's command"],
)
def test_every_command_a_function_command_runs_gets_the_operations_sudo(call, monkeypatch):
    monkeypatch.setattr(service.throughput, "took_note", lambda *a: None)
    monkeypatch.setattr(service.throughput, "took_restored_note", lambda *a: None)
    host = Host(SUDO, lines=["no result line"])
    call(host)
    assert host.ran and all(kwargs.get("_sudo") is True for _, kwargs in host.ran), host.ran


class Channel:
    def __init__(self, out, err=b""):
        self.out, self.err, self.command = out, err, None

    def exec_command(self, command):
        self.command = command

    def makefile(self, mode):
        return iter(self.out.splitlines(keepends=True))

    def makefile_stderr(self, mode):
        return iter(self.err.decode().splitlines(keepends=True))

    def recv_exit_status(self):
        return 1


def lock_host(channel, arguments):
    host = Host(arguments)
    transport = SimpleNamespace(open_session=lambda: channel)
    host.connector = SimpleNamespace(client=SimpleNamespace(get_transport=lambda: transport))
    host.state = None
    return host


def test_the_lock_helper_runs_through_sudo_on_its_own_channel():
    channel = Channel('{"event": "locked"}\n')
    with ctx_host.use(lock_host(channel, SUDO)):
        assert deploy_lock_ops._take_lock("/run/sglang-deploy/lock", 30, "me") is channel
    assert channel.command.startswith("sudo -H -n sh -c "), channel.command
    assert "--path /run/sglang-deploy/lock" in channel.command


def test_a_lock_helper_that_cannot_start_says_why():
    channel = Channel("", b"sudo: a password is required\n")
    with ctx_host.use(lock_host(channel, SUDO)):
        why = deploy_lock_ops._take_lock("/run/l", 30, "me")
    assert why == "lock helper exited with status 1: sudo: a password is required"


def test_rsync_becomes_root_on_the_node_only_where_it_can_by_itself():
    assert remote.rsync_path(Host({})) is None
    assert remote.rsync_path(Host(SUDO)) == "sudo -n rsync"
    assert remote.rsync_path(Host({**SUDO, "_sudo_password": "pw"})) is False  # per-file uploads
    assert remote.rsync_path(Host({"_su_user": "root"})) is False


def test_the_rsync_of_a_sudo_login_runs_the_nodes_rsync_through_sudo(tmp_path, monkeypatch):
    seen = {}

    def fake_run(argv, **kwargs):
        seen["argv"] = argv
        return SimpleNamespace(returncode=0, stderr="")

    monkeypatch.setattr(model_ops.subprocess, "run", fake_run)
    host = Host(SUDO)
    host.data = {"ssh_hostname": "10.0.0.1", "ssh_user": "ubuntu"}
    model_ops._rsync(None, host, "model", tmp_path, "/models/.m.staging", [{"path": "a", "size": 1}])
    assert (
        "--rsync-path=sudo -n rsync" in seen["argv"] and "ubuntu@10.0.0.1:/models/.m.staging/" in seen["argv"]
    )


# -- secrets on stdin --------------------------------------------------------------------------

SECRET = "hf_s3cr3t-VALUE"


def node_shell(command, root, sudo=False):
    """The command line pyinfra sends for ``command`` (sudo dropped: this runs as whoever runs
    the tests), every absolute path moved under ``root``."""
    line = make_unix_command(command, _sudo=sudo).get_raw_value()
    line = line.replace("/etc/sglang", f"{root}/etc/sglang")
    if os.geteuid() != 0:
        line = line.replace("chown root:root", "true")
    return line


def stdin_bytes(command):
    """What pyinfra's SSH connector writes to the channel for ``_stdin``."""
    sink = SimpleNamespace(data=b"")
    sink.write = lambda b: setattr(sink, "data", sink.data + b)
    sink.close = lambda: None
    write_stdin(command.connector_arguments["_stdin"], sink)
    return sink.data


@pytest.fixture
def node(tmp_path):
    (tmp_path / "etc/sglang").mkdir(parents=True)
    os.chmod(tmp_path / "etc/sglang", 0o700)
    (tmp_path / "etc/sglang/s.env").write_text("OLD=1\n")
    return tmp_path


def files_under(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("content", [f"HF_TOKEN={SECRET}\n", f"HF_TOKEN={SECRET}", "", "x=é\n\n"])
def test_a_secret_lands_whole_and_private_and_only_in_its_place(node, content):
    command = remote.secret_write("/etc/sglang/s.env", content)
    sudo_line = make_unix_command(command, _sudo=True).get_raw_value()
    assert SECRET not in sudo_line and sudo_line.startswith("sudo -H -n sh -c ")  # never argv
    done = subprocess.run(
        ["sh", "-c", node_shell(command, node)], input=stdin_bytes(command), capture_output=True
    )
    assert done.returncode == 0, done.stderr
    dest = node / "etc/sglang/s.env"
    assert dest.read_bytes() == content.encode()  # exactly: no newline added
    assert stat.S_IMODE(dest.stat().st_mode) == 0o600
    assert files_under(node) == ["etc/sglang/s.env"]


def test_a_link_that_drops_midway_leaves_the_old_file_and_nothing_of_the_secret(node):
    command = remote.secret_write("/etc/sglang/s.env", f"HF_TOKEN={SECRET}\n" + "A=" + "x" * 4000 + "\n")
    data = stdin_bytes(command)
    done = subprocess.run(
        ["sh", "-c", node_shell(command, node)], input=data[: len(data) // 2], capture_output=True
    )
    assert done.returncode != 0 and b"arrived incomplete; nothing was written" in done.stderr
    assert SECRET.encode() not in done.stderr
    assert (node / "etc/sglang/s.env").read_text() == "OLD=1\n"
    assert files_under(node) == ["etc/sglang/s.env"]


def test_while_it_arrives_the_secret_is_in_a_0600_file_only_and_a_killed_write_leaves_none(node):
    command = remote.secret_write("/etc/sglang/s.env", f"HF_TOKEN={SECRET}\n")
    data = stdin_bytes(command)
    shell = subprocess.Popen(
        ["sh", "-c", node_shell(command, node)], stdin=subprocess.PIPE, start_new_session=True
    )
    shell.stdin.write(data[: len(data) - 8])  # all but the end: base64 -d is writing
    shell.stdin.flush()
    new = node / "etc/sglang/.s.env.sglang-deploy-new"
    deadline = time.monotonic() + 10
    while not new.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert stat.S_IMODE(new.stat().st_mode) == 0o600
    os.killpg(shell.pid, signal.SIGTERM)  # the sudo'd shell killed (the session ends)
    shell.wait(timeout=10)
    assert shell.returncode != 0
    while time.monotonic() < deadline:  # the inner shell (sudo's) cleans up as it ends
        try:
            os.killpg(shell.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.01)
    assert (node / "etc/sglang/s.env").read_text() == "OLD=1\n"
    assert files_under(node) == ["etc/sglang/s.env"]


def test_the_env_file_never_goes_through_an_upload(monkeypatch):
    from sglang_deploy.operations import files as files_ops

    class FileHost(Host):
        def get_fact(self, fact, **kwargs):
            return {}

        def noop(self, text):
            pass

    monkeypatch.setattr(files_ops, "_diff_wanted", lambda: False)
    with ctx_host.use(FileHost(SUDO)):
        commands = list(files_ops.secret_file._inner("/etc/sglang/s.env", f"HF_TOKEN={SECRET}\n"))
    assert not [c for c in commands if isinstance(c, FileUploadCommand)]
    assert all(SECRET not in (c if isinstance(c, str) else c.get_raw_value()) for c in commands)


def hub_commands(tmp_path, token=SECRET):
    class HubHost(Host):
        def get_fact(self, fact, **kwargs):
            if fact.__name__ == "File":
                return {"mode": 755}
            return {"source": None, "problems": [], "digest": None, "free": 10**12}

        def noop(self, text):
            pass

    target = StagingTarget("model", "/models/m", Source(huggingface={"repo": "org/m", "revision": "0" * 40}))
    hub = HubClient(python="/opt/hf/bin/python", run_dir="/run/sglang-deploy", token=token)
    with ctx_host.use(HubHost(SUDO)):
        return list(model_ops.model_staged._inner(target, "/opt/sd", hub=hub))


def test_the_hub_token_is_written_from_stdin_just_before_the_download_and_removed_after(tmp_path):
    commands = hub_commands(tmp_path)
    assert not [c for c in commands if isinstance(c, FileUploadCommand)]
    (finish,) = [c for c in commands if isinstance(c, FunctionCommand)]
    before, after = finish.kwargs["before"], finish.kwargs["after"]
    token_file = after.get_raw_value().split()[-1]
    assert token_file.startswith("/run/sglang-deploy/hub/token-")
    assert f'mv -f "$new" {token_file}' in before.get_raw_value() and SECRET not in before.get_raw_value()
    assert SECRET not in repr(finish)  # pyinfra may log a command's repr

    host = Host(SUDO, lines=['{"status": 0}'])
    assert model_ops._finish(None, host, "model", finish.args[1], **finish.kwargs)
    ran = [command for command, _ in host.ran]
    assert ran[0] == before.get_raw_value() and ran[-1] == f"rm -f {token_file}"
    assert all(kwargs.get("_sudo") for _, kwargs in host.ran)
    assert host.ran[0][1]["_stdin"] == before.connector_arguments["_stdin"]


def test_the_hub_token_is_removed_when_the_download_dies(tmp_path, monkeypatch):
    (finish,) = [c for c in hub_commands(tmp_path) if isinstance(c, FunctionCommand)]

    def link_drops(host, command):
        raise OSError("the SSH link dropped")

    monkeypatch.setattr(model_ops, "run_streamed", link_drops)
    host = Host(SUDO)
    with pytest.raises(OSError):
        model_ops._finish(None, host, "model", finish.args[1], **finish.kwargs)
    assert host.ran[-1][0] == finish.kwargs["after"].get_raw_value()


def test_the_hub_token_file_is_gone_whatever_the_download_did(tmp_path):
    """The download's own shell removes it too (a controller killed mid-download)."""
    (finish,) = [c for c in hub_commands(tmp_path) if isinstance(c, FunctionCommand)]
    assert "; status=$?; rm -f /run/sglang-deploy/hub/token-" in finish.args[1]


# -- hosts.yml and the sandbox ----------------------------------------------------------------


def write(tmp_path, text):
    path = tmp_path / "hosts.yml"
    path.write_text(text)
    return path


def test_sudo_true_in_a_hosts_file_is_pyinfras_sudo_per_host_or_from_defaults(tmp_path):
    path = write(
        tmp_path,
        "defaults: {ssh_user: ubuntu, sudo: true}\n"
        "hosts:\n  gpu1: {}\n  gpu2: {ssh_user: root, sudo: false}\n  gpu3: {sudo: yes}\n"
        "routers:\n  r1: {}\n",
    )
    found = dict(hosts.gpu_hosts(path))
    assert found["gpu1"]["_sudo"] is True and found["gpu1"]["ssh_user"] == "ubuntu"
    assert found["gpu2"]["_sudo"] is False
    assert found["gpu3"]["_sudo"] is True
    assert dict(hosts.gpu_routers(path))["r1"]["_sudo"] is True  # a router is logged into alike


def test_sudo_and_a_disagreeing_sudo_key_are_refused(tmp_path):
    path = write(tmp_path, "hosts:\n  gpu1: {sudo: true, _sudo: false}\n")
    with pytest.raises(DeployError, match="hosts.gpu1: sudo: True and _sudo: False disagree"):
        hosts.gpu_hosts(path)
    path = write(tmp_path, "hosts:\n  gpu1: {sudo: maybe}\n")
    with pytest.raises(DeployError, match="hosts.gpu1.sudo"):
        hosts.gpu_hosts(path)


def test_sudo_set_where_pyinfra_does_not_read_it_is_refused_before_any_host_is_touched():
    """--data sudo=true or group data: pyinfra would log in without sudo."""
    for data in ({"sudo": True}, {"sudo": "true"}, {"sudo": "True", "ssh_user": "ubuntu"}):
        with pytest.raises(DeployError, match="use pyinfra's --sudo, or `sudo: true`"):
            hosts.check_sudo_applies(data)
    hosts.check_sudo_applies({"sudo": True, "_sudo": True})  # hosts.yml, the sandbox's state
    hosts.check_sudo_applies({"sudo": True}, sudo_everywhere=True)  # pyinfra --sudo
    hosts.check_sudo_applies({"sudo": False})
    hosts.check_sudo_applies({"sudo": "false"})  # --data sudo=false
    hosts.check_sudo_applies({})


def test_a_sandbox_node_recorded_with_sudo_is_reached_as_its_login_user_with_sudo(tmp_path):
    import json

    node = {"name": "node1", "ssh_host": "127.0.0.1", "ssh_port": 2201, "server_port": 30001}
    state = {
        "key": "/k",
        "nodes": [
            dict(node, ssh_user="deploy", sudo=True),
            dict(node, name="node2", ssh_port=2202, server_port=30002, ssh_user="root", sudo=False),
            dict(
                node,
                name="node3",
                ssh_port=2203,
                server_port=30003,
                ssh_user="deploy",
                sudo=True,
                role="router",
            ),
        ],
    }
    (tmp_path / "state.json").write_text(json.dumps(state))
    found = dict(hosts.sandbox_hosts(tmp_path / "state.json"))
    assert found["node1"]["ssh_user"] == "deploy" and found["node1"]["_sudo"] is True
    assert found["node2"]["ssh_user"] == "root" and "_sudo" not in found["node2"]
    assert dict(hosts.sandbox_routers(tmp_path / "state.json"))["node3"]["_sudo"] is True


def test_make_verify_reads_a_sudo_logins_node_through_sudo(monkeypatch):
    import testinfra

    seen = {}
    monkeypatch.setattr(testinfra, "get_host", lambda url, **kwargs: seen.update(url=url, **kwargs))
    hosts.testinfra_host({"ssh_hostname": "h", "ssh_user": "ubuntu", "_sudo": True})
    assert seen["url"] == "paramiko://ubuntu@h:22" and seen["sudo"] is True
    hosts.testinfra_host({"ssh_hostname": "h"})
    assert seen["sudo"] is False


def test_a_string_command_keeps_its_stdin_through_run():
    host = Host(SUDO)
    remote.run(host, StringCommand("cat", _stdin="x\n"))
    assert host.ran == [("cat", {"_sudo": True, "_stdin": "x\n"})]


def test_a_function_command_sees_its_operations_sudo_in_a_real_pyinfra_run():
    """pyinfra itself (the local connector; nothing is run): while a FunctionCommand of an
    operation given `_sudo` executes, remote.arguments sees it."""
    from pyinfra.api import operation
    from pyinfra.api.connect import connect_all
    from pyinfra.api.operation import add_op
    from pyinfra.api.operations import run_ops

    seen = []

    def record(state, host):
        seen.append(remote.arguments(host))
        return True

    @operation()
    def probe():
        yield FunctionCommand(record, (), {})

    state = State(Inventory((["@local"], {})), Config())
    connect_all(state)
    add_op(state, probe, _sudo=True, _sudo_user="svc")
    run_ops(state)
    assert seen == [{"_sudo": True, "_sudo_user": "svc"}]
