"""A restart's waves (rollout/order.py plan_waves, check_waves, last_in_rotation, idle_reason): the
nodes that serve nothing start together first, the serving ones roll in batches, and no wave
takes the last node serving a model out of rotation."""

import pytest

from sglang_deploy.errors import DeployError
from sglang_deploy.plan.hosts import deploy_defaults
from sglang_deploy.plan.settings import settings_of
from sglang_deploy.rollout.order import (
    NodeFacts,
    Waves,
    check_waves,
    idle_reason,
    last_in_rotation,
    plan_waves,
)

ACTIVE = {"LoadState": "loaded", "ActiveState": "active", "SubState": "running"}
IN_ROUTER = {"routers": {"http://r:30000": "healthy"}, "ping": True, "last_good": True}


def fleet(idle=None, model="m", count=8):
    idle = idle or {}
    return [NodeFacts(f"node{i}", model, idle.get(f"node{i}")) for i in range(1, count + 1)]


def test_a_fresh_fleet_starts_in_one_wave():
    nodes = fleet({f"node{i}": "not installed" for i in range(1, 9)})
    waves = plan_waves(nodes, 1)
    assert waves.first == tuple(f"node{i}" for i in range(1, 9))
    assert waves.batches == ()
    assert waves.lines() == [
        "first wave (serving nothing: "
        + ", ".join(f"node{i} not installed" for i in range(1, 9))
        + "): "
        + ", ".join(f"node{i}" for i in range(1, 9))
        + " start together"
    ]


def test_two_stopped_of_eight_start_first_then_the_rest_roll_in_batches():
    nodes = fleet({"node3": "unit failed", "node4": "unit stopped"})
    waves = plan_waves(nodes, 2)
    assert waves.first == ("node3", "node4")
    assert waves.batches == (("node1", "node2"), ("node5", "node6"), ("node7", "node8"))
    assert waves.wave_of("node4") == 0 and waves.wave_of("node5") == 2
    assert waves.lines() == [
        "first wave (serving nothing: node3 unit failed, node4 unit stopped): node3, node4 start together",
        "then rolling 2 at a time: node1, node2 | node5, node6 | node7, node8",
    ]


def test_all_serving_rolls_as_before():
    waves = plan_waves(fleet(count=4), 1)
    assert waves.first == ()
    assert waves.batches == (("node1",), ("node2",), ("node3",), ("node4",))
    assert waves.lines() == ["rolling 1 at a time: node1 | node2 | node3 | node4"]


def test_without_the_first_wave_every_node_rolls_in_batches():
    nodes = fleet({"node2": "unit stopped"}, count=3)
    waves = plan_waves(nodes, 1, first_wave=False)
    assert waves.first == () and waves.batches == (("node1",), ("node2",), ("node3",))
    assert waves.lines()[0].startswith("no first wave (rolling_first_wave: false)")
    assert (
        settings_of({**deploy_defaults(), "rolling_first_wave": "false"}).rolling.rolling_first_wave is False
    )
    assert settings_of(deploy_defaults()).rolling.rolling_first_wave is True


def test_a_plan_taking_every_serving_node_of_a_model_out_at_once_is_refused():
    nodes = fleet(count=2)
    with pytest.raises(DeployError, match="every node serving m out of rotation"):
        check_waves(Waves(batches=(("node1", "node2"),)), nodes)
    with pytest.raises(DeployError, match="node1 serve"):
        check_waves(Waves(first=("node1",), batches=(("node2",),)), nodes)


def test_a_batch_never_takes_the_last_serving_node_of_a_model_out():
    nodes = [*fleet(count=3), NodeFacts("solo", "other")]
    waves = plan_waves(nodes, 8)
    assert waves.batches == (("node1", "node2", "solo"), ("node3",))
    assert waves.cut == ("m",)
    # a node the run does not restart (serving) keeps the model in rotation
    assert plan_waves(fleet(count=2), 2, others={"m": 1}).batches == (("node1", "node2"),)
    # a model's only node restarts: nothing else could serve it
    assert plan_waves([NodeFacts("solo", "other")], 4).batches == (("solo",),)


def test_the_last_node_in_rotation_is_refused_when_the_first_wave_did_not_come_up():
    nodes = [NodeFacts("node1", "m"), NodeFacts("node2", "m", "unit failed"), NodeFacts("node3", "k")]
    waves = plan_waves(nodes, 1)
    assert waves.first == ("node2",)
    why = last_in_rotation("node1", nodes, waves, done=set(), failed={"node2"})
    assert why == "it is the last node serving m in rotation (node2 not serving)"
    assert last_in_rotation("node1", nodes, waves, done={"node2"}, failed=set()) is None
    assert last_in_rotation("node3", nodes, waves, done=set(), failed={"node2"}) is None


@pytest.mark.parametrize(
    "unit, view, routers, why",
    [
        ({"LoadState": "not-found", "ActiveState": "inactive"}, None, True, "not installed"),
        ({**ACTIVE, "ActiveState": "inactive"}, {**IN_ROUTER, "last_good": False}, True, "not installed"),
        ({**ACTIVE, "ActiveState": "failed"}, IN_ROUTER, True, "unit failed"),
        ({**ACTIVE, "ActiveState": "activating", "SubState": "auto-restart"}, IN_ROUTER, True, "unit failed"),
        ({**ACTIVE, "ActiveState": "inactive"}, IN_ROUTER, True, "unit stopped"),
        (
            ACTIVE,
            {**IN_ROUTER, "routers": {"a": "absent", "b": "unhealthy"}},
            True,
            "not healthy in any router",
        ),
        (ACTIVE, {**IN_ROUTER, "routers": {"a": "absent", "b": "healthy"}}, True, None),
        # a router that did not answer says nothing: the node rolls as serving
        (ACTIVE, {**IN_ROUTER, "routers": {"a": "absent", "b": "unreachable"}}, True, None),
        (ACTIVE, None, True, None),
        (ACTIVE, {"routers": {}, "ping": False, "last_good": True}, False, "not answering /ping"),
        (ACTIVE, {"routers": {}, "ping": True, "last_good": True}, False, None),
    ],
)
def test_what_serves_nothing(unit, view, routers, why):
    assert idle_reason(unit, view, routers) == why
