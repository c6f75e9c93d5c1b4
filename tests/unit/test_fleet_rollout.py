"""The controller's side of a rolling restart (operations/fleet._rotate) with a fake host: the
first failure stops the rollout, later nodes keep their previous configuration, and a node that
becomes unreachable mid-restart stops it naming that node."""

import json

import pytest
from pyinfra.api.command import StringCommand

from sglang_deploy import run_state
from sglang_deploy.operations import rollout as fleet_ops
from sglang_deploy.plan.fleet_hosts import Rotation
from sglang_deploy.plan.settings import RollingRestarts
from sglang_deploy.report import outcome
from sglang_deploy.report import throughput_log as throughput

pytestmark = pytest.mark.usefixtures("cycle_in_session")


class Output:
    def __init__(self, lines):
        self.stdout_lines, self.stderr_lines = lines, []


class FakeHost:
    def __init__(self, name, answer):
        self.name, self.answer, self.commands, self.logged = name, answer, [], []

    def run_shell_command(self, command, print_output=False):
        text = str(command.bits[0]) if isinstance(command, StringCommand) else str(command)
        self.commands.append(text)
        return self.answer(text)

    def log_styled(self, message, **kwargs):
        self.logged.append(message)

    def log(self, message, *args):
        self.logged.append(message)


class Scripts:
    directory = "/opt/sglang-deploy/node"

    def cycle(self, hook_files, rollback=True):
        return "python3 cycle.py"

    def restore_last_good(self):
        return "python3 lastgood.py restore"


ROTATION = Rotation(
    "http://10.0.0.11:30000",
    30000,
    ["http://10.0.0.5:30000"],
    RollingRestarts(
        rolling_batch=1,
        rolling_max_failures=0,
        rolling_drain_timeout_s=60,
        rolling_healthy_timeout_s=60,
        rolling_without_routers=False,
    ),
)


def line(**fields):
    return json.dumps(dict({"status": 0, "cause": None, "steps": []}, **fields))


@pytest.fixture(autouse=True)
def no_hook_facts(monkeypatch):
    monkeypatch.setattr(fleet_ops, "hook_paths", lambda python: {"hook": "/h.py"})


def rotate(host):
    return fleet_ops._rotate(None, host, Scripts(), "/venv/bin/python", ROTATION, "rolled", True)


def restored(text):
    return True, Output([line(profile="sandbox")])


def test_first_failure_stops_the_rollout_and_later_nodes_keep_their_configuration():
    ok = FakeHost(
        "n1", lambda c: (True, Output([line(outcome="served", rotation={"routers": ["r"], "out_s": 9.0})]))
    )
    assert rotate(ok) is True
    assert "rotation.py" in ok.commands[0] and "--cycle" in ok.commands[0]
    bad = FakeHost(
        "n2",
        lambda c: (
            False,
            Output(
                [
                    line(
                        status=3,
                        outcome="rolled_back",
                        cause="scheduler died",
                        profile="sandbox",
                        restored=True,
                    )
                ]
            ),
        ),
    )
    assert rotate(bad) is False
    later = FakeHost("n3", restored)
    assert rotate(later) is False
    assert later.commands == ["python3 lastgood.py restore"], "n3 must not be restarted"
    assert any("rollout stopped at n2 (scheduler died); restarted before it: n1" in m for m in later.logged)
    notes = run_state.of().rollout_notes()
    assert notes == {
        "n1": "serves rolled, back in rotation",
        "n2": "rolled back: serves sandbox",
        "n3": "not restarted: serves sandbox",
    }


def test_unreachable_node_mid_rollout_stops_it_naming_the_node():
    def drop(command):
        raise OSError("Socket is closed")

    gone = FakeHost("n1", drop)
    assert rotate(gone) is False
    assert any("n1 became unreachable mid-rollout" in m for m in gone.logged)
    later = FakeHost("n2", restored)
    rotate(later)
    assert any("rollout stopped at n1 (n1 became unreachable" in m for m in later.logged)


@pytest.mark.parametrize(
    "outcome, cause",
    [
        (
            "router_unreachable",
            "router http://10.0.0.5:30000: unreachable: nothing was taken out of rotation",
        ),
        (
            "last_in_rotation",
            "router http://10.0.0.5:30000: http://10.0.0.11:30000 is the last routable worker of tiny "
            "(http://10.0.0.12:30000 pending): nothing was taken out of rotation",
        ),
    ],
)
def test_router_refusal_restarts_nothing_later(outcome, cause):
    refused = FakeHost(
        "n1",
        lambda c: (False, Output([line(status=11, outcome=outcome, restored=True, cause=cause)])),
    )
    assert rotate(refused) is False
    assert any(f"rollout refused: {cause}" in m for m in refused.logged)
    later = FakeHost("n2", restored)
    rotate(later)
    assert later.commands == ["python3 lastgood.py restore"]


def test_a_rotated_restart_says_and_records_its_decode_check(tmp_path, monkeypatch):
    monkeypatch.setattr(throughput, "REPORTS", tmp_path)
    slower = {
        "profile": "rolled",
        "decode_tok_s": 60.1,
        "change_pct": -27.1,
        "baseline": {"profile": "sandbox", "decode_tok_s": 82.4, "time": "t0"},
        "regression": ["-27% vs baseline 82.4 exceeds max_regression_pct 10"],
        "on_regression": "rollback",
    }
    regressed = FakeHost(
        "n1",
        lambda c: (
            False,
            Output(
                [
                    line(
                        status=18,
                        outcome="rolled_back",
                        cause="decode regressed",
                        profile="sandbox",
                        restored=True,
                        throughput=slower,
                        rotation={"routers": ["r"], "out_s": 9.0},
                    )
                ]
            ),
        ),
    )
    assert rotate(regressed) is False
    assert any(
        m.startswith("decode check: 60.1 tok/s (-27% vs baseline 82.4): regression") for m in regressed.logged
    ), regressed.logged
    assert throughput.read(tmp_path / "n1.jsonl") == [dict(slower, host="n1")]
    assert run_state.of().rollout_notes() == {"n1": "rolled back: serves sandbox"}


def test_without_routers_a_served_node_needs_no_note_and_a_rolled_back_one_says_what_it_serves():
    alone = Rotation("http://10.0.0.11:30000", 30000, [], ROTATION.rolling)
    ok = FakeHost("n1", lambda c: (True, Output([line(outcome="served")])))
    assert fleet_ops._rotate(None, ok, Scripts(), "/venv/bin/python", alone, "rolled", True)
    bad = FakeHost(
        "n2",
        lambda c: (
            False,
            Output([line(status=3, outcome="rolled_back", cause="oom", profile="sandbox", restored=True)]),
        ),
    )
    assert not fleet_ops._rotate(None, bad, Scripts(), "/venv/bin/python", alone, "rolled", True)
    assert run_state.of().rollout_notes() == {"n2": "rolled back: serves sandbox"}


def test_a_node_a_dead_router_did_not_take_back_says_what_it_serves():
    # The router died while n1 restarted: n1 serves the new configuration, out of rotation;
    # n2 (one failure is allowed) failed its preflight: its files went back to what it serves.
    tolerant = Rotation(
        ROTATION.worker_url,
        ROTATION.local_port,
        ROTATION.router_urls,
        ROTATION.rolling.model_copy(update={"rolling_max_failures": 1}),
    )
    dead = "router http://10.0.0.5:30000: unreachable (Connection refused)"
    out = FakeHost(
        "n1",
        lambda c: (
            False,
            Output(
                [
                    line(
                        status=4,
                        outcome="served",
                        cause=dead,
                        rotation_failed=dead,
                        rotation={"routers": ["r"], "out_s": 9.0},
                    )
                ]
            ),
        ),
    )
    assert fleet_ops._rotate(None, out, Scripts(), "/venv/bin/python", tolerant, "rolled", True) is False
    steps = [
        {"step": "restoring the last known good files", "status": 0, "cause": None, "profile": "sandbox"}
    ]
    refused = FakeHost(
        "n2",
        lambda c: (False, Output([line(status=11, outcome="preflight_failed", restored=True, steps=steps)])),
    )
    assert fleet_ops._rotate(None, refused, Scripts(), "/venv/bin/python", tolerant, "rolled", True) is False
    notes = run_state.of().rollout_notes()
    assert notes == {
        "n1": f"serves rolled, out of rotation (back in rotation failed: {dead})",
        "n2": "preflight failed: serves sandbox",
    }
    lines = outcome.with_rollout_notes([outcome.Outcome("n1", outcome.FAILED, "at 'Restart'")], notes)
    assert "not serving" not in lines[0].line()


def test_the_rotation_line_says_a_load_that_could_not_be_read():
    turn = {"routers": ["http://r:30000"], "out_s": 3.0, "drain_s": 2.0, "drained": False}
    unknown = fleet_ops.rotation_line(dict(turn, in_flight_left=None, load_unknown="HTTP 503"))
    assert (
        unknown == "out of rotation 3.0s (drained in 2.0s, load unknown: HTTP 503); routers: http://r:30000"
    )
    assert "2 left" in fleet_ops.rotation_line(dict(turn, in_flight_left=2))
    assert "left" not in fleet_ops.rotation_line(dict(turn, drained=True))
