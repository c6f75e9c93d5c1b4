"""rollout/rendezvous.py: every host arrives, one plans, the rest wait; below --parallel, turns;
who is expected comes from the run state (registered while the deploy is planned)."""

from types import SimpleNamespace

import gevent

from sglang_deploy import run_state
from sglang_deploy.rollout import rendezvous


def test_the_last_to_arrive_plans_once_with_what_every_host_brought():
    plans = []
    meeting = rendezvous.Rendezvous(["a", "b", "c"], lambda arrived: plans.append(dict(arrived)))
    meeting.arrive("b", 2)
    meeting.arrive("a", 1)
    assert not meeting.planned.is_set() and meeting.missing() == ["c"]
    meeting.arrive("c", 3)
    meeting.plan()  # never twice
    assert plans == [{"b": 2, "a": 1, "c": 3}] and meeting.wait(0)


def test_the_others_wait_for_the_plan():
    said = []
    meeting = rendezvous.Rendezvous(["a", "b"], lambda arrived: said.append("planned"))

    def host(name):
        meeting.arrive(name)
        meeting.wait()
        said.append(name)

    gevent.joinall([gevent.spawn(host, "a"), gevent.spawn(host, "b")], raise_error=True)
    assert said[0] == "planned" and sorted(said[1:]) == ["a", "b"]


def test_a_host_that_never_comes_is_named_and_the_plan_made_without_it():
    plans, late = [], []
    meeting = rendezvous.Rendezvous(["a", "b"], lambda arrived: plans.append(sorted(arrived)))
    meeting.arrive("a")
    assert meeting.wait(0.01, late=late.append) is False
    assert late == [["b"]] and plans == [["a"]]


def test_a_plan_that_raises_still_lets_the_others_go_on():
    def fails(arrived):
        raise RuntimeError("boom")

    meeting = rendezvous.Rendezvous(["a"], fails)
    try:
        meeting.arrive("a")
    except RuntimeError:
        pass
    assert meeting.wait(0)


def test_below_parallel_nothing_is_planned_and_hosts_take_turns():
    plans, active, most = [], [0], [0]
    meeting = rendezvous.Rendezvous(["a", "b", "c"], plans.append, together=False, size=2)

    def host(name):
        meeting.arrive(name)
        meeting.take_turn(name)
        active[0] += 1
        most[0] = max(most[0], active[0])
        gevent.sleep(0.01)
        active[0] -= 1
        meeting.end_turn(name)

    gevent.joinall([gevent.spawn(host, n) for n in "abc"], raise_error=True)
    assert plans == [] and most[0] == 2


def test_together_compares_pyinfras_parallel_with_the_active_hosts():
    hosts = [SimpleNamespace(name=n) for n in "abc"]
    inventory = SimpleNamespace(get_active_hosts=lambda: hosts)
    assert rendezvous.together(SimpleNamespace(inventory=inventory, pool=None)) == (True, 3)
    assert rendezvous.together(SimpleNamespace(inventory=inventory, pool=SimpleNamespace(size=2))) == (
        False,
        3,
    )


def test_the_expected_are_the_registered_active_hosts_whose_condition_holds():
    hosts = [SimpleNamespace(name=n) for n in ("a", "b", "c", "d")]
    state = SimpleNamespace(inventory=SimpleNamespace(get_active_hosts=lambda: hosts[:3]))
    changed = {"a": True, "b": False}
    assert rendezvous.expect("restart", "a", lambda: changed["a"], state=state) is not None
    rendezvous.expect("restart", "b", lambda: changed["b"], state=state)
    rendezvous.expect("restart", "c", state=state)  # no condition: always comes
    rendezvous.expect("restart", "d", state=state)  # not active (failed, or not in --limit)
    assert rendezvous.expected(state, "restart") == ["a", "c"]
    assert rendezvous.expected(state, "other") == []


def test_a_meeting_is_made_once_per_run_and_none_is_asked_again():
    state = SimpleNamespace()
    made = []
    assert rendezvous.meeting(state, "k", lambda: None) is None
    first = rendezvous.meeting(state, "k", lambda: made.append(1) or "m")
    assert rendezvous.meeting(state, "k", lambda: made.append(2) or "n") == first == "m"
    assert made == [1] and run_state.of(state).meetings == {"k": "m"}
