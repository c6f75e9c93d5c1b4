"""Fan-out planning (plan/fanout.py): the tree, its bounds, and re-planning after a fault."""

import pytest

from sglang_deploy.plan.fanout import CONTROLLER, FanoutTree, fanout_on, plan_tree

NODES = [f"n{i}" for i in range(1, 9)]


def depth_of(parents, name):
    depth = 0
    while name is not CONTROLLER:
        name, depth = parents.get(name, CONTROLLER), depth + 1
    return depth


def test_auto_is_on_above_two_nodes_and_off_and_on_mean_it():
    assert [fanout_on("auto", n) for n in (1, 2, 3, 8)] == [False, False, True, True]
    assert fanout_on("on", 1) and not fanout_on("off", 32)
    with pytest.raises(ValueError):
        fanout_on("sometimes", 3)


def test_eight_nodes_degree_two_controller_feeds_two_each_node_serves_two_depth_minimal():
    parents = plan_tree(NODES, degree=2)
    assert set(parents) == set(NODES)
    assert [n for n, p in parents.items() if p is CONTROLLER] == ["n1", "n2"]
    for name in NODES:
        assert len([c for c, p in parents.items() if p == name]) <= 2
    # 2 + 4 + 8 slots: 8 nodes need three levels, no fewer.
    assert max(depth_of(parents, n) for n in NODES) == 3
    assert [depth_of(parents, n) for n in NODES] == [1, 1, 2, 2, 2, 2, 3, 3]


@pytest.mark.parametrize(
    "count,degree,levels", [(3, 2, 2), (6, 2, 2), (7, 2, 3), (12, 3, 2), (13, 3, 3), (5, 1, 5)]
)
def test_depth_is_the_fewest_levels_that_hold_the_nodes(count, degree, levels):
    parents = plan_tree([f"x{i}" for i in range(count)], degree=degree)
    assert max(depth_of(parents, n) for n in parents) == levels
    assert sum(p is CONTROLLER for p in parents.values()) == min(degree, count)


def test_nodes_holding_a_verified_copy_are_used_before_the_controller():
    parents = plan_tree(["n1", "n2", "n3"], holders=["h1"], degree=2)
    assert parents["n1"] == "h1" and parents["n2"] == "h1"
    assert parents["n3"] is CONTROLLER  # h1's two slots are taken; depth 1 still
    parents = plan_tree(["n1", "n2"], holders=["h1", "h2"], degree=2)
    assert parents == {"n1": "h1", "n2": "h2"}  # round-robin over the holders: the controller sends nothing


def test_a_degree_below_one_is_refused():
    with pytest.raises(ValueError):
        plan_tree(NODES, degree=0)


def test_off_is_every_node_from_the_controller():
    tree = FanoutTree.planned(NODES, degree=2, on=False)
    assert set(tree.parents.values()) == {CONTROLLER}
    assert tree.lines() == [f"from the controller: {', '.join(NODES)}"]


def test_lines_say_each_level():
    tree = FanoutTree.planned(["n1", "n2", "n3"], degree=2)
    assert tree.lines() == ["level 1: n1 <- controller, n2 <- controller", "level 2: n3 <- n1"]


def test_a_failed_parent_s_child_gets_a_verified_sibling():
    tree = FanoutTree.planned(["n1", "n2", "n3"], degree=2)
    tree.verify("n2")
    tree.fail("n1")
    assert not tree.usable("n1") and tree.usable("n2")
    assert tree.reassign("n3") == "n2"
    assert tree.parents["n3"] == "n2"


def test_a_failed_root_s_children_go_to_the_controller_when_no_copy_is_verified_yet():
    tree = FanoutTree.planned(["n1", "n2", "n3"], degree=2)
    tree.fail("n1")  # n2 still copying: the controller's slot n1 held is free again
    assert tree.reassign("n3") is CONTROLLER


def test_a_lost_source_is_no_source_even_though_it_was_verified():
    tree = FanoutTree.planned(["n1", "n2", "n3", "n4"], degree=2)
    tree.verify("n1")
    tree.verify("n2")
    tree.lose("n1")  # went away while n3 copied from it
    tree.pull_failed("n3", "n1")
    assert "n1" not in tree.sources()
    assert tree.reassign("n3") == "n2"


def test_a_source_a_node_failed_from_is_not_given_again():
    tree = FanoutTree.planned(["n1", "n2", "n3"], degree=2)
    tree.verify("n1")
    tree.verify("n2")
    tree.pull_failed("n3", "n1")  # its copy failed its check: not the source's fault, but another
    assert tree.reassign("n3") == "n2"


def test_full_sources_are_passed_over_for_the_controller_then_for_a_pending_node():
    tree = FanoutTree.planned(["a", "b", "c", "d", "e", "f", "g"], degree=2)
    assert tree.parents == {"a": None, "b": None, "c": "a", "d": "a", "e": "b", "f": "b", "g": "c"}
    tree.verify("a")  # a serves c and d: full
    tree.fail("b")  # e and f lose their parent; b's slot at the controller is free again
    assert tree.reassign("e") is CONTROLLER
    # The controller feeds a and e now, a serves two: f gets the shallowest node still
    # copying with a free slot, e (depth 1), rather than c or d (depth 2).
    assert tree.reassign("f") == "e"


def test_a_node_is_never_given_its_own_descendant():
    tree = FanoutTree.planned(["a", "b", "c"], degree=1)
    assert tree.parents == {"a": None, "b": "a", "c": "b"}
    tree.fail("a")
    tree.pull_failed("b", CONTROLLER)
    # c is the only node still copying with a free slot, but it waits for b: the controller.
    assert tree.descends_from("c", "b")
    assert tree.reassign("b") is CONTROLLER


def test_holders_are_settled_from_the_start():
    tree = FanoutTree.planned(["n1"], holders=["h1"], degree=2, on=True)
    assert tree.settled("h1") and tree.usable("h1") and not tree.settled("n1")


def test_a_node_that_failed_once_is_no_source_even_once_its_retry_is_verified():
    tree = FanoutTree.planned(["n1", "n2", "n3"], degree=2)
    tree.fail("n1")
    tree.verify("n1")  # its retry from another source passed
    assert "n1" not in tree.sources() and not tree.usable("n1")
