"""operations/fanout.py's run, in greenlets as pyinfra runs hosts, the copies stood in for:
a child copies only once its parent's copy is verified, the controller feeds at most
fanout_degree nodes at once, a node that fails is nobody's source, a source that goes away
mid-copy is replaced, and every grant is revoked at the end."""

from types import SimpleNamespace

import gevent
import pytest
from pyinfra.connectors.util import CommandOutput

from sglang_deploy.operations import fanout
from sglang_deploy.plan.fanout import CONTROLLER


class FakeHost:
    def __init__(self, name):
        self.name, self.data, self.said = name, {"fanout_degree": 2}, []

    def log(self, text, *args):
        self.said.append(text)

    def log_styled(self, text, **kwargs):
        self.said.append(text)


class FakeInventory:
    def __init__(self, hosts):
        self.hosts = {h.name: h for h in hosts}

    def get_host(self, name):
        return self.hosts[name]


@pytest.fixture
def world(monkeypatch):
    hosts = [FakeHost(f"n{i}") for i in range(1, 4)]
    state = SimpleNamespace(inventory=FakeInventory(hosts))
    events, commands = [], []

    def from_node(host, copy, run, source, settings):
        events.append(("pull", host.name, source, run.tree.verified.copy()))
        gevent.sleep(0.01)
        outcome = world.pulls.get((host.name, source), (True, False))
        events.append(("pulled", host.name, source, outcome[0]))
        return outcome

    def granted(run, source):
        run.granted.setdefault(source, ["ssh-ed25519 AAAAhost"])
        return True

    def run_remote(host, command, **kwargs):
        commands.append((host.name, str(command)))
        return True, CommandOutput([])

    monkeypatch.setattr(fanout, "_from_node", from_node)
    monkeypatch.setattr(fanout, "_granted", granted)
    monkeypatch.setattr(fanout.remote, "run", run_remote)
    monkeypatch.setattr(fanout, "run_id", lambda state: "r1")
    world = SimpleNamespace(hosts=hosts, state=state, events=events, commands=commands, pulls={}, feeds={})
    world.active = {"now": 0, "most": 0}
    return world


def controller_copy(world, name):
    def copy(state, host):
        world.active["now"] += 1
        world.active["most"] = max(world.active["most"], world.active["now"])
        world.events.append(("feed", host.name))
        gevent.sleep(0.02)
        world.active["now"] -= 1
        return world.feeds.get(name, True)

    return copy


def run(world, names=("n1", "n2", "n3"), holders=()):
    op = fanout.OpFanout(world.state, [*names, *holders])
    for name in holders:
        op.arrive(name, fanout.Arrived("holder", "d1", f"/models/{name}"))
    copies = {}
    for name in names:
        copies[name] = fanout.Copy(
            f"model {name}", "d1", "/models/m", "/opt/node", controller_copy(world, name)
        )
        op.arrive(name, fanout.Arrived("needs", "d1", "/models/m"))
    hosts = {h.name: h for h in world.hosts}
    greenlets = {n: gevent.spawn(fanout.staged, world.state, hosts[n], copies[n], op) for n in names}
    gevent.joinall(list(greenlets.values()), timeout=10)
    return {n: g.value for n, g in greenlets.items()}, op.trees["d1"]


def test_a_child_copies_only_from_a_verified_parent_and_the_controller_feeds_two(world):
    outcome, tree_run = run(world)
    assert outcome == {"n1": True, "n2": True, "n3": True}
    assert [e for e in world.events if e[0] == "feed"] == [("feed", "n1"), ("feed", "n2")]
    pull = next(e for e in world.events if e[0] == "pull")
    assert pull[1:3] == ("n3", "n1") and "n1" in pull[3]  # n1 verified before n3 started
    assert world.active["most"] <= 2
    # The last node out revokes the grant on n1, and every node removed its key directory.
    revokes = [c for c in world.commands if "fanout_access.py revoke" in c[1]]
    assert [c[0] for c in revokes] == ["n1"] and "sglang-deploy-fanout:r1:d1" in revokes[0][1]
    assert {c[0] for c in world.commands if c[1].startswith("rm -rf ")} == {"n1", "n2", "n3"}


def test_a_root_that_fails_is_nobody_s_source_its_child_gets_the_sibling(world):
    world.feeds["n1"] = False
    world.pulls[("n1", "n2")] = (False, False)  # n1 fails whatever it copies from
    world.pulls[("n1", "n3")] = (False, False)
    outcome, tree_run = run(world)
    assert outcome["n3"] is True and outcome["n2"] is True and outcome["n1"] is False
    n3_pulls = [e[2] for e in world.events if e[0] == "pull" and e[1] == "n3"]
    assert "n1" not in n3_pulls and n3_pulls[-1] == "n2"
    assert "n1" in tree_run.tree.failed and "n1" not in tree_run.tree.sources()


def test_a_parent_that_goes_away_mid_copy_is_lost_and_the_child_copies_from_another(world):
    world.pulls[("n3", "n1")] = (False, True)  # the link to n1 dropped: its fault
    outcome, tree_run = run(world)
    assert outcome == {"n1": True, "n2": True, "n3": True}
    assert [e[2] for e in world.events if e[0] == "pull" and e[1] == "n3"] == ["n1", "n2"]
    assert "n1" in tree_run.tree.lost
    assert any("copies from n2 instead" in line for line in world.hosts[2].said)


def test_a_child_out_of_sources_tries_the_controller_last_then_fails(world):
    world.pulls[("n3", "n1")] = (False, False)
    world.pulls[("n3", "n2")] = (False, False)
    world.feeds["n3"] = False
    outcome, tree_run = run(world)
    assert outcome["n3"] is False
    tried = [
        e[2] if e[0] == "pull" else CONTROLLER
        for e in world.events
        if e[1] == "n3" and e[0] in ("pull", "feed")
    ]
    assert tried[0] == "n1" and CONTROLLER in tried and len(tried) == fanout.MAX_ATTEMPTS
    assert any("no source left" in line for line in world.hosts[2].said)


def test_two_nodes_in_auto_copy_from_the_controller_at_once(world):
    outcome, tree_run = run(world, names=("n1", "n2"))
    assert outcome == {"n1": True, "n2": True} and not tree_run.tree.on
    assert not [e for e in world.events if e[0] == "pull"]


def test_a_node_holding_the_bytes_serves_and_the_controller_sends_nothing(world):
    world.hosts.append(FakeHost("h1"))
    world.state.inventory.hosts["h1"] = world.hosts[-1]
    outcome, tree_run = run(world, names=("n1", "n2", "n3"), holders=("h1",))
    assert outcome == {"n1": True, "n2": True, "n3": True}
    feeds = [e for e in world.events if e[0] == "feed"]
    assert feeds == [("feed", "n3")]  # h1 serves two; the third at depth 1 from the controller
    assert {e[2] for e in world.events if e[0] == "pull" and e[1] in ("n1", "n2")} == {"h1"}


def staging_commands(tmp_path, monkeypatch, names, digests, fanout_mode="auto"):
    """model_staged's commands on each of ``names`` in one executing operation: each node's
    live manifest digest from ``digests``; {name: commands}, and the operation's fan-out."""
    from pyinfra.api import FunctionCommand
    from pyinfra.context import ctx_host

    from sglang_deploy.node import model_manifest
    from sglang_deploy.operations import model as model_ops
    from sglang_deploy.plan.model_sources import StagingTarget
    from sglang_deploy.profile.schema import Source

    source = tmp_path / "src"
    source.mkdir(exist_ok=True)
    (source / "model.safetensors").write_bytes(b"x" * 1000)
    wanted = model_manifest.digest(model_ops.local_manifest(source, cache_dir=tmp_path / "cache"))
    monkeypatch.setattr(model_ops, "local_manifest", lambda d: model_ops.model_manifest.build(str(d)))
    monkeypatch.setattr(model_ops.shutil, "which", lambda name: "/usr/bin/" + name)
    target = StagingTarget("model", "/models/m", Source(controller=str(source)))
    state = SimpleNamespace(is_executing=True, pool=None, inventory=None)

    class NodeHost(FakeHost):
        current_op_hash = "op1"
        current_op_global_arguments = {}
        op_hash_order = ["op1"]  # every host was given the staging operation

        def __init__(self, name):
            super().__init__(name)
            self.state, self.data = state, {"fanout": fanout_mode}

        def get_fact(self, fact, **kwargs):
            if fact.__name__ == "File":
                return {"mode": 755}
            digest = wanted if digests[self.name] == "wanted" else digests[self.name]
            return {"digest": digest, "problems": [], "free": 10**12, "rsync": True, "staged": [],
                    "live_files": [], "target": "/nvme/m", "staging": "/nvme/m.sglang-deploy-staging"}  # fmt: skip

        def noop(self, text):
            self.said.append(text)

    hosts = [NodeHost(name) for name in names]
    state.inventory = SimpleNamespace(
        get_active_hosts=lambda: hosts, get_host=lambda name: next(h for h in hosts if h.name == name)
    )
    found = {}
    for host in hosts:
        with ctx_host.use(host):
            found[host.name] = list(model_ops.model_staged._inner(target, "/opt/sd/node"))
    fanned = {
        n: [c for c in cs if isinstance(c, FunctionCommand) and c.function is fanout.staged]
        for n, cs in found.items()
    }
    return fanned, fanout.run_state.of(state).meetings.get(("fanout", "op1")), wanted


def test_model_staged_arrives_as_holder_or_needer_and_needers_wait_in_the_tree(tmp_path, monkeypatch):
    names = ["h1", "n1", "n2", "n3"]
    fanned, op, wanted = staging_commands(
        tmp_path, monkeypatch, names, {"h1": "wanted", "n1": None, "n2": "old", "n3": None}
    )
    assert [n for n, cs in fanned.items() if cs] == ["n1", "n2", "n3"]  # h1 holds it: a no-op there
    assert op.arrived["h1"].role == "holder" and op.arrived["h1"].node_dir == "/nvme/m"  # a link's target
    # A needer serves its verified staging directory (swapped in by the restart, after).
    assert op.arrived["n1"].node_dir == "/nvme/m.sglang-deploy-staging"
    tree = op.tree_of(wanted).tree
    assert tree.holders == ("h1",) and tree.parents == {"n1": "h1", "n2": "h1", "n3": CONTROLLER}


def test_fanout_off_stages_from_the_controller_as_before(tmp_path, monkeypatch):
    fanned, op, _ = staging_commands(
        tmp_path, monkeypatch, ["n1", "n2", "n3"], dict.fromkeys(["n1", "n2", "n3"]), "off"
    )
    assert not any(fanned.values()) and op is None


def test_a_root_whose_first_copy_fails_releases_its_child_at_once_and_is_never_read(world):
    world.feeds["n1"] = False  # its controller copy fails its check; its retry from n2 passes
    outcome, tree_run = run(world)
    assert outcome == {"n1": True, "n2": True, "n3": True}
    assert [e[2] for e in world.events if e[0] == "pull" and e[1] == "n1"] == ["n2"]
    assert "n1" not in [e[2] for e in world.events if e[0] == "pull" and e[1] == "n3"]
    assert "n1" in tree_run.tree.verified and "n1" not in tree_run.tree.sources()
