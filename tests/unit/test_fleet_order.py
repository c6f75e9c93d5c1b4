"""The fleet's order across kinds of host, as pyinfra (3.x) plans a run: a router's service
after every node's steps, through the barrier deploy.py calls on every host."""

import ast
from pathlib import Path

import pyinfra
import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.state import StateStage
from pyinfra.context import ctx_host, ctx_state
from pyinfra.operations import server

from sglang_deploy.operations.fleet_order import fleet_barrier

REPO = Path(__file__).resolve().parents[2]


def node_steps():
    server.shell(name="node: venv", commands=["true"])
    server.shell(name="node: env file", commands=["true"])
    server.shell(name="node: restart", commands=["true"])
    server.shell(name="node: serving", commands=["true"])


def router_lock():
    server.shell(name="router: rollout lock", commands=["true"])


def router_service():
    server.shell(name="router: restart", commands=["true"])


@pytest.fixture(autouse=True)
def as_the_cli(monkeypatch):
    # `pyinfra INVENTORY deploy.py` orders by where operations are called (its API by count).
    monkeypatch.setattr(pyinfra, "is_cli", True)


def planned_order(deploy_code):
    """The run's operation names, in pyinfra's order, for one node and one router."""
    inventory = Inventory((["node1", "router1"], {}))
    state = State(inventory, Config())
    state.current_op_file_number = 0
    state.set_stage(StateStage.Prepare)
    for host in inventory:
        with ctx_state.use(state), ctx_host.use(host):
            deploy_code(host.name.startswith("router"))
    return [name for op_hash in state.get_op_order() for name in state.op_meta[op_hash].names]


def without_barrier(is_router):
    if is_router:
        router_lock()
    else:
        node_steps()
    if is_router:
        router_service()


def with_barrier(is_router):
    if is_router:
        router_lock()
    else:
        node_steps()
    fleet_barrier(name="Every node's steps", what="the nodes' steps")
    if is_router:
        router_service()


def test_without_the_barrier_the_router_restarts_before_the_nodes_serve():
    # pyinfra runs different hosts' operations side by side: the router's second operation
    # beside the node's second (the old deploy.py's order on a fresh fleet).
    order = planned_order(without_barrier)
    assert order.index("router: restart") < order.index("node: serving")


def test_with_the_barrier_the_router_restarts_after_every_node_step():
    order = planned_order(with_barrier)
    assert order.index("router: rollout lock") < order.index("node: restart")
    assert order.index("router: restart") > max(order.index(n) for n in order if n.startswith("node: "))


def test_deploy_py_calls_the_barrier_on_every_host_between_the_nodes_and_the_routers():
    tree = ast.parse((REPO / "deploy.py").read_text())
    top = [node for node in tree.body if isinstance(node, (ast.Expr, ast.If))]
    calls = [ast.unparse(node) for node in top]
    barrier = next(i for i, text in enumerate(calls) if text == "every_node_served()")
    assert any("serving_node()" in text for text in calls[:barrier])
    assert any("router()" in text and "router_rollout_lock" not in text for text in calls[barrier + 1 :])
    assert any("monitoring()" in text for text in calls[barrier + 1 :])
