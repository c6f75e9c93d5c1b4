"""The restart operation's waves across nodes (operations/rollout._rotate, rollout/waves.py WaveRun) with fake
hosts: every node's operation runs at once; the nodes that serve nothing, read before any
restart, start together, then the serving ones roll one batch after another."""

import json
from types import SimpleNamespace

import gevent
import pytest
from pyinfra.api.command import StringCommand

from sglang_deploy.facts.fleet import ServingView
from sglang_deploy.facts.serving import UnitState
from sglang_deploy.operations import rollout as fleet_ops
from sglang_deploy.plan.fleet_hosts import Rotation
from sglang_deploy.plan.hosts import deploy_defaults
from sglang_deploy.plan.settings import settings_of
from sglang_deploy.rollout import rendezvous, waves

pytestmark = pytest.mark.usefixtures("cycle_in_session")

EVENTS = []
ROUTER = "http://10.0.0.5:30000"
ACTIVE = {"LoadState": "loaded", "ActiveState": "active", "SubState": "running"}


class Output:
    def __init__(self, lines):
        self.stdout_lines, self.stderr_lines = lines, []


class Scripts:
    directory = "/opt/sglang-deploy/node"
    unit = "sglang.service"
    last_good_dir = "/var/lib/sglang-deploy/sglang.service/last-good"

    def cycle(self, hook_files, rollback=True):
        return "python3 cycle.py"

    def restore_last_good(self):
        return "python3 lastgood.py restore"


class Node:
    """A node whose facts say ``unit``/``router``; its restart takes 0.05 s (or fails)."""

    def __init__(self, name, active="active", router="healthy", last_good=True, fails=False):
        self.name, self.fails, self.logged, self.facts_at = name, fails, [], None
        self.current_op_hash = "restart-op"
        self.unit = {**ACTIVE, "ActiveState": active}
        self.view = {"routers": {ROUTER: router}, "ping": active == "active", "last_good": last_good}

    def get_fact(self, cls, **kwargs):
        EVENTS.append(("fact", self.name))
        return {UnitState: self.unit, ServingView: self.view}[cls]

    def run_shell_command(self, command, print_output=False):
        text = str(command.bits[0]) if isinstance(command, StringCommand) else str(command)
        if "lastgood.py restore" in text and "rotation.py" not in text:
            EVENTS.append(("kept", self.name))
            return True, Output([json.dumps({"status": 0, "cause": None, "profile": "old"})])
        EVENTS.append(("start", self.name))
        gevent.sleep(0.05)
        EVENTS.append(("end", self.name))
        if self.fails:
            return False, Output([json.dumps({"status": 3, "cause": "oom", "outcome": "rolled_back"})])
        return True, Output([json.dumps({"status": 0, "cause": None, "outcome": "served", "steps": []})])

    def log(self, message, *args):
        self.logged.append(message)

    def log_styled(self, message, **kwargs):
        self.logged.append(message)


@pytest.fixture
def roll(monkeypatch, caplog):
    EVENTS.clear()
    monkeypatch.setattr(fleet_ops, "hook_paths", lambda python: {"hook": "/h.py"})

    def run(nodes, batch=1, first_wave=True, max_failures=0, pool=None, routers=(ROUTER,), models=None):
        data = {**deploy_defaults(), "rolling_batch": batch, "rolling_first_wave": first_wave}
        data["rolling_max_failures"] = max_failures
        models = models or {n.name: "m" for n in nodes}
        hosts = [SimpleNamespace(name=n.name) for n in nodes]
        state = SimpleNamespace(
            inventory=SimpleNamespace(get_active_hosts=lambda: hosts),
            pool=SimpleNamespace(size=pool or len(nodes)),
        )
        for node in nodes:
            rendezvous.expect(waves.NODES, node.name, state=state)
        jobs = []
        for node in nodes:
            rotation = Rotation(
                f"http://{node.name}:30000",
                30000,
                list(routers),
                settings_of(data).rolling,
                model=models[node.name],
                fleet_models=tuple(sorted(models.items())),
            )
            jobs.append(
                gevent.spawn(
                    fleet_ops._rotate, state, node, Scripts(), "/venv/bin/python", rotation, "new", True
                )
            )
        with caplog.at_level("INFO"):
            gevent.joinall(jobs, raise_error=True)
        return [job.get() for job in jobs], caplog.text

    return run


def starts(kind="start"):
    return [name for what, name in EVENTS if what == kind]


def test_facts_are_read_on_every_node_before_any_restart(roll):
    roll([Node("node1"), Node("node2", active="inactive"), Node("node3")])
    first_start = EVENTS.index(next(e for e in EVENTS if e[0] == "start"))
    assert {name for what, name in EVENTS[:first_start] if what == "fact"} == {"node1", "node2", "node3"}
    assert all(what != "fact" for what, _ in EVENTS[first_start:])


def test_a_fresh_fleet_starts_together(roll):
    nodes = [Node(f"node{i}", active="inactive", router="absent", last_good=False) for i in range(1, 9)]
    ok, said = roll(nodes)
    assert ok == [True] * 8
    kinds = [what for what, _ in EVENTS if what in ("start", "end")]
    assert kinds == ["start"] * 8 + ["end"] * 8, "all eight restart at once"
    assert "first wave (serving nothing: node1 not installed, node2 not installed" in said
    assert "node1, node2, node3, node4, node5, node6, node7, node8 start together" in said


def test_batches_go_by_host_name_whatever_order_the_hosts_connected_in(roll):
    # pyinfra lists active hosts as they connected: the waves were said (and run) in that order.
    nodes = [Node(f"node{i}") for i in (10, 3, 1, 2)]
    ok, said = roll(nodes, batch=2)
    assert ok == [True] * 4
    assert "rolling 2 at a time: node1, node2 | node3, node10" in said


def test_stopped_nodes_start_first_then_the_serving_ones_roll(roll):
    nodes = [
        Node(f"node{i}", active="failed" if i == 3 else "inactive" if i == 4 else "active")
        for i in range(1, 9)
    ]
    ok, said = roll(nodes, batch=2)
    assert ok == [True] * 8
    order = [(what, name) for what, name in EVENTS if what in ("start", "end")]
    assert {n for _, n in order[:2]} == {"node3", "node4"} and {w for w, _ in order[:2]} == {"start"}
    assert {n for _, n in order[2:4]} == {"node3", "node4"} and {w for w, _ in order[2:4]} == {"end"}
    assert starts()[2:] == ["node1", "node2", "node5", "node6", "node7", "node8"]
    concurrent, most = 0, 0
    for what, _ in order[4:]:
        concurrent += 1 if what == "start" else -1
        most = max(most, concurrent)
    assert most == 2, "the serving nodes roll 2 at a time"
    assert (
        "first wave (serving nothing: node3 unit failed, node4 unit stopped): node3, node4 start together"
        in said
    )
    assert "then rolling 2 at a time: node1, node2 | node5, node6 | node7, node8" in said


def test_all_serving_roll_one_at_a_time_as_before(roll):
    ok, said = roll([Node("node1"), Node("node2"), Node("node3")])
    assert ok == [True] * 3
    assert [what for what, _ in EVENTS if what in ("start", "end")] == ["start", "end"] * 3
    assert "first wave" not in said


def test_a_node_not_healthy_in_any_router_is_in_the_first_wave_even_without_other_facts(roll):
    ok, said = roll([Node("node1"), Node("node2", router="absent")])
    assert starts()[0] == "node2"
    assert "first wave (serving nothing: node2 not healthy in any router): node2 starts" in said


def test_without_routers_a_node_that_does_not_answer_is_in_the_first_wave(roll):
    nodes = [Node("node1"), Node("node2", active="inactive")]
    ok, said = roll(nodes, routers=())
    assert starts() == ["node2", "node1"]
    assert "first wave (serving nothing: node2 unit stopped)" in said


def test_a_failed_first_wave_stops_the_rollout_before_any_serving_node(roll):
    ok, _ = roll([Node("node1"), Node("node2", active="inactive", fails=True), Node("node3")])
    assert ok == [False, False, False]
    assert starts() == ["node2"]
    assert starts("kept") == ["node1", "node3"]


def test_the_last_node_of_a_model_in_rotation_is_not_restarted(roll):
    nodes = [Node("node1"), Node("node2", active="inactive", fails=True), Node("node3")]
    ok, _ = roll(nodes, max_failures=1, models={"node1": "m", "node2": "m", "node3": "k"})
    assert starts() == ["node2", "node3"]
    assert starts("kept") == ["node1"]
    assert any("last node serving m in rotation" in line for line in nodes[0].logged)


def test_first_wave_off_rolls_every_node(roll):
    ok, said = roll([Node("node1", active="inactive"), Node("node2", active="inactive")], first_wave=False)
    assert [what for what, _ in EVENTS if what in ("start", "end")] == ["start", "end"] * 2
    assert "no first wave (rolling_first_wave: false)" in said


def test_below_pyinfras_parallel_the_nodes_take_turns(roll):
    ok, said = roll([Node("node1", active="inactive"), Node("node2", active="inactive")], pool=1)
    assert ok == [True, True]
    assert [what for what, _ in EVENTS if what in ("start", "end", "fact")] == ["start", "end"] * 2
    assert "no first wave: pyinfra runs fewer hosts at once" in said
