"""/proc and cgroup readers: parsers on captured text, readers on real processes."""

import os
import socket
import subprocess
import sys
import time

from sglang_deploy.node.lib import procs

# Captured from a Linux 6.x host: a listener on 127.0.0.1:2202, one on 0.0.0.0:30000, an
# established connection to 30000.
NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode                                                     
   0: 0100007F:089A 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 22885 1 0000000012d78c54 100 0 0 10 0                     
   1: 00000000:7530 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 418203 1 00000000c060d3db 100 0 0 10 0                    
   2: 0100007F:7530 0100007F:C8E2 01 00000000:00000000 00:00000000 00000000     0        0 418977 1 0000000063e1b1f0 20 4 30 10 -1                   
"""
NET_TCP6 = """\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:0016 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 17712 1 00000000a3b5c7e1 100 0 0 10 0
   1: 00000000000000000000000001000000:7530 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 419001 1 00000000a3b5c7e2 100 0 0 10 0
"""


def test_parse_net_tcp():
    rows = procs.parse_net_tcp(NET_TCP)
    assert rows[0] == {"addr": "127.0.0.1", "port": 2202, "state": "0A", "inode": 22885}
    assert rows[1]["addr"] == "0.0.0.0" and rows[1]["port"] == 30000
    assert rows[2]["state"] == "01"
    rows6 = procs.parse_net_tcp(NET_TCP6)
    assert rows6[0]["addr"] == "::" and rows6[0]["port"] == 22
    assert rows6[1]["addr"] == "::1" and rows6[1]["port"] == 30000


def test_listening_from_files(tmp_path):
    (tmp_path / "tcp").write_text(NET_TCP)
    (tmp_path / "tcp6").write_text(NET_TCP6)
    paths = (str(tmp_path / "tcp"), str(tmp_path / "tcp6"), str(tmp_path / "absent"))
    assert [r["inode"] for r in procs.listening(30000, paths)] == [418203, 419001]
    assert procs.listening(30001, paths) == []


def test_listening_and_owner_of_a_real_socket():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        rows = procs.listening(port)
        assert rows and rows[0]["addr"] == "127.0.0.1"
        assert os.getpid() in procs.socket_owners([rows[0]["inode"]])
    assert procs.listening(port) == []


def test_parse_stat_with_odd_comm():
    text = "4242 (sglang::sched ) x) S 4200 4242 4200 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 3 0 987654 0 0\n"
    stat = procs.parse_stat(text)
    assert stat == {"pid": 4242, "comm": "sglang::sched ) x", "state": "S", "ppid": 4200, "starttime": 987654}


def test_descendants_from_a_map():
    ppids = {1: 0, 10: 1, 11: 10, 12: 10, 13: 11, 20: 1}
    assert procs.descendants(10, ppids) == [11, 12, 13]
    assert procs.descendants(20, ppids) == []


def test_cmdline_and_environ_parsers():
    assert procs.parse_cmdline(b"sglang::scheduler_TP0\x00\x00\x00") == ["sglang::scheduler_TP0"]
    assert procs.parse_cmdline(b"python3\x00-m\x00sglang.launch_server\x00") == [
        "python3",
        "-m",
        "sglang.launch_server",
    ]
    assert procs.parse_environ(b"A=1\x00B=x=y\x00EMPTY=\x00junk\x00") == {"A": "1", "B": "x=y", "EMPTY": ""}


def test_real_process_tree_and_alive():
    code = (
        "import subprocess, sys, time; "
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
        "print(c.pid, flush=True); time.sleep(30)"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, universal_newlines=True)
    try:
        child = int(parent.stdout.readline())
        assert child in procs.descendants(parent.pid)
        start = procs.read_stat(child)["starttime"]
        assert procs.alive(child, start)
        assert not procs.alive(child, start + 1)  # same pid, another process
        assert "time.sleep(30)" in procs.title(child)
        os.kill(child, 9)
        deadline = time.time() + 5
        while procs.alive(child) and time.time() < deadline:
            time.sleep(0.05)
        assert not procs.alive(child)  # a zombie counts as gone
    finally:
        parent.kill()
        parent.wait()
    assert not procs.alive(parent.pid)


def test_cgroup_dir_and_recursive_pids(tmp_path):
    unit = tmp_path / "system.slice" / "sglang.service"
    (unit / "sub").mkdir(parents=True)
    (unit / "cgroup.procs").write_text("1201\n1202\n")
    (unit / "sub" / "cgroup.procs").write_text("1300\n")
    assert procs.cgroup_dir("/system.slice/sglang.service", root=str(tmp_path)) == str(unit)
    assert procs.cgroup_dir("/system.slice/other.service", root=str(tmp_path)) is None
    assert procs.cgroup_dir("", root=str(tmp_path)) is None
    assert procs.cgroup_pids(str(unit)) == [1201, 1202, 1300]
    v1 = tmp_path / "v1"
    (v1 / "systemd" / "system.slice" / "x.service").mkdir(parents=True)
    (v1 / "systemd" / "system.slice" / "x.service" / "cgroup.procs").write_text("7\n")
    assert procs.cgroup_dir("/system.slice/x.service", root=str(v1)).endswith(
        "/systemd/system.slice/x.service"
    )
