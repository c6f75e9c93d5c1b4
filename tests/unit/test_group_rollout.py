"""Serving groups in a fleet (operations/group.py `_lead`): `rolling_batch` groups restart at a
time, the groups that serve nothing start together first, and once the rollout stopped a later
group restarts nothing."""

from types import SimpleNamespace

import gevent
import pytest

from sglang_deploy.operations import group
from sglang_deploy.plan.fleet_hosts import Rotation
from sglang_deploy.plan.hosts import deploy_defaults
from sglang_deploy.plan.settings import settings_of
from sglang_deploy.rollout import rendezvous, waves

EVENTS = []


class FakeGroup:
    """Records when its cycle runs; the group named in ``failing`` fails it."""

    failing = ()

    def __init__(self, state, member, plans, stop_wait_s, rotation=None):
        self.name = member.group

    def cycle(self, rollback=True, preflight=True):
        EVENTS.append(("start", self.name))
        gevent.sleep(0.05)
        EVENTS.append(("end", self.name))
        return (self.name not in self.failing), f"{self.name} done"

    def restore(self):
        EVENTS.append(("restore", self.name))


class Leader:
    def __init__(self, name):
        self.name = name

    def log_styled(self, *args, **kwargs):
        pass


@pytest.fixture
def leads(monkeypatch, fresh_run):
    EVENTS.clear()
    monkeypatch.setattr(group, "Group", FakeGroup)
    fresh_run.group_plans.update({"g1": {}, "g2": {}, "g3": {}})

    def run(names, batch=1, failing=()):
        FakeGroup.failing = failing
        data = {**deploy_defaults(), "rolling_batch": batch}
        rotation = Rotation(
            "http://10.0.0.1:30000", 30000, ["http://10.0.0.9:30000"], settings_of(data).rolling
        )
        jobs = [
            gevent.spawn(
                group._lead,
                None,  # pyinfra's state: the run's (conftest's fresh one)
                Leader(f"rank0-of-{name}"),
                SimpleNamespace(group=name, label=lambda: name),
                True,
                5.0,
                rotation=rotation,
            )
            for name in names
        ]
        gevent.joinall(jobs)
        return [job.get() for job in jobs]

    return run


def test_one_group_restarts_at_a_time_with_batch_1(leads):
    assert leads(["g1", "g2"]) == [True, True]
    assert [kind for kind, _ in EVENTS] == ["start", "end", "start", "end"]


def test_two_groups_restart_together_with_batch_2(leads):
    leads(["g1", "g2"], batch=2)
    assert [kind for kind, _ in EVENTS] == ["start", "start", "end", "end"]


def test_after_a_failed_group_the_next_restarts_nothing_and_its_files_go_back(leads, fresh_run):
    assert leads(["g1", "g2"], failing=("g1",)) == [False, False]
    assert EVENTS == [("start", "g1"), ("end", "g1"), ("restore", "g2")]
    ok, text = fresh_run.group_verdicts["g2"]
    assert not ok and text.startswith("not restarted: rollout stopped at rank0-of-g1 (group g1: g1 done)")


ACTIVE = {"LoadState": "loaded", "ActiveState": "active", "SubState": "running"}
STOPPED = {"LoadState": "loaded", "ActiveState": "inactive", "SubState": "dead"}
ROUTER = "http://10.0.0.9:30000"


class FactLeader(Leader):
    """A group's rank 0 whose facts say its unit is ``unit`` and how the router lists it."""

    current_op_hash = "group-restart-op"

    def __init__(self, name, unit, router):
        super().__init__(name)
        self.unit, self.router = unit, router

    def get_fact(self, cls, **kwargs):
        from sglang_deploy.facts.fleet import ServingView

        if cls is ServingView:
            return {"routers": {ROUTER: self.router}, "ping": self.unit is ACTIVE, "last_good": True}
        return self.unit


@pytest.fixture
def group_waves(monkeypatch, caplog):
    """Every group's rank 0 runs _lead at once in one pyinfra run of the given pool size."""
    EVENTS.clear()
    monkeypatch.setattr(group, "Group", FakeGroup)

    def run(leaders, batch=1, models=None, failing=()):
        FakeGroup.failing = failing
        names = [leader.name for leader in leaders]
        state = SimpleNamespace(
            inventory=SimpleNamespace(get_active_hosts=lambda: [SimpleNamespace(name=n) for n in names]),
            pool=SimpleNamespace(size=len(names) * 2),
        )
        shared = group.run_state.of(state)
        members = {}
        for i, leader in enumerate(leaders, 1):
            name = f"g{i}"
            members[leader.name] = SimpleNamespace(group=name, is_leader=True, label=lambda name=name: name)
            members[f"follower-of-{name}"] = SimpleNamespace(group=name, is_leader=False)
            scripts = SimpleNamespace(unit="sglang.service", last_good_dir="/var/lib/x")
            shared.group_plans[name] = {leader.name: SimpleNamespace(scripts=scripts)}
        shared.members = members
        for name in names:
            rendezvous.expect(waves.GROUPS, name, state=state)
        data = {**deploy_defaults(), "rolling_batch": batch}
        models = models or {name: "m" for name in members}
        jobs = [
            gevent.spawn(
                group._lead,
                state,
                leader,
                members[leader.name],
                True,
                5.0,
                rotation=Rotation(
                    f"http://{leader.name}:30000",
                    30000,
                    [ROUTER],
                    settings_of(data).rolling,
                    model="m",
                    fleet_models=tuple(sorted(models.items())),
                ),
            )
            for leader in leaders
        ]
        with caplog.at_level("INFO"):
            gevent.joinall(jobs, raise_error=True)
        return [job.get() for job in jobs], caplog.text

    return run


def test_groups_that_serve_nothing_start_together_then_the_serving_ones_roll(group_waves):
    leaders = [
        FactLeader("a0", ACTIVE, "healthy"),
        FactLeader("b0", STOPPED, "absent"),
        FactLeader("c0", STOPPED, "absent"),
        FactLeader("d0", ACTIVE, "healthy"),
    ]
    ok, said = group_waves(leaders)
    assert ok == [True] * 4
    order = [(kind, name) for kind, name in EVENTS if kind in ("start", "end")]
    assert order[:2] == [("start", "g2"), ("start", "g3")], "the stopped groups start together, first"
    assert {name for _, name in order[2:4]} == {"g2", "g3"}
    assert order[4:] == [("start", "g1"), ("end", "g1"), ("start", "g4"), ("end", "g4")]
    assert (
        "serving groups (by rank 0): first wave (serving nothing: b0 unit stopped, c0 unit stopped)" in said
    )
    assert "then rolling 1 at a time: a0 | d0" in said


def test_a_fresh_fleet_of_groups_starts_at_once(group_waves):
    leaders = [FactLeader(f"r{i}", STOPPED, "absent") for i in range(3)]
    ok, _ = group_waves(leaders)
    assert ok == [True] * 3
    assert [kind for kind, _ in EVENTS if kind in ("start", "end")] == ["start"] * 3 + ["end"] * 3


def test_a_group_that_is_the_last_serving_its_model_is_not_restarted_after_a_failed_first_wave(
    group_waves,
):
    leaders = [FactLeader("a0", STOPPED, "absent"), FactLeader("b0", ACTIVE, "healthy")]
    ok, _ = group_waves(leaders, failing=("g1",))
    assert ok == [False, False]
    assert ("start", "g2") not in EVENTS, "b0's group serves the model alone: it must stay in rotation"


def test_rank_0_is_registered_for_both_group_waves_while_the_deploy_is_planned(fresh_run):
    leader = SimpleNamespace(group="g1", is_leader=True, leader="a0", label=lambda: "g1")
    follower = SimpleNamespace(group="g1", is_leader=False, leader="a0", label=lambda: "g1")
    group.join(leader, SimpleNamespace(name="a0"), object(), [])
    group.join(follower, SimpleNamespace(name="a1"), object(), [])
    changed = group.changed(leader)
    group.changed(follower)
    assert fresh_run.expected[waves.GROUPS] == {"a0": changed}
    assert fresh_run.expected[waves.GROUPS_REPAIRED] == {"a0": None}
