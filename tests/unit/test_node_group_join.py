"""group_join.py: which follower has not joined rank 0, from SGLang's log lines. The torch lines are
the captured real ones (tests/unit/captured/torch_2.13_*, capture_torch_rendezvous.sh); the
stand-in's own logs are read the same way in test_standin_multinode.py."""

import json
import subprocess
import sys
from pathlib import Path

from sglang_deploy.node import group_join
from sglang_deploy.node.lib import sglang_log, status

CAPTURED = Path(__file__).parent / "captured"


def captured(name):
    """A captured file's lines, without its '# ' provenance header."""
    return [line for line in (CAPTURED / name).read_text().splitlines() if not line.startswith("# ")]


def scheduler_log(tp_rank, *messages):
    """Lines as SGLang's scheduler TP<rank> logs them."""
    return ["[2026-11-30 10:00:0%d TP%d] %s" % (i, tp_rank, m) for i, m in enumerate(messages)]


def failed_with(tp_rank, name):
    """A scheduler that logged SGLang's 'Scheduler hit an exception:' with a captured traceback."""
    tb = [line for line in captured(name) if not line.startswith(("joined", "elapsed"))]
    return scheduler_log(tp_rank, "Init parallel begin.", "Scheduler hit an exception: " + tb[0]) + tb[1:]


def test_rank0_timed_out_with_the_real_torch_message_names_the_only_follower():
    rank0 = failed_with(0, "torch_2.13_tcp_rendezvous_rank0_timeout.txt")
    found = group_join.assess(rank0, nnodes=2, tp_size=2)
    assert (found["state"], found["joined"], found["world"], found["after_s"]) == ("timed-out", 1, 2, 3)
    assert found["missing"] == [1] and found["unknown"] == []
    assert found["cause"] == "rank 0 gave up after 3 s, 1/2 ranks joined: node-rank 1 has not joined"


def test_the_followers_own_log_says_why_it_did_not_join():
    rank0 = failed_with(0, "torch_2.13_tcp_rendezvous_rank0_timeout.txt")
    follower = failed_with(1, "torch_2.13_tcp_rendezvous_follower_connect_timeout.txt")
    assert group_join.follower_evidence(follower, 1, 1) == "unreachable: 127.0.0.1:29652"
    found = group_join.assess(rank0, 2, 2, follower_logs={1: follower})
    assert found["missing"] == [1]
    assert found["cause"].endswith("node-rank 1 has not joined (node-rank 1: unreachable: 127.0.0.1:29652)")


def test_of_three_followers_the_logs_name_the_one_missing():
    rank0 = scheduler_log(0, "Init parallel begin.")
    logs = {
        1: scheduler_log(1, "Init parallel begin."),  # connecting: rank 0 will count it
        2: ["-- No entries --"],  # the unit never started
        3: scheduler_log(3, "Init parallel begin."),
    }
    found = group_join.assess(rank0, nnodes=4, tp_size=4, follower_logs=logs)
    assert found["state"] == "waiting" and found["missing"] == [2] and found["unknown"] == []
    assert found["evidence"] == {"1": "connecting", "2": "not started", "3": "connecting"}
    assert found["cause"] == (
        "rank 0 is waiting for its followers: node-rank 2 has not joined (node-rank 2: not started)"
    )


def test_torchs_count_picks_the_follower_without_a_log():
    # 4 nodes x 2 GPUs; 6/8 ranks joined: one node is absent; followers 1 and 3 are connecting.
    rank0 = scheduler_log(0, "Init parallel begin.") + [
        "torch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients. "
        "6/8 clients joined."
    ]
    logs = {
        1: scheduler_log(2, "Init parallel begin.") + scheduler_log(3, "Init parallel begin."),
        3: scheduler_log(6, "Init parallel begin.") + scheduler_log(7, "Init parallel begin."),
    }
    found = group_join.assess(rank0, nnodes=4, tp_size=8, follower_logs=logs)
    assert found["missing"] == [2] and found["after_s"] == 601


def test_without_logs_of_many_followers_none_is_named():
    found = group_join.assess(scheduler_log(0, "Init parallel begin."), nnodes=3, tp_size=3)
    assert found["missing"] == [] and found["unknown"] == [1, 2]
    assert "no log tells which of node-rank 1, node-rank 2 is missing" in found["cause"]


def test_a_peer_lost_after_joining_is_named_by_its_address():
    rank0 = (
        scheduler_log(0, "Init parallel begin.", "Init parallel ends. elapsed=0.40 s")
        + failed_with(0, "torch_2.13_gloo_peer_killed_seen_by_rank0.txt")[2:]
    )
    found = group_join.assess(rank0, nnodes=3, tp_size=3, follower_hosts={1: "10.0.0.2", 2: "127.0.0.1"})
    assert found["state"] == "lost" and found["missing"] == [2] and found["peer"] == "127.0.0.1"
    assert found["cause"].startswith("rank 0 lost node-rank 2 after it had joined")


def test_joined_and_not_started():
    joined = scheduler_log(0, "Init parallel begin.", "Init parallel ends. elapsed=3.10 s")
    assert group_join.assess(joined, 2, 2)["state"] == "joined"
    assert group_join.assess(joined, 2, 2)["cause"] is None
    assert group_join.assess(["-- No entries --"], 2, 2)["state"] == "not-started"


def test_rank0s_dist_port_in_use():
    rank0 = scheduler_log(0, "Init parallel begin.") + [
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
        "network address. port: 5000, useIpv6: false, code: -98, name: EADDRINUSE, message: "
        "address already in use"
    ]
    found = group_join.assess(rank0, 2, 2)
    assert found["state"] == "bind-failed" and "port 5000" in found["cause"]


def test_the_script_prints_one_result_line(tmp_path):
    rank0 = tmp_path / "rank0.log"
    rank0.write_text("\n".join(failed_with(0, "torch_2.13_tcp_rendezvous_rank0_timeout.txt")))
    follower = tmp_path / "f1.log"
    follower.write_text("")
    out = subprocess.run(
        [
            sys.executable,
            group_join.__file__,
            "--rank0-log",
            str(rank0),
            "--nnodes",
            "2",
            "--tp-size",
            "2",
            "--follower-log",
            "1=%s" % follower,
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == status.FAILED_START
    res = json.loads(out.stdout.splitlines()[-1])
    assert res["missing"] == [1] and res["evidence"] == {"1": "not started"}
    assert out.stdout.splitlines()[0].startswith("rank 0: timed-out: rank 0 gave up after 3 s")


def test_the_gates_cause_names_the_group_not_a_dead_scheduler():
    # What the gate reports from rank 0's journal: torch's words, not only "a scheduler died".
    died = [
        "RuntimeError: Rank 0 scheduler died during initialization (exit code: 1). If exit code "
        "is -9 (SIGKILL), a common cause is the OS OOM killer."
    ]
    timed_out = failed_with(0, "torch_2.13_tcp_rendezvous_rank0_timeout.txt") + died
    key, text = sglang_log.cause_of(timed_out)
    assert key == "group-incomplete" and text.endswith(
        "DistStoreError: Timed out after 3 seconds waiting for clients. 1/2 clients joined."
    )
    follower = failed_with(1, "torch_2.13_tcp_rendezvous_follower_connect_timeout.txt")
    assert sglang_log.cause_of(follower)[0] == "group-incomplete"
    for name in (
        "torch_2.13_gloo_peer_killed_seen_by_rank0.txt",
        "torch_2.13_gloo_rank0_killed_seen_by_follower.txt",
    ):
        assert sglang_log.cause_of(failed_with(0, name) + died)[0] == "group-peer-lost", name
