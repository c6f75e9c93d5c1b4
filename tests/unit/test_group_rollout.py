"""Serving groups in a fleet (operations/group.py `_lead`): `rolling_batch` groups restart at a
time, and once the rollout stopped a later group restarts nothing."""

from types import SimpleNamespace

import gevent
import pytest

from sglang_deploy.operations import group
from sglang_deploy.plan.fleet import rolling_settings
from sglang_deploy.plan.fleet_hosts import Rotation
from sglang_deploy.plan.hosts import deploy_defaults

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
        rotation = Rotation("http://10.0.0.1:30000", 30000, ["http://10.0.0.9:30000"], rolling_settings(data))
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
    assert not ok and text.startswith("not restarted: rollout stopped at group g1 (g1 done)")
