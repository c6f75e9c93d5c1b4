"""restart.py: nvidia-smi parsing on captured output, and the stop/wait/start sequence against a
fake systemctl and a real process tree that listens on the port."""

import fcntl
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from sglang_deploy.node import restart
from sglang_deploy.node.lib import compute_apps, result, status

# Captured on an H200 (driver 580.159.04) with two processes holding memory.
SMI_NOUNITS = "478, 4614\n477, 2566\n"
SMI_UNITS = "478, 4614 MiB\n477, 2566 MiB\n"
SMI_HEADER = "pid, used_gpu_memory [MiB]\n478, 4614 MiB\n477, 2566 MiB\n"


def test_parse_compute_apps_captured_formats():
    for text in (SMI_NOUNITS, SMI_UNITS, SMI_HEADER):
        assert compute_apps.parse_compute_apps(text) == [(478, 4614), (477, 2566)]
    assert compute_apps.parse_compute_apps("") == []  # no compute apps: empty output, status 0
    assert compute_apps.parse_compute_apps("1234, [N/A]\n1235, [Insufficient Permissions]\n") == [
        (1234, None),
        (1235, None),
    ]
    assert compute_apps.parse_compute_apps("No devices were found\n") == []


# A launcher in its own process group (like a unit's cgroup) that listens on the port and has
# two children; with IGNORE=1 one child survives SIGTERM.
LAUNCHER = r"""
import os, signal, socket, subprocess, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen()
body = "import signal, time\nif %r == '1': signal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(60)"
kids = [subprocess.Popen(["sglang::scheduler_TP%d" % i, "-c", body % (sys.argv[2] if i else "0")],
                         executable=sys.executable) for i in range(2)]
print(" ".join(str(k.pid) for k in kids), flush=True)
time.sleep(60)
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Node:
    def __init__(self, fake_systemctl, ignore_term=False):
        self.dir = fake_systemctl.dir
        self.port = free_port()
        self.fake_systemctl = fake_systemctl
        self.launcher = subprocess.Popen(
            [sys.executable, "-c", LAUNCHER, str(self.port), "1" if ignore_term else "0"],
            stdout=subprocess.PIPE,
            universal_newlines=True,
            start_new_session=True,
        )
        self.kids = [int(p) for p in self.launcher.stdout.readline().split()]
        if ignore_term:  # wait until the child really ignores SIGTERM
            deadline = time.time() + 10
            while not self.ignores_term(self.kids[1]) and time.time() < deadline:
                time.sleep(0.02)
        self.state = {
            "LoadState": "loaded",
            "ActiveState": "active",
            "SubState": "running",
            "MainPID": self.launcher.pid,
            "ProcessGroup": self.launcher.pid,
            "ControlGroup": "",
            "InvocationID": "oldinv",
            "ExecMainCode": 0,
            "ExecMainStatus": 0,
        }
        self.write()
        self.reaper = None

    @staticmethod
    def ignores_term(pid):
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("SigIgn:"):
                    return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
        return False

    def write(self, **changes):
        self.state.update(changes)
        self.fake_systemctl.unit(**self.state)

    def smi(self, text):
        exe = self.dir / "nvidia-smi"
        exe.write_text("#!/bin/sh\ncat %s\n" % (self.dir / "smi.txt"))
        exe.chmod(0o755)
        (self.dir / "smi.txt").write_text(text)
        return str(exe)

    def run(self, *extra, smi=None):
        # reap the launcher when it dies, as systemd would
        import threading

        self.reaper = threading.Thread(target=self.launcher.wait, daemon=True)
        self.reaper.start()
        # --stop-timeout is required (NodeScripts passes the profile's); a test's own comes last and wins
        argv = [
            "--unit",
            "sglang.service",
            "--port",
            str(self.port),
            "--stop-timeout",
            "120",
            "--systemctl",
            str(self.fake_systemctl.path),
            "--nvidia-smi",
            smi or str(self.dir / "no-nvidia-smi"),
        ] + list(extra)
        return restart.main(argv)

    def close(self):
        for pid in self.kids + [self.launcher.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.launcher.wait()


@pytest.fixture
def node(fake_systemctl):
    n = Node(fake_systemctl)
    yield n
    n.close()


def test_stop_wait_start(node, capsys):
    assert node.run() == status.READY
    out = "\n".join(result.progress(capsys.readouterr().out.splitlines()))
    assert "stopping sglang.service: active/running, main pid %d, 3 processes" % node.launcher.pid in out
    for text in (
        "systemctl stop returned: inactive/dead",
        "old processes gone",
        "port %d free" % node.port,
        "nvidia-smi not found",
        "started sglang.service: main pid 4242, invocation newinv",
    ):
        assert text in out
    assert all(line.startswith("[") and "s] " in line for line in out.splitlines())
    assert [verb for verb in node.fake_systemctl.calls() if verb != "show"] == ["stop", "start"]


def test_no_start_and_gpu_released(node, capsys):
    smi = node.smi("9999999, 1024\n")  # someone else's process, not ours
    assert node.run("--no-start", smi=smi) == status.READY
    out = "\n".join(result.progress(capsys.readouterr().out.splitlines()))
    assert "GPU memory of old processes released" in out
    assert "note: GPU memory held by other processes: pid 9999999" in out
    assert "not starting" in out
    assert [verb for verb in node.fake_systemctl.calls() if verb != "show"] == ["stop"]


def test_failing_nvidia_smi_skips_the_gpu_check(node, tmp_path, capsys):
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'\nexit 9\n"
    )
    smi.chmod(0o755)
    assert node.run("--no-start", smi=str(smi)) == status.READY
    assert "nvidia-smi failed: GPU memory check skipped" in capsys.readouterr().out


def test_gpu_memory_still_held_is_stop_timeout(node, capsys):
    smi = node.smi("%d, 70120\n" % node.kids[0])
    start = time.monotonic()
    assert node.run("--stop-timeout", "1", smi=smi) == status.STOP_TIMEOUT
    assert time.monotonic() - start < 3
    printed = capsys.readouterr().out.splitlines()
    out = result.progress(printed)
    assert out[-1].endswith("stop timeout: still there: GPU memory held by pid %d (70120 MiB)" % node.kids[0])
    found = result.parse(printed)
    assert found["result"] == "STOP_TIMEOUT" and found["cause"] == (
        "stop timeout: still there: GPU memory held by pid %d (70120 MiB)" % node.kids[0]
    )


def test_surviving_process_is_named(fake_systemctl, capsys):
    node = Node(fake_systemctl, ignore_term=True)
    try:
        assert node.run("--stop-timeout", "1") == status.STOP_TIMEOUT
        last = result.progress(capsys.readouterr().out.splitlines())[-1]
        assert "stop timeout: still there: pids %d (sglang::scheduler_TP1" % node.kids[1] in last
    finally:
        node.close()


def test_foreign_listener_on_port_is_named(node, capsys):
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        node.launcher.kill()  # the unit is gone, but something else holds the port
        node.launcher.wait()
        node.write(ActiveState="failed", SubState="failed", MainPID=0)
        other.bind(("127.0.0.1", node.port))
        other.listen()
        assert node.run("--stop-timeout", "0.5") == status.STOP_TIMEOUT
    out = "\n".join(result.progress(capsys.readouterr().out.splitlines()))
    assert "nothing to stop" in out
    assert "port %d listening (pid %d " % (node.port, os.getpid()) in out


def hold_port_elsewhere(node, other):
    other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    node.launcher.kill()
    node.launcher.wait()
    node.write(ActiveState="failed", SubState="failed", MainPID=0)
    other.bind(("127.0.0.1", node.port))
    other.listen()


def test_a_port_held_by_another_process_fails_fast_naming_it(node, capsys):
    with socket.socket() as other:
        hold_port_elsewhere(node, other)
        started = time.monotonic()
        assert node.run("--stop-timeout", "60") == status.STOP_TIMEOUT
        assert time.monotonic() - started < 5, "waited for a port our stop cannot release"
    last = result.progress(capsys.readouterr().out.splitlines())[-1]
    assert "failed: port %d is held by pid %d (" % (node.port, os.getpid()) in last
    assert last.endswith("not by sglang.service")


def test_a_port_no_process_here_owns_fails_fast(node, capsys, monkeypatch):
    # As from inside a container sharing the host's network: the socket is listed, its owner
    # is not among this node's processes.
    monkeypatch.setattr(
        restart.procs,
        "listening",
        lambda port: [{"addr": "127.0.0.1", "port": port, "state": "0A", "inode": 4000000000}],
    )
    node.launcher.kill()
    node.launcher.wait()
    node.write(ActiveState="failed", SubState="failed", MainPID=0)
    started = time.monotonic()
    assert node.run("--stop-timeout", "60") == status.STOP_TIMEOUT
    assert time.monotonic() - started < 5
    assert result.progress(capsys.readouterr().out.splitlines())[-1].endswith(
        "failed: port %d is listening but no process on this node owns it "
        "(another network namespace or container?)" % node.port
    )


def test_start_failure(node, capsys):
    node.write(fail_start=True)
    assert node.run() == status.FAILED_START
    last = result.progress(capsys.readouterr().out.splitlines())[-1]
    assert "start failed: Job for sglang.service failed" in last and "exited with status 203" in last


def test_lock_held_elsewhere(node, tmp_path, capsys):
    lock = tmp_path / "restart.lock"
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert node.run("--lock", str(lock)) == status.LOCKED
    assert "locked" in capsys.readouterr().out
    assert not (tmp_path / "calls").exists()
