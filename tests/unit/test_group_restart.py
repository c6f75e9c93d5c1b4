"""The coordinated restart of a serving group (operations/group_restart.py), against fake hosts that
record every command: rank 0 stops first, every member starts, only rank 0 is gated while the
followers are watched, a follower that dies is named and every member rolls back together."""

import json
from types import SimpleNamespace

import gevent
import pytest

from sglang_deploy import run_state
from sglang_deploy.node.lib import status
from sglang_deploy.operations import group_restart as group_cycle
from sglang_deploy.plan import serving_group
from sglang_deploy.plan.fleet_hosts import Rotation
from sglang_deploy.plan.hosts import deploy_defaults
from sglang_deploy.plan.settings import settings_of
from sglang_deploy.report import throughput_log as throughput

LOG = []


class FakeHost:
    def __init__(self, name, script):
        self.name, self.script, self.starts = name, script, 0

    def run_shell_command(self, command, print_output=False):
        text = str(command)
        LOG.append((self.name, text))
        if "systemctl start" in text:
            self.starts += 1
        ok, lines = self.script(self, text)
        return ok, SimpleNamespace(stdout_lines=lines, stderr_lines=[])

    def log_styled(self, text, **kwargs):
        LOG.append((self.name, "log: " + text))


def result(code=0, **details):
    return [json.dumps(dict(details, status=code), sort_keys=True)]


def healthy(host, text):
    if "gate.py" in text:
        gevent.sleep(0.2)  # rank 0 loads, warms up
    if "systemctl show" in text:
        return True, ["ActiveState=active", "SubState=running", f"MainPID={100 + host.starts}", "NRestarts=0"]
    if "lastgood.py restore" in text:
        return True, result(profile="group")
    return True, result()


def follower_dies_on_first_start(host, text):
    if host.starts == 1 and "systemctl show" in text and LOG.count((host.name, text)) > 1:
        return True, ["ActiveState=failed", "SubState=failed", "MainPID=0", "NRestarts=0"]
    if "follower.py cause" in text:
        return True, result(cause="cuda-oom: CUDA out of memory (failed/failed)")
    return healthy(host, text)


@pytest.fixture
def make_group(monkeypatch):
    monkeypatch.setattr(group_cycle, "POLL_S", 0.01)
    monkeypatch.setattr(group_cycle, "member_hook_paths", lambda host, python: {})
    LOG.clear()

    def make(follower_script=healthy, failed=(), rotation=None):
        hosts = [
            (
                "node1",
                {
                    "profile": "baseline",
                    "serving_group": "g1",
                    "ssh_hostname": "10.0.0.1",
                    "profile_overrides": {"server_args": {"tp-size": 2, "nnodes": 2}},
                },
            ),
            (
                "node2",
                {
                    "profile": "baseline",
                    "serving_group": "g1",
                    "ssh_hostname": "10.0.0.2",
                    "profile_overrides": {"server_args": {"tp-size": 2, "nnodes": 2}},
                },
            ),
        ]
        members = serving_group.resolve_checked(hosts, serving_group.profile_of)
        fakes = {"node1": FakeHost("node1", healthy), "node2": FakeHost("node2", follower_script)}
        from sglang_deploy.plan.host_plan import plan_for

        plans = {
            name: plan_for({**deploy_defaults(), **data}, operator_env={}, member=members[name])
            for name, data in hosts
        }
        state = SimpleNamespace(
            inventory=SimpleNamespace(get_host=fakes.get), failed_hosts={fakes[name] for name in failed}
        )
        return group_cycle.Group(state, members["node1"], plans, stop_wait_s=5, rotation=rotation)

    return make


def commands(name, *words):
    return [i for i, (host, text) in enumerate(LOG) if host == name and all(w in text for w in words)]


def test_rank_0_stops_first_every_member_starts_and_only_rank_0_is_gated(make_group):
    ok, text = make_group().cycle()
    assert (ok, text) == (True, "serving (baseline)")
    rank0_stop = commands("node1", "restart.py", "--no-start")[0]
    follower_end = commands("node2", "follower.py stop", "--wait 5")[0]
    starts = commands("node1", "systemctl start") + commands("node2", "systemctl start")
    assert rank0_stop < follower_end < min(starts)
    assert commands("node1", "gate.py") and not commands("node2", "gate.py")
    assert commands("node1", "decode_check.py") and not commands("node2", "decode_check.py")
    assert commands("node1", "preflight.py") < [rank0_stop] and commands("node2", "preflight.py")
    for name in ("node1", "node2"):
        assert commands(name, "workers.py") and commands(name, "lastgood.py save")


def test_a_follower_that_dies_during_the_start_is_named_and_every_member_rolls_back(make_group):
    ok, text = make_group(follower_dies_on_first_start).cycle()
    assert not ok
    assert text.startswith("node2 (node-rank 1) died while the group started: cuda-oom")
    assert text.endswith("rolled back: serving group again")
    for name in ("node1", "node2"):
        assert len(commands(name, "lastgood.py restore")) == 1
        assert len(commands(name, "systemctl start")) == 2
        assert not commands(name, "lastgood.py save")
    # After the death, rank 0 was stopped before anything started again.
    died = commands("node2", "follower.py cause")[0]
    assert commands("node1", "restart.py", "--no-start")[1] > died


def test_a_member_that_failed_before_the_restart_stops_nothing(make_group):
    ok, text = make_group(failed=("node2",)).cycle()
    assert not ok and text == "node2 failed before the restart (its cause is above): nothing was stopped"
    assert not [entry for entry in LOG if "restart.py" in entry[1] or "systemctl start" in entry[1]]
    assert commands("node1", "lastgood.py restore")  # rank 0's files go back


def test_members_whose_engine_venvs_differ_stop_nothing(make_group):
    members = make_group()
    members.plans[0].venv = "/opt/sglang/venvs/sglang-0.5.23-aaa"
    members.plans[1].venv = "/opt/sglang/venvs/sglang-0.5.23-bbb"
    ok, text = members.cycle()
    assert not ok and text.startswith(
        "members would run different engine venvs: node1 sglang-0.5.23-aaa, node2 sglang-0.5.23-bbb"
    )
    assert not [entry for entry in LOG if "restart.py" in entry[1] or "preflight.py" in entry[1]]


def test_a_follower_that_never_joins_is_named_when_rank_0s_gate_gives_up(make_group):
    def rank0(host, text):
        if "gate.py" in text:
            return False, result(4, cause="timeout: last phase: starting (120.0s)")
        if "systemd.py journal" in text:
            return True, result(lines=["[2026-12-01 03:00:00 TP0] Init parallel begin."], cursor="c")
        return healthy(host, text)

    def follower(host, text):  # its unit runs, its schedulers never got as far as the rendezvous
        if "systemd.py journal" in text:
            return True, result(lines=["[2026-12-01 03:00:00] server_args=..."], cursor="c")
        return healthy(host, text)

    members = make_group(follower)
    members.hosts[0].script = rank0
    ok, text = members.cycle(rollback=False)
    assert not ok
    assert text.startswith(
        "node2 (node-rank 1) never joined rank 0: rank 0 is waiting for its "
        "followers: node-rank 1 has not joined (node-rank 1: not started); "
        "rank 0 node1 failed its gate: timeout"
    )
    # Each member's journal came back in its result line (lib/systemd.py journal --json).
    journals = [text for _, text in LOG if "systemd.py journal" in text]
    assert len(journals) == 2 and all(text.endswith(" --json") for text in journals)


ROTATION = Rotation(
    worker_url="http://10.0.0.1:30000",
    local_port=30000,
    router_urls=["http://10.0.0.9:30000"],
    rolling=settings_of(deploy_defaults()).rolling,
)


def test_behind_a_router_rank_0_leaves_rotation_before_the_stop_and_rejoins_once_it_serves(make_group):
    def rank0(host, text):
        if "--only out" in text:
            return True, result(outcome="out", rotation={"was_serving": True, "drained": True})
        return healthy(host, text)

    members = make_group(rotation=ROTATION)
    members.hosts[0].script = rank0
    ok, text = members.cycle()
    assert (ok, text) == (True, "serving (baseline)")
    out, back = (
        commands("node1", "rotation.py", "--only out"),
        commands("node1", "rotation.py", "--only back"),
    )
    assert len(out) == len(back) == 1 and "--router http://10.0.0.9:30000" in LOG[out[0]][1]
    assert commands("node1", "preflight.py")[0] < out[0] < commands("node1", "restart.py", "--no-start")[0]
    assert commands("node1", "lastgood.py save")[0] < back[0]
    assert not commands("node2", "rotation.py")  # a follower is no router's worker


def test_a_router_that_does_not_answer_stops_nothing(make_group):
    def rank0(host, text):
        if "--only out" in text:
            return False, result(
                11,
                outcome="router_unreachable",
                cause="router http://10.0.0.9:30000: unreachable: nothing was taken out of rotation",
            )
        return healthy(host, text)

    members = make_group(rotation=ROTATION)
    members.hosts[0].script = rank0
    ok, text = members.cycle()
    assert (
        not ok
        and "unreachable: nothing was taken out of rotation" in text
        and text.endswith("nothing was stopped")
    )
    assert not [entry for entry in LOG if "restart.py" in entry[1] or "systemctl start" in entry[1]]
    assert commands("node1", "lastgood.py restore") and commands("node2", "lastgood.py restore")


def test_without_routers_nothing_rotates(make_group):
    members = make_group(
        rotation=Rotation(
            worker_url="http://10.0.0.1:30000", local_port=30000, router_urls=[], rolling=ROTATION.rolling
        )
    )
    assert members.cycle()[0] and not [entry for entry in LOG if "rotation.py" in entry[1]]


@pytest.mark.parametrize("policy", ["warn", "fail"])
def test_a_decode_check_that_could_not_measure_rolls_the_group_back_whatever_the_policy(make_group, policy):
    def rank0(host, text):
        if "decode_check.py" in text and "--restored" not in text:
            entry = {"decode_tok_s": None, "error": "no tokens", "regression": [], "accepted": False}
            return False, result(
                20, cause="decode not measured: no tokens", throughput=entry, on_regression=policy
            )
        return healthy(host, text)

    members = make_group()
    members.hosts[0].script = rank0
    ok, text = members.cycle()
    assert not ok and text.endswith("rolled back: serving group again"), text
    for name in ("node1", "node2"):
        assert commands(name, "lastgood.py restore") and not commands(name, "lastgood.py save")


# The cycle's decisions are node/cycle.py's (decide()): where the group once decided otherwise,
# the single node's rule holds.


def test_a_running_group_is_checked_from_the_gate_before_it_is_recorded(make_group):
    # As a single node's --running: nothing is recorded without its gate and decode check.
    ok, text = make_group().cycle(running=True)
    assert (ok, text) == (True, "serving (baseline)")
    assert not [entry for entry in LOG if "preflight.py" in entry[1] or "restart.py" in entry[1]]
    assert not [entry for entry in LOG if "systemctl start" in entry[1]]
    assert (
        commands("node1", "gate.py")
        < commands("node1", "decode_check.py")
        < commands("node1", "lastgood.py save")
    )
    for name in ("node1", "node2"):
        assert commands(name, "workers.py") and commands(name, "lastgood.py save")


def test_a_running_group_that_fails_its_gate_rolls_every_member_back(make_group):
    def rank0(host, text):
        if "gate.py" in text and not host.starts:
            return False, result(4, cause="timeout: last phase: starting (120.0s)")
        if "systemd.py journal" in text:
            return True, result(lines=[], cursor="c")
        return healthy(host, text)

    members = make_group()
    members.hosts[0].script = rank0
    ok, text = members.cycle(running=True)
    assert not ok and text.endswith("rolled back: serving group again"), text
    for name in ("node1", "node2"):
        assert len(commands(name, "lastgood.py restore")) == 1 and len(commands(name, "systemctl start")) == 1
        assert not commands(name, "lastgood.py save")


def test_a_refused_save_rolls_every_member_back(make_group):
    def follower(host, text):
        if "lastgood.py save" in text:
            return False, result(status.NO_SPACE, cause="no space left on device")
        return healthy(host, text)

    ok, text = make_group(follower).cycle()
    assert not ok and text.startswith("recording last known good failed on node2 (node-rank 1): no space")
    assert text.endswith("rolled back: serving group again")
    for name in ("node1", "node2"):
        assert commands(name, "lastgood.py restore")


def test_after_a_rollback_rank_0s_restored_server_is_measured_again(make_group, monkeypatch, tmp_path):
    monkeypatch.setattr(throughput, "REPORTS", tmp_path)
    members = make_group(follower_dies_on_first_start)

    def rank0(host, text):
        if "decode_check.py" in text and "--restored" in text:
            entry = {"decode_tok_s": 80.0, "restored": True, "profile": "group"}
            return True, result(throughput=entry)
        return healthy(host, text)

    members.hosts[0].script = rank0
    ok, text = members.cycle()
    assert not ok and text.endswith("rolled back: serving group again")
    measured = commands("node1", "decode_check.py", "--restored --profile group")
    assert len(measured) == 1 and measured[0] > commands("node1", "lastgood.py restore")[0]
    assert any("decode check after the rollback: group serves at 80.0 tok/s" in t for _, t in LOG)
    assert (tmp_path / "node1.jsonl").exists()


def test_a_regression_without_rollback_serves_unrecorded_whatever_the_policy(make_group):
    # --no-rollback wins over `on_regression: rollback`: it serves, is not recorded, nothing goes back.
    def rank0(host, text):
        if "decode_check.py" in text:
            return False, result(status.THROUGHPUT_REGRESSION, cause="slower", on_regression="rollback")
        return healthy(host, text)

    members = make_group()
    members.hosts[0].script = rank0
    ok, text = members.cycle(rollback=False)
    assert not ok and text == (
        "decode check regressed (on_regression: rollback; rollback disabled): the group serves, not recorded"
    )
    for name in ("node1", "node2"):
        assert not commands(name, "lastgood.py save") and not commands(name, "lastgood.py restore")


def test_the_serving_check_judges_a_group_running_an_unrecorded_configuration_from_the_gate(
    make_group, monkeypatch
):
    from sglang_deploy.operations import group

    members = make_group()
    plans = {h.name: p for h, p in zip(members.hosts, members.plans)}
    run_state.of(members.state).group_plans["g1"] = plans
    monkeypatch.setattr(group, "Group", lambda state, member, plans, stop_wait_s: members)
    assert group._check_and_record(members.state, members.hosts[0], members.member, [1], True, 5)
    assert commands("node1", "gate.py") and commands("node1", "decode_check.py")
    assert not commands("node1", "restart.py")
    for name in ("node1", "node2"):
        assert commands(name, "lastgood.py save")
