"""follower.py: a follower's stop (ended on rank 0's shutdown, or killed after the bound) and the
cause of a follower's death, against a fake systemctl (conftest.py) and journalctl."""

import sys
import threading
import time

import pytest

from sglang_deploy.node import follower
from sglang_deploy.node.lib import result, status

FAKE_JOURNALCTL = r"""
import json
for line in ["[2026-12-01 03:00:00 TP1] Init parallel begin.",
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
             "sglang.service: Main process exited, code=exited, status=1/FAILURE"]:
    print(json.dumps({"__CURSOR": "c", "MESSAGE": line}))
"""


@pytest.fixture
def fakes(fake_systemctl):
    """The unit running (or as given) and a journal that says why it died: follower.py's args."""

    def install(**unit):
        fake_systemctl.unit(
            **dict(
                {"ActiveState": "active", "SubState": "running", "MainPID": "4242", "ControlGroup": ""},
                **unit,
            )
        )
        journalctl = fake_systemctl.dir / "journalctl"
        journalctl.write_text(f"#!{sys.executable}\n{FAKE_JOURNALCTL}")
        journalctl.chmod(0o755)
        return ["--systemctl", str(fake_systemctl.path), "--journalctl", str(journalctl)]

    return install


def test_a_follower_that_ends_on_rank_0s_shutdown_is_not_killed(fakes, fake_systemctl, capsys):
    args = fakes()

    def broadcast():  # rank 0's ShutdownReq: the follower exits by itself
        time.sleep(0.3)
        fake_systemctl.unit(ActiveState="inactive", SubState="dead")

    threading.Thread(target=broadcast).start()
    code = follower.main(args + ["stop", "--unit", "sglang.service", "--wait", "5", "--poll", "0.05"])
    out = capsys.readouterr().out
    assert code == status.READY
    assert "sglang.service ended on rank 0's shutdown (inactive/dead)" in out
    assert result.parse(out.splitlines())["killed"] is False
    assert "kill" not in fake_systemctl.calls() and fake_systemctl.calls()[-1] == "stop"


def test_a_follower_still_running_after_the_bound_is_killed_and_said_so(fakes, fake_systemctl, capsys):
    args = fakes()
    started = time.monotonic()
    code = follower.main(args + ["stop", "--unit", "sglang.service", "--wait", "0.5", "--poll", "0.05"])
    out = capsys.readouterr().out
    assert code == status.READY and time.monotonic() - started < 3
    assert "still running 0.5s after rank 0 stopped: killing the unit" in out
    assert result.parse(out.splitlines())["killed"] is True
    assert fake_systemctl.calls()[-2:] == ["kill", "stop"]


def test_an_auto_restart_pending_counts_as_ended_and_is_cancelled(fakes, fake_systemctl, capsys):
    args = fakes(ActiveState="activating", SubState="auto-restart")
    assert follower.main(args + ["stop", "--unit", "sglang.service", "--wait", "5"]) == status.READY
    assert "ended on rank 0's shutdown (activating/auto-restart)" in capsys.readouterr().out
    assert fake_systemctl.calls()[-1] == "stop"


def test_the_cause_of_a_followers_death_comes_from_its_journal(fakes, capsys):
    args = fakes(
        ActiveState="failed", SubState="failed", ExecMainCode="1", ExecMainStatus="1", InvocationID="abc"
    )
    assert follower.main(args + ["cause", "--unit", "sglang.service"]) == status.READY
    found = result.parse(capsys.readouterr().out.splitlines())
    assert found["key"] == "cuda-oom"
    assert found["cause"].startswith("cuda-oom: CUDA out of memory")
    assert "failed/failed, main process exited with status 1" in found["cause"]


@pytest.mark.parametrize(
    "argv, alone",
    [
        (["python3", "-m", "sglang.launch_server", "--port", "30001"], True),
        (["python3", "-m", "sglang.launch_server", "--nnodes", "2", "--node-rank", "1"], False),
        (["python3", "-m", "sglang.launch_server", "--node-rank=1"], False),
    ],
)
def test_a_member_that_serves_alone_is_stopped_at_once(
    fakes, fake_systemctl, capsys, monkeypatch, argv, alone
):
    # Two serving nodes becoming a group: the future follower runs as a server of its own, so
    # nothing rank 0 does ends it; waiting for that would only end in a kill.
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", *argv[3:]])
    try:
        args = fakes(MainPID=str(child.pid), ControlGroup="/system.slice/sglang.service")
        monkeypatch.setattr(
            follower.procs,
            "cgroup_pids",
            lambda path: [child.pid]
            if not fake_systemctl.calls() or fake_systemctl.calls()[-1] != "stop"
            else [],
        )
        monkeypatch.setattr(follower.procs, "read_cmdline", lambda pid, *_: argv)
        monkeypatch.setattr(follower.procs, "cgroup_dir", lambda group: "/sys/fs/cgroup" + group)
        started = time.monotonic()
        code = follower.main(args + ["stop", "--unit", "sglang.service", "--wait", "1", "--poll", "0.05"])
        out = capsys.readouterr().out
        assert code == status.READY
        assert ("serves alone (no --node-rank): stopped now" in out) is alone
        assert ("killing" in out) is not alone  # a follower that never ends is killed at the bound
        assert (time.monotonic() - started < 0.9) is alone
    finally:
        child.kill()
        child.wait()


def test_node_rank_of():
    assert follower.node_rank_of(["x", "--node-rank", "2"]) == 2
    assert follower.node_rank_of(["x", "--node-rank=1"]) == 1
    assert follower.node_rank_of(["x", "--port", "1"]) == 0
