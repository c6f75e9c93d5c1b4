"""`pyinfra ... --dry` runs nothing on a node beyond fact gathering: every operation of
deploy.py, generated as pyinfra prepares a run, reads the node through facts only (no shell
command, no SSH session of its own), with the node serving as a re-run finds it."""

import json
from types import SimpleNamespace

import pytest
from pyinfra.context import ctx_host, ctx_state

from sglang_deploy import operations, run_state
from sglang_deploy.facts.fleet import DistInitReach, RouterGate
from sglang_deploy.facts.serving import (
    InterpreterStartup,
    LastGood,
    Preflight,
    Serving,
    UnitState,
    WorkerEnvironment,
)
from sglang_deploy.operations import group
from sglang_deploy.plan import serving_group
from sglang_deploy.plan.fleet_hosts import router_plan
from sglang_deploy.plan.host_plan import plan_for
from sglang_deploy.plan.hosts import deploy_defaults

READY = {"status": 0, "cause": None}
ACTIVE = {"ActiveState": "active", "SubState": "running", "UnitFileState": "enabled", "MainPID": "7"}
# What the facts of a node that serves (and a router that routes) answer.
FACTS = {
    UnitState: ACTIVE,
    RouterGate: READY,
    DistInitReach: READY,
    Serving: {"health": 200, "models": ["tiny-standin"], "ready": True},
    WorkerEnvironment: dict(READY, workers=[{"pid": 1}]),
    InterpreterStartup: {"purelib": "/v/lib", "site_dirs": ["/v/lib"], "sitecustomize": None},
    LastGood: dict(READY, last_good="sandbox", differs=[], not_running=None),
    Preflight: dict(READY, checks=[], warnings=[]),
}


class Channel:
    def __init__(self, host):
        self.host = host

    def open_session(self):
        self.host.ran.append("an SSH session of its own")
        raise AssertionError("an SSH session opened while the run was prepared")


class FakeHost:
    """Answers facts from FACTS; records every command run outside a fact."""

    def __init__(self, name):
        self.name, self.ran, self.facts, self.noops = name, [], [], []
        self.data = SimpleNamespace()
        client = SimpleNamespace(get_transport=lambda: Channel(self))
        self.connector = SimpleNamespace(client=client)

    def get_fact(self, fact, **kwargs):
        self.facts.append(fact.__name__)
        return FACTS.get(fact)

    def run_shell_command(self, command, print_output=False, **kwargs):
        self.ran.append(str(command))
        return True, SimpleNamespace(stdout_lines=[json.dumps(READY)], stderr_lines=[])

    def noop(self, text):
        self.noops.append(text)

    def log(self, *args, **kwargs):
        pass

    def log_styled(self, *args, **kwargs):
        pass


@pytest.fixture
def preparing():
    """pyinfra's state while it prepares a run (what `--dry` does, and then stops)."""
    hosts = {name: FakeHost(name) for name in ("node1", "node2", "router1")}
    state = SimpleNamespace(
        is_executing=False,
        failed_hosts=set(),
        inventory=SimpleNamespace(get_host=hosts.get),
    )
    with ctx_state.use(state):
        yield hosts


def generate(pyinfra_host, op, *args, **kwargs):
    """The operation's commands, generated as pyinfra does when it prepares the run."""
    with ctx_host.use(pyinfra_host):
        return list(op._inner(*args, **kwargs))


def group_members():
    data = {
        name: {
            **deploy_defaults(),
            "profile": "sandbox",
            "profile_overrides": {"engine": {"find_links": []}, "server_args": {"nnodes": 2}},
            "serving_group": "g1",
            "ssh_hostname": address,
        }
        for name, address in (("node1", "10.0.0.1"), ("node2", "10.0.0.2"))
    }
    members = serving_group.resolve_checked(list(data.items()), serving_group.profile_of)
    plans = {name: plan_for(data[name], operator_env={}, member=members[name]) for name in data}
    run = run_state.of()
    run.members, run.group_plans["g1"] = members, plans
    return members, plans


def test_the_deploy_lock_is_not_taken_while_the_run_is_prepared(preparing):
    node = preparing["node1"]
    assert generate(node, operations.deploy_lock, "/run/sd/deploy.lock", 1.0, "me") == []
    assert node.ran == [] and node.noops == [
        "the deploy lock /run/sd/deploy.lock is taken when the deploy runs"
    ]


def test_a_serving_router_is_read_through_facts(preparing):
    router = preparing["router1"]
    plan = router_plan(
        "router1",
        [
            ("router1", {**deploy_defaults(), "role": "router", "ssh_hostname": "10.0.0.5", "ssh_port": 22}),
            ("node1", {**deploy_defaults(), "profile": "sandbox", "ssh_hostname": "10.0.0.11"}),
        ],
    )
    assert generate(router, operations.router_serving, plan, "/opt/sd/node") == []
    assert router.ran == [] and "RouterGate" in router.facts


def test_a_serving_group_is_read_through_facts_on_every_member(preparing):
    members, plans = group_members()
    follower, leader = preparing["node2"], preparing["node1"]
    scripts = plans["node2"].scripts.directory
    addr = members["node2"].dist_init_addr(plans["node1"].profile.service.dist_init_port)
    assert (
        generate(follower, group.group_preflight, members["node2"], scripts, addr, plans["node1"].unit) == []
    )
    assert generate(follower, group.group_serving, members["node2"]) == []
    assert generate(leader, group.group_serving, members["node1"]) == []
    assert leader.noops[-1].startswith("group g1 serves tiny-standin")
    assert (leader.ran, follower.ran) == ([], [])
    assert "DistInitReach" in follower.facts and "WorkerEnvironment" in follower.facts


def test_a_serving_node_is_read_through_facts(preparing):
    node = preparing["node1"]
    plan = plan_for(
        {**deploy_defaults(), "profile": "sandbox", "profile_overrides": {"engine": {"find_links": []}}},
        operator_env={},
    )
    generate(node, operations.preflight, plan.scripts, engine_ready=True)
    generate(node, operations.serving, plan.scripts, plan.hook_python)
    assert node.ran == []


def test_a_server_older_than_what_is_installed_is_restarted_into_it_not_failed(preparing, monkeypatch):
    # A deploy killed after writing the files and before restarting: the workers still carry
    # the old environment, and that is no failure: the serving step restarts into the files.
    node = preparing["node1"]
    plan = plan_for(
        {**deploy_defaults(), "profile": "sandbox", "profile_overrides": {"engine": {"find_links": []}}},
        operator_env={},
    )
    stale = dict(
        READY, last_good="sandbox", differs=["env"], not_running="env written after the server started"
    )
    wrong = dict(READY, status=8, cause="SGLANG_STANDIN_LOAD_SECONDS is '3', expected '12'", workers=[])
    monkeypatch.setitem(FACTS, LastGood, stale)
    monkeypatch.setitem(FACTS, WorkerEnvironment, wrong)
    (command,) = generate(node, operations.serving, plan.scripts, plan.hook_python)
    assert command.function.__name__ == "_last_good_is_what_serves"
