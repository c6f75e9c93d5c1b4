"""Pure logic of sandbox/sandbox.py: state file, ports, process checks (no root, no nodes)."""

import importlib.util
import json
import os
from pathlib import Path

import pytest

SANDBOX_PY = Path(__file__).resolve().parents[2] / "sandbox" / "sandbox.py"
_spec = importlib.util.spec_from_file_location("sandbox_tool", SANDBOX_PY)
sandbox = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sandbox)


def test_node_record_ports_and_paths(tmp_path):
    rec = sandbox.node_record(3, tmp_path, pid=42)
    assert rec == {
        "name": "node3",
        "machine": "node3",
        "ssh_host": "127.0.0.1",
        "ssh_port": 2203,
        "ssh_user": "root",
        "server_port": 30003,
        "pid": 42,
        "rootfs": str(tmp_path.resolve() / "nodes/node3/rootfs"),
        "console_log": str(tmp_path.resolve() / "nodes/node3/console.log"),
        "bare": False,
        "login_users": ["root", "deploy"],
        "sudo": False,
    }


def test_ports_are_distinct_per_node(tmp_path):
    recs = [sandbox.node_record(i, tmp_path) for i in range(1, 9)]
    ports = [r["ssh_port"] for r in recs] + [r["server_port"] for r in recs]
    assert len(set(ports)) == 16


@pytest.mark.parametrize("name,index", [("node1", 1), ("node12", 12)])
def test_node_index(name, index):
    assert sandbox.node_index(name) == index


@pytest.mark.parametrize("name", ["node", "nodeX", "box1", ""])
def test_node_index_rejects(name):
    with pytest.raises(ValueError):
        sandbox.node_index(name)


def test_state_round_trip_is_sorted_and_atomic(tmp_path):
    path = tmp_path / "state.json"
    nodes = [sandbox.node_record(i, tmp_path, pid=100 + i) for i in (10, 2, 1)]
    sandbox.write_state(path, tmp_path / "id_ed25519", nodes)
    state = sandbox.read_state(path)
    assert state["key"] == str(tmp_path / "id_ed25519")
    assert [n["name"] for n in state["nodes"]] == ["node1", "node2", "node10"]
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # no temp file left
    assert json.loads(path.read_text()) == state


def test_read_state_missing_is_empty(tmp_path):
    assert sandbox.read_state(tmp_path / "absent.json") == {"key": None, "nodes": []}


@pytest.mark.parametrize("text", ["{not json", "[]", '{"key": "k"}'])
def test_read_state_rejects_garbage(tmp_path, text):
    path = tmp_path / "state.json"
    path.write_text(text)
    with pytest.raises(sandbox.SandboxError):
        sandbox.read_state(path)


def test_merge_nodes_replaces_by_name_and_keeps_others(tmp_path):
    old = [sandbox.node_record(i, tmp_path, pid=i) for i in (1, 2, 3)]
    new = [sandbox.node_record(2, tmp_path, pid=99), sandbox.node_record(4, tmp_path, pid=4)]
    merged = sandbox.merge_nodes(old, new)
    assert [(n["name"], n["pid"]) for n in merged] == [
        ("node1", 1),
        ("node2", 99),
        ("node3", 3),
        ("node4", 4),
    ]


PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:0899 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1
   1: 00000000:7531 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1
   2: 0100007F:0899 0100007F:D3A2 01 00000000:00000000 02:000A0B7C 00000000     0        0 3 1
   3: 0100007F:8CA0 0100007F:0899 01 00000000:00000000 02:000A0B7C 00000000     0        0 4 1
"""
PROC_NET_TCP6 = """\
  sl  local_address                         remote_address                        st
   0: 00000000000000000000000001000000:08A2 00000000000000000000000000000000:0000 0A
"""


def test_listening_ports_only_listen_state():
    # 0x0899 = 2201, 0x7531 = 30001 (LISTEN); 0x8CA0 is a client-side port (ESTABLISHED)
    assert sandbox.listening_ports([PROC_NET_TCP, PROC_NET_TCP6]) == {2201, 30001, 2210}


def fake_proc(tmp_path, pid, argv, state="S", nspid=None):
    d = tmp_path / str(pid)
    d.mkdir()
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (d / "stat").write_text(f"{pid} (x y) {state} 1 {pid} {pid} 0 -1\n")
    (d / "status").write_text(f"Name:\tx\nNSpid:\t{nspid or pid}\n")
    return tmp_path


def test_is_node_nspawn_checks_program_machine_and_rootfs(tmp_path):
    rootfs = "/s/nodes/node1/rootfs"
    proc = fake_proc(tmp_path, 10, sandbox.nspawn_argv("node1", rootfs))
    assert sandbox.is_node_nspawn(10, "node1", rootfs, proc)
    assert not sandbox.is_node_nspawn(10, "node2", rootfs, proc)
    assert not sandbox.is_node_nspawn(10, "node1", "/other/rootfs", proc)
    assert not sandbox.is_node_nspawn(11, "node1", rootfs, proc)  # no such pid
    assert not sandbox.is_node_nspawn(None, "node1", rootfs, proc)


def test_is_node_nspawn_accepts_long_options(tmp_path):
    proc = fake_proc(tmp_path, 10, ["/usr/bin/systemd-nspawn", "--machine=node1", "--directory=/r", "-b"])
    assert sandbox.is_node_nspawn(10, "node1", "/r", proc)


def test_is_node_nspawn_rejects_other_programs_and_zombies(tmp_path):
    fake_proc(tmp_path, 10, ["sleep", "-M", "node1", "-D", "/r"])
    fake_proc(tmp_path, 11, sandbox.nspawn_argv("node1", "/r"), state="Z")
    assert not sandbox.is_node_nspawn(10, "node1", "/r", tmp_path)
    assert not sandbox.is_node_nspawn(11, "node1", "/r", tmp_path)


def test_pid_alive(tmp_path):
    fake_proc(tmp_path, 10, ["a"], state="R")
    fake_proc(tmp_path, 11, ["b"], state="Z")
    assert sandbox.pid_alive(10, tmp_path)
    assert not sandbox.pid_alive(11, tmp_path)
    assert not sandbox.pid_alive(12, tmp_path)
    assert sandbox.pid_alive(os.getpid())


def test_container_inits_finds_orphaned_container_by_root_dir(tmp_path):
    proc = tmp_path / "proc"
    proc.mkdir()
    roots = {name: tmp_path / name / "rootfs" for name in ("node1", "node2")}
    for root in roots.values():
        root.mkdir(parents=True)
    for pid, nspid, root in [
        (20, "20\t1", roots["node1"]),  # node1's init
        (21, "21\t33", roots["node1"]),  # a process inside node1
        (22, "22\t1", roots["node2"]),  # another container's init
        (23, "23", tmp_path),
    ]:  # a host process
        fake_proc(proc, pid, ["x"], nspid=nspid)
        (proc / str(pid) / "root").symlink_to(root)
    assert sandbox.container_inits(roots["node1"], proc) == [20]
    assert sandbox.container_inits(tmp_path / "absent", proc) == []


def test_nspawn_argv_is_headless_and_unregistered():
    argv = sandbox.nspawn_argv("node1", "/r")
    assert argv[0] == "systemd-nspawn"
    for opt in ("--keep-unit", "--register=no", "--console=read-only", "-b"):
        assert opt in argv
    assert "--private-network" not in argv


HYBRID_MOUNTS = """\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
cgroup /sys/fs/cgroup/systemd cgroup rw,relatime,name=systemd 0 0
"""
HYBRID_SELF = "9:name=systemd:/\n4:memory:/process_api/abc\n1:cpu:/\n0::/\n"


def test_tracking_cgroups_hybrid_host():
    assert sandbox.tracking_cgroups("leaf", HYBRID_MOUNTS, HYBRID_SELF) == [
        "/sys/fs/cgroup/unified/leaf",
        "/sys/fs/cgroup/systemd/leaf",
    ]


def test_tracking_cgroups_unified_host_under_own_cgroup():
    mounts = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0\n"
    assert sandbox.tracking_cgroups("leaf", mounts, "0::/user.slice/x.scope\n") == [
        "/sys/fs/cgroup/user.slice/x.scope/leaf"
    ]


def test_cgroup_leaf_is_per_node_directory(tmp_path):
    a = sandbox.cgroup_leaf(sandbox.node_record(1, tmp_path / "a"))
    b = sandbox.cgroup_leaf(sandbox.node_record(1, tmp_path / "b"))
    assert a.startswith("sglang-sandbox-node1-") and a != b
    assert a == sandbox.cgroup_leaf(sandbox.node_record(1, tmp_path / "a"))


# ---------------------------------------------------------------- host prerequisites

DEBIAN_12 = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\nID=debian\n'
UBUNTU_24 = 'PRETTY_NAME="Ubuntu 24.04.1 LTS"\nID=ubuntu\nID_LIKE=debian\n'
FEDORA_40 = 'PRETTY_NAME="Fedora Linux 40 (Server Edition)"\nID=fedora\n'


@pytest.mark.parametrize("text, apt", [(DEBIAN_12, True), (UBUNTU_24, True), (FEDORA_40, False)])
def test_apt_hosts_are_debian_and_ubuntu(tmp_path, monkeypatch, text, apt):
    (tmp_path / "os-release").write_text(text)
    monkeypatch.setattr(sandbox.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    release = sandbox.os_release(tmp_path / "os-release")
    assert sandbox.is_apt_host(release) is apt


def test_missing_tools_map_to_their_packages():
    present = {"ssh", "ssh-keygen", "cp", "chroot", "mountpoint", "rsync"}
    which = lambda tool: f"/usr/bin/{tool}" if tool in present else None  # noqa: E731
    assert sandbox.missing_packages(which) == ["debootstrap", "systemd-container"]
    assert sandbox.missing_packages(lambda tool: "/bin/x") == []
    assert sandbox.missing_packages(lambda tool: None if tool == "rsync" else "/bin/x") == ["rsync"]


def test_non_apt_host_is_told_exactly_what_to_install(tmp_path, monkeypatch):
    (tmp_path / "os-release").write_text(FEDORA_40)
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 0)
    monkeypatch.setattr(
        sandbox.shutil, "which", lambda tool: None if tool in ("systemd-nspawn", "debootstrap") else "/x"
    )
    release = sandbox.os_release(tmp_path / "os-release")
    monkeypatch.setattr(sandbox, "os_release", lambda path=None: release)
    with pytest.raises(sandbox.SandboxError) as err:
        sandbox.check_host()
    msg = str(err.value)
    assert "systemd-nspawn, debootstrap not found on Fedora Linux 40" in msg
    assert "apt-get install debootstrap systemd-container" in msg


def test_apt_host_installs_what_is_missing_and_says_so(monkeypatch, capsys):
    installed = set()
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 0)
    monkeypatch.setattr(sandbox, "os_release", lambda path=None: {"ID": "debian"})
    monkeypatch.setattr(
        sandbox.shutil,
        "which",
        lambda tool: ("/x" if tool not in ("systemd-nspawn", "debootstrap") or tool in installed else None),
    )
    calls = []

    def fake_run(argv, **kwargs):
        calls.append(argv)
        if argv[:2] == ["apt-get", "install"]:
            installed.update({"systemd-nspawn", "debootstrap"})
        return sandbox.subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(sandbox, "run", fake_run)
    sandbox.check_host()
    assert calls[0][:2] == ["apt-get", "update"]
    assert calls[1][-2:] == ["debootstrap", "systemd-container"]
    assert "installing host prerequisites: debootstrap systemd-container" in capsys.readouterr().out


def test_bare_nodes_are_the_last_ones(tmp_path):
    assert sandbox.bare_indices(3, 1) == {3}
    assert sandbox.bare_indices(2, 2) == {1, 2}
    assert sandbox.bare_indices(2, 0) == set()
    with pytest.raises(sandbox.SandboxError):
        sandbox.bare_indices(2, 3)
    assert sandbox.node_record(3, tmp_path, bare=True)["bare"] is True


def test_bare_image_is_cached_beside_the_full_one_from_fewer_packages():
    assert sandbox.bare_image_path("/var/cache/x/bookworm") == Path("/var/cache/x/bookworm-bare")
    bare = set(sandbox.BARE_PACKAGES.split(","))
    assert bare < set(sandbox.PACKAGES.split(","))
    assert not bare & {"python3-venv", "curl", "iproute2"}
    assert sandbox.image_stamp(sandbox.BARE_PACKAGES) != sandbox.image_stamp()


def test_bare_node_gets_no_model_directory(tmp_path, monkeypatch):
    for name in ("configure_identity", "mask_units", "configure_sshd"):
        monkeypatch.setattr(sandbox, name, lambda *a: None)
    image = tmp_path / "image"
    (image / "etc").mkdir(parents=True)
    for bare in (True, False):
        node = sandbox.node_record(1, tmp_path / str(bare), bare=bare)
        sandbox.make_rootfs(image, node, None)
        assert (Path(node["rootfs"]) / "models/tiny-standin/config.json").exists() is not bare


def test_router_nodes_come_after_the_serving_ones(tmp_path):
    nodes = [sandbox.node_record(i, tmp_path) for i in (1, 2, 3)]
    roles = [(n["name"], n["role"]) for n in sandbox.with_roles(nodes, 2)]
    assert roles == [("node1", "node"), ("node2", "node"), ("node3", "router")]
    assert sandbox.main(["up", "--nodes", "2", "--routers", "10"]) == 1


def test_monitoring_nodes_come_after_the_routers(tmp_path, monkeypatch):
    nodes = [sandbox.node_record(i, tmp_path) for i in (1, 2, 3, 4)]
    roles = [n["role"] for n in sandbox.with_roles(nodes, 2, routers=1)]
    assert roles == ["node", "node", "router", "monitoring"]
    assert [n["role"] for n in sandbox.with_roles(nodes, 2, routers=0)] == ["node", "node"] + [
        "monitoring"
    ] * 2
    seen = []
    monkeypatch.setattr(sandbox, "cmd_up", lambda *args: seen.append(args))
    assert sandbox.main(["up", "--nodes", "3", "--routers", "1", "--monitoring", "1"]) == 0
    assert seen == [(3, 0, 1, False, 1, 0)]
    assert sandbox.main(["up", "--nodes", "2", "--monitoring", "10"]) == 1


# -- the sudo login (`up --sudo-user`) ---------------------------------------------------------


def test_a_sudo_user_node_is_recorded_with_its_login_user_and_sudo(tmp_path):
    node = sandbox.node_record(2, tmp_path, sudo_user=True)
    assert node["ssh_user"] == "deploy" and node["sudo"] is True
    assert sandbox.login(node, False)["ssh_user"] == "root" and sandbox.login(node, False)["sudo"] is False


def test_both_images_have_sudo_and_an_image_from_before_the_user_is_rebuilt():
    assert "sudo" in sandbox.PACKAGES.split(",") and "sudo" in sandbox.BARE_PACKAGES.split(",")
    assert "login deploy with sudo" in sandbox.image_stamp(sandbox.BARE_PACKAGES)
    old_stamp = f"debootstrap --variant=minbase --include={sandbox.BARE_PACKAGES} bookworm"
    assert sandbox.image_stamp(sandbox.BARE_PACKAGES) != old_stamp
    assert sandbox.HOST_TOOLS["chroot"] == "coreutils"


def test_the_image_gets_the_user_and_a_passwordless_sudo(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(
        sandbox, "run", lambda argv: ran.append(argv) or sandbox.subprocess.CompletedProcess(argv, 0)
    )
    sandbox.add_sudo_user(tmp_path)
    assert ran == [["chroot", str(tmp_path), "useradd", "--create-home", "--shell", "/bin/bash", "deploy"]]
    sudoers = tmp_path / "etc/sudoers.d/deploy"
    assert sudoers.read_text() == "deploy ALL=(ALL:ALL) NOPASSWD: ALL\n"
    assert oct(sudoers.stat().st_mode & 0o777) == "0o440"  # sudo ignores a writable one


def test_each_login_gets_the_nodes_key_owned_by_it(tmp_path):
    uid, gid = os.getuid(), os.getgid()
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/passwd").write_text(
        f"root:x:0:0:root:/root:/bin/bash\ndeploy:x:{uid}:{gid}::/home/deploy:/bin/bash\n"
    )
    (tmp_path / "id.pub").write_text("ssh-ed25519 AAAA sandbox\n")
    sandbox.authorize(tmp_path, "deploy", tmp_path / "id.pub")
    keys = tmp_path / "home/deploy/.ssh/authorized_keys"
    assert keys.read_text() == "ssh-ed25519 AAAA sandbox\n"
    assert (keys.stat().st_uid, keys.stat().st_gid) == (uid, gid)
    assert oct(keys.stat().st_mode & 0o777) == "0o600" and oct(keys.parent.stat().st_mode & 0o777) == "0o700"
    with pytest.raises(sandbox.SandboxError, match="no user admin"):
        sandbox.authorize(tmp_path, "admin", tmp_path / "id.pub")


def test_a_kept_node_built_before_the_sudo_user_is_rebuilt_when_it_is_wanted(tmp_path, monkeypatch):
    old = {
        k: v for k, v in sandbox.node_record(1, tmp_path, pid=7).items() if k not in ("login_users", "sudo")
    }
    new = sandbox.node_record(2, tmp_path, pid=8)
    monkeypatch.setattr(sandbox, "is_node_nspawn", lambda *a: True)
    monkeypatch.setattr(sandbox, "wait_running", lambda nodes, key, timeout: {})
    monkeypatch.setattr(sandbox, "stop", lambda node: "")
    wanted = [sandbox.login(n, True) for n in (old, new)]
    assert [n["name"] for n in sandbox.retire_unhealthy(wanted, {}, "k", 1, sudo_user=True)] == ["node1"]
    assert sandbox.retire_unhealthy(wanted, {}, "k", 1, sudo_user=False) == []
    assert sandbox.lacks_login(new, True) is None


def test_up_takes_the_sudo_user_from_its_flag_or_the_environment(monkeypatch):
    seen = []
    monkeypatch.setattr(sandbox, "cmd_up", lambda *args: seen.append(args))
    assert sandbox.main(["up", "--nodes", "2", "--sudo-user"]) == 0
    monkeypatch.setenv("SANDBOX_SUDO_USER", "1")
    assert sandbox.main(["up", "--nodes", "2"]) == 0
    monkeypatch.setenv("SANDBOX_SUDO_USER", "0")
    assert sandbox.main(["up", "--nodes", "2"]) == 0
    assert seen == [(2, 0, 0, True, 0, 0), (2, 0, 0, True, 0, 0), (2, 0, 0, False, 0, 0)]
