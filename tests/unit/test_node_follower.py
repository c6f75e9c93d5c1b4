"""follower.py: a follower's stop (ended on rank 0's shutdown, or killed after the bound) and the
cause of a follower's death, against a fake systemctl and journalctl."""
import json
import sys
import threading
import time

from sglang_deploy.node import follower, result, status

FAKE_SYSTEMCTL = r"""
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
state = json.load(open(os.path.join(here, "unit.json")))
args = sys.argv[1:]
with open(os.path.join(here, "calls"), "a") as f:
    f.write(" ".join(args) + "\n")
if args[0] == "show":
    for i, arg in enumerate(args):
        if arg == "-p":
            print("%s=%s" % (args[i + 1], state.get(args[i + 1], "")))
elif args[0] in ("kill", "stop"):
    state.update(ActiveState="inactive" if args[0] == "stop" else "failed", SubState="dead")
    json.dump(state, open(os.path.join(here, "unit.json"), "w"))
"""

FAKE_JOURNALCTL = r"""
import json
for line in ["[2026-12-01 03:00:00 TP1] Init parallel begin.",
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
             "sglang.service: Main process exited, code=exited, status=1/FAILURE"]:
    print(json.dumps({"__CURSOR": "c", "MESSAGE": line}))
"""


def fakes(tmp_path, **unit):
    (tmp_path / "unit.json").write_text(json.dumps(dict(
        {"ActiveState": "active", "SubState": "running", "MainPID": "4242", "ControlGroup": ""}, **unit)))
    for name, text in (("systemctl", FAKE_SYSTEMCTL), ("journalctl", FAKE_JOURNALCTL)):
        path = tmp_path / name
        path.write_text(f"#!{sys.executable}\n{text}")
        path.chmod(0o755)
    return ["--systemctl", str(tmp_path / "systemctl"), "--journalctl", str(tmp_path / "journalctl")]


def calls(tmp_path):
    return [line.split()[0] for line in (tmp_path / "calls").read_text().splitlines()]


def test_a_follower_that_ends_on_rank_0s_shutdown_is_not_killed(tmp_path, capsys):
    args = fakes(tmp_path)

    def broadcast():  # rank 0's ShutdownReq: the follower exits by itself
        time.sleep(0.3)
        (tmp_path / "unit.json").write_text(json.dumps({"ActiveState": "inactive", "SubState": "dead"}))

    threading.Thread(target=broadcast).start()
    code = follower.main(args + ["stop", "--unit", "sglang.service", "--wait", "5", "--poll", "0.05"])
    out = capsys.readouterr().out
    assert code == status.READY
    assert "sglang.service ended on rank 0's shutdown (inactive/dead)" in out
    assert result.parse(out.splitlines())["killed"] is False
    assert "kill" not in calls(tmp_path) and calls(tmp_path)[-1] == "stop"


def test_a_follower_still_running_after_the_bound_is_killed_and_said_so(tmp_path, capsys):
    args = fakes(tmp_path)
    started = time.monotonic()
    code = follower.main(args + ["stop", "--unit", "sglang.service", "--wait", "0.5", "--poll", "0.05"])
    out = capsys.readouterr().out
    assert code == status.READY and time.monotonic() - started < 3
    assert "still running 0.5s after rank 0 stopped: killing the unit" in out
    assert result.parse(out.splitlines())["killed"] is True
    assert calls(tmp_path)[-2:] == ["kill", "stop"]


def test_an_auto_restart_pending_counts_as_ended_and_is_cancelled(tmp_path, capsys):
    args = fakes(tmp_path, ActiveState="activating", SubState="auto-restart")
    assert follower.main(args + ["stop", "--unit", "sglang.service", "--wait", "5"]) == status.READY
    assert "ended on rank 0's shutdown (activating/auto-restart)" in capsys.readouterr().out
    assert calls(tmp_path)[-1] == "stop"


def test_the_cause_of_a_followers_death_comes_from_its_journal(tmp_path, capsys):
    args = fakes(tmp_path, ActiveState="failed", SubState="failed", ExecMainCode="1", ExecMainStatus="1",
                 InvocationID="abc")
    assert follower.main(args + ["cause", "--unit", "sglang.service"]) == status.READY
    found = result.parse(capsys.readouterr().out.splitlines())
    assert found["key"] == "cuda-oom"
    assert found["cause"].startswith("cuda-oom: CUDA out of memory")
    assert "failed/failed, main process exited with status 1" in found["cause"]
