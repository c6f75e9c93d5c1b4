"""The restart cycle on the node (cycle.py): which steps run in which order, and its result."""

import json
import shlex
import sys

import pytest

from sglang_deploy.node import cycle
from sglang_deploy.node.lib import result, status


def _step(tmp_path, name, outcomes, **details):
    """A stand-in for one of our scripts: logs that it ran, prints a progress line and its
    result line; its n-th run exits with the n-th of ``outcomes`` ((code, cause); the last
    repeats)."""
    log = tmp_path / "ran"
    lines = [
        json.dumps(dict(details, status=code, result=status.name(code), cause=cause))
        for code, cause in outcomes
    ]
    code_py = (
        f"import json, os; log = {str(log)!r}; "
        f"n = open(log).read().split().count({name!r}) if os.path.exists(log) else 0; "
        f"open(log, 'a').write({name!r} + '\\n'); print('[   0.1s] {name} progress'); "
        f"line = {lines!r}[min(n, {len(lines) - 1})]; print(line); "
        f"raise SystemExit(json.loads(line)['status'])"
    )
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(code_py)}"


def _commands(tmp_path, **outcomes):
    """Every step succeeds unless ``outcomes`` says otherwise (name -> [(code, cause)] by run)."""
    commands = {}
    for name in cycle.STEPS:
        runs = outcomes.get(name, [(0, None)])
        details = {"profile": "previous"} if name == "restore" else {}
        commands[name] = _step(tmp_path, name, runs, **details)
    return commands


def _run(tmp_path, capsys, rollback=True, **outcomes):
    code = cycle.cycle(_commands(tmp_path, **outcomes), rollback)
    out = capsys.readouterr().out.splitlines()
    ran = (tmp_path / "ran").read_text().split()
    return code, result.parse(out), ran, result.progress(out)


def test_a_good_configuration_is_served_and_recorded(tmp_path, capsys):
    code, found, ran, progress = _run(tmp_path, capsys)
    assert code == status.READY and found["outcome"] == "served" and found["cause"] is None
    assert ran == ["preflight", "switch", "restart", "gate", "workers", "recheck", "save"]
    # The steps' progress streams through; their result lines do not.
    assert progress == ["[   0.1s] %s progress" % name for name in ran]


def test_a_failed_preflight_stops_nothing_and_puts_the_files_back(tmp_path, capsys):
    code, found, ran, _ = _run(tmp_path, capsys, preflight=[(status.PREFLIGHT_FAILED, "port 30000 is held")])
    assert code == status.PREFLIGHT_FAILED and found["outcome"] == "preflight_failed"
    assert ran == ["preflight", "restore"] and found["restored"] is True
    assert found["cause"] == "port 30000 is held"


def test_a_failed_gate_rolls_back_to_the_last_known_good(tmp_path, capsys):
    code, found, ran, progress = _run(
        tmp_path, capsys, gate=[(status.FAILED_START, "cuda-oom: CUDA out of memory"), (0, None)]
    )
    assert code == status.FAILED_START and found["outcome"] == "rolled_back"
    assert found["profile"] == "previous" and found["cause"] == "cuda-oom: CUDA out of memory"
    assert ran == ["preflight", "switch", "restart", "gate", "restore", "restart", "gate"]
    assert "rolling back to the last configuration that passed the gate" in progress
    assert [s["step"] for s in found["steps"] if s["status"]] == ["readiness gate"]


def test_without_rollback_the_node_is_left_as_it_is(tmp_path, capsys):
    code, found, ran, _ = _run(
        tmp_path, capsys, rollback=False, workers=[(status.WORKER_ENV_MISMATCH, "NCCL_ALGO is missing")]
    )
    assert code == status.WORKER_ENV_MISMATCH and found["outcome"] == "failed" and found["restored"] is False
    assert ran == ["preflight", "switch", "restart", "gate", "workers"]


def test_nothing_to_roll_back_to(tmp_path, capsys):
    code, found, ran, _ = _run(
        tmp_path,
        capsys,
        gate=[(status.TIMEOUT, "timeout: last phase: loading")],
        restore=[(status.NO_LAST_GOOD, "nothing to roll back to")],
    )
    assert found["outcome"] == "rollback_failed" and found["restored"] is False
    assert [(s["step"], s["cause"]) for s in found["steps"] if s["status"]] == [
        ("readiness gate", "timeout: last phase: loading"),
        ("rollback", "nothing to roll back to"),
    ]


def test_a_step_that_dies_without_a_result_line_is_named_by_its_last_words(tmp_path, capsys):
    commands = _commands(tmp_path)
    commands["restart"] = f"{shlex.quote(sys.executable)} -c 'raise OSError(\"boom\")'"
    cycle.cycle(commands)
    found = result.parse(capsys.readouterr().out.splitlines())
    assert found["steps"][2] == {"step": "restart", "status": 1, "cause": "OSError: boom"}


def test_a_failed_switch_stops_nothing_and_puts_the_files_back(tmp_path, capsys):
    code, found, ran, _ = _run(tmp_path, capsys, switch=[(status.PREFLIGHT_FAILED, "not a finished venv")])
    assert found["outcome"] == "preflight_failed" and ran == ["preflight", "switch", "restore"]


def test_every_step_is_required():
    with pytest.raises(SystemExit):
        cycle.main(["--steps-json", json.dumps({"preflight": "true"})])


def test_a_rollback_that_fails_its_gate_too(tmp_path, capsys):
    code, found, ran, _ = _run(tmp_path, capsys, gate=[(status.HUNG, "hung: no journal line")])
    assert found["outcome"] == "rollback_failed" and found["restored"] is True
    assert found["profile"] == "previous" and code == status.HUNG


def test_node_scripts_hand_the_cycle_their_own_command_lines():
    from test_operations import PLAN

    scripts = PLAN.scripts
    command = scripts.cycle({"hook": "/site/sglang_deploy_env.py"}, rollback=False)
    argv = shlex.split(command)
    assert argv[:2] == ["python3", f"{scripts.directory}/cycle.py"] and argv[-1] == "--no-rollback"
    steps = json.loads(argv[argv.index("--steps-json") + 1])
    assert steps == {
        "preflight": scripts.preflight(f"{scripts.venv}/bin/python"),
        "switch": scripts.switch(),
        "restart": scripts.restart(),
        "gate": scripts.gate(),
        "workers": scripts.workers(),
        "recheck": scripts.recheck(),
        "save": scripts.save_last_good({"hook": "/site/sglang_deploy_env.py"}),
        "restore": scripts.restore_last_good(),
        "decode": scripts.decode_check(),
        "model": scripts.model_swap(),  # the profile stages its model: swapped in after the switch
    }


class _Host:
    def __init__(self):
        self.said = []

    def log_styled(self, message, **_):
        self.said.append(message)


@pytest.mark.parametrize(
    "found, said, served",
    [
        ({"outcome": "served", "steps": []}, [], True),
        (
            {"outcome": "preflight_failed", "restored": True},
            ["nothing was stopped: the running server is untouched"],
            False,
        ),
        ({"outcome": "preflight_failed", "restored": False}, [], False),
        ({"outcome": "failed", "restored": False}, ["rollback disabled: the node is left as it is"], False),
        (
            {"outcome": "rolled_back", "restored": True, "profile": "node1"},
            ["rolled back: serving node1 again"],
            False,
        ),
        (
            {"outcome": "rollback_failed", "restored": True, "profile": "node1"},
            ["rollback to node1 failed too"],
            False,
        ),
    ],
)
def test_the_controller_says_the_outcome_in_the_operators_words(found, said, served):
    from sglang_deploy.operations.service import say_outcome

    host = _Host()
    assert say_outcome(host, found) is served
    assert host.said == said


def test_a_refused_save_restores_the_last_known_good(tmp_path, capsys):
    # Left unrecorded, the new configuration would crash-loop with nothing to restore it from.
    code, found, ran, progress = _run(tmp_path, capsys, save=[(status.NO_SPACE, "no space left on device")])
    assert ran == [
        "preflight",
        "switch",
        "restart",
        "gate",
        "workers",
        "recheck",
        "save",
        "restore",
        "restart",
        "gate",
    ]
    assert found["outcome"] == "rolled_back" and found["restored"] is True and found["profile"] == "previous"
    assert code == status.NO_SPACE and found["cause"] == "no space left on device"
    assert "rolling back to the last configuration that passed the gate" in progress


def test_a_refused_save_of_a_running_server_restores_the_last_known_good(tmp_path, capsys):
    code = cycle.cycle(_commands(tmp_path, save=[(status.NO_SPACE, "full")]), running=True)
    found = result.parse(capsys.readouterr().out.splitlines())
    assert (tmp_path / "ran").read_text().split() == [
        "gate",
        "workers",
        "recheck",
        "save",
        "restore",
        "restart",
        "gate",
    ]
    assert found["outcome"] == "rolled_back" and code == status.NO_SPACE


def test_a_refused_save_without_rollback_is_left_as_it_is(tmp_path, capsys):
    code, found, ran, _ = _run(tmp_path, capsys, rollback=False, save=[(status.NO_SPACE, "full")])
    assert found["outcome"] == "failed" and found["restored"] is False and code == status.NO_SPACE
    assert ran == ["preflight", "switch", "restart", "gate", "workers", "recheck", "save"]


REGRESSED = {"status": status.THROUGHPUT_REGRESSION}
UNMEASURED = {"status": status.DECODE_UNMEASURED, "on_regression": "warn"}
CYCLE = ["preflight", "switch", "restart", "gate", "workers", "decode"]
ROLLBACK = ["rollback", "restart", "gate"]


@pytest.mark.parametrize(
    "settings, failing, outcome, details, ran",
    [
        ({}, {}, "served", {}, CYCLE + ["recheck", "save"]),
        ({}, {"preflight": [{}]}, "preflight_failed", {"restored": True}, ["preflight", "restore"]),
        ({"running": True}, {}, "served", {}, ["gate", "workers", "decode", "recheck", "save"]),
        # A canary that failed its bake: straight to the rollback, never saved again.
        (
            {"revert": True},
            {},
            "rolled_back",
            {"restored": True, "profile": "previous"},
            ROLLBACK + ["remeasure"],
        ),
        (
            {"revert": True},
            {"gate": [{}]},
            "rollback_failed",
            {"restored": True, "profile": "previous"},
            ROLLBACK,
        ),
        (
            {"running": True},
            {"gate": [{}]},
            "rolled_back",
            {"restored": True, "profile": "previous"},
            ["gate", "rollback", "restart", "gate", "remeasure"],
        ),
        ({}, {"decode": [dict(REGRESSED, on_regression="fail")]}, "regressed", {"restored": False}, CYCLE),
        (
            {},
            {"decode": [dict(REGRESSED, on_regression="rollback")]},
            "rolled_back",
            {"restored": True, "profile": "previous"},
            CYCLE + ROLLBACK + ["remeasure"],
        ),
        (
            {"rollback": False},
            {"decode": [dict(REGRESSED, on_regression="rollback")]},
            "regressed",
            {"restored": False},
            CYCLE,
        ),
        (
            {},
            {"decode": [UNMEASURED]},
            "rolled_back",
            {"restored": True, "profile": "previous"},
            CYCLE + ["recheck"] + ROLLBACK + ["remeasure"],
        ),
        ({"rollback": False}, {"decode": [UNMEASURED]}, "failed", {"restored": False}, CYCLE + ["recheck"]),
        (
            {},
            {"save": [{}]},
            "rolled_back",
            {"restored": True, "profile": "previous"},
            CYCLE + ["recheck", "save"] + ROLLBACK + ["remeasure"],
        ),
        # Dead (or restarted) since its gate, found by the recheck right before the save: never
        # recorded, rolled back; a decode check that could not measure is rechecked for its cause.
        (
            {},
            {"recheck": [{}]},
            "rolled_back",
            {"restored": True, "profile": "previous"},
            CYCLE + ["recheck"] + ROLLBACK + ["remeasure"],
        ),
        (
            {"running": True},
            {"recheck": [{}]},
            "rolled_back",
            {"restored": True, "profile": "previous"},
            ["gate", "workers", "decode", "recheck"] + ROLLBACK + ["remeasure"],
        ),
        ({"rollback": False}, {"recheck": [{}]}, "failed", {"restored": False}, CYCLE + ["recheck"]),
        (
            {},
            {"gate": [{}], "rollback": [{}]},
            "rollback_failed",
            {"restored": False, "profile": None},
            ["preflight", "switch", "restart", "gate", "rollback"],
        ),
        (
            {},
            {"gate": [{}, {}]},
            "rollback_failed",
            {"restored": True, "profile": "previous"},
            ["preflight", "switch", "restart", "gate"] + ROLLBACK,
        ),
    ],
)
def test_the_decisions_are_made_once_whatever_runs_the_steps(settings, failing, outcome, details, ran):
    # decide() is what a node's cycle and a serving group's restart both run: here with a runner
    # whose steps pass unless ``failing`` gives a step's failed results, run by run.
    steps = []

    def run(name, profile=None):
        steps.append(name)
        assert profile == ("previous" if name == "remeasure" else None)
        failures = failing.get(name, [])
        n = steps.count(name) - 1
        if n < len(failures):
            return False, failures[n]
        return True, {"profile": "previous"} if name == "rollback" else {}

    assert cycle.decide(run, **settings) == (outcome, details)
    assert steps == ran


def test_a_revert_restores_what_was_kept_and_gates_it(tmp_path, capsys):
    code = cycle.cycle(_commands(tmp_path), revert=True)
    found = result.parse(capsys.readouterr().out.splitlines())
    assert (tmp_path / "ran").read_text().split() == ["restore", "restart", "gate"]
    assert code == status.READY and found["outcome"] == "rolled_back" and found["profile"] == "previous"


DIED = "scheduler-died: a scheduler process died: Subprocess scheduler_1 (pid=4243) crashed"


def test_a_server_that_died_after_its_gate_is_not_recorded_and_rolled_back(tmp_path, capsys):
    code, found, ran, progress = _run(tmp_path, capsys, recheck=[(status.FAILED_START, DIED)])
    assert ran == [
        "preflight",
        "switch",
        "restart",
        "gate",
        "workers",
        "recheck",
        "restore",
        "restart",
        "gate",
    ]
    assert found["outcome"] == "rolled_back" and found["profile"] == "previous"
    assert code == status.FAILED_START and found["cause"] == DIED
    assert "rolling back to the last configuration that passed the gate" in progress


def test_a_death_during_the_decode_check_is_the_cycles_cause(tmp_path, capsys):
    # The decode check only sees a closed port; the recheck reads why from the server's journal.
    commands = _commands(tmp_path, recheck=[(status.FAILED_START, DIED)])
    commands["decode"] = _step(
        tmp_path, "decode", [(status.DECODE_UNMEASURED, "decode not measured: Connection refused"), (0, None)]
    )
    code = cycle.cycle(commands)
    found = result.parse(capsys.readouterr().out.splitlines())
    ran = (tmp_path / "ran").read_text().split()
    assert "save" not in ran and ran[5:8] == ["decode", "recheck", "restore"]
    assert found["outcome"] == "rolled_back" and code == status.FAILED_START and found["cause"] == DIED
    assert [s["step"] for s in found["steps"] if s["status"]] == [
        "decode check",
        "recheck of the gated server",
    ]
