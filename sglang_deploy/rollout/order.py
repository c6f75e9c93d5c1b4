"""Which node restarts next, decided on the controller from what was read before any restart
(no pyinfra here: operations/rollout.py and rollout/waves.py run it).

A restart's units are single nodes and serving groups (named by their rank 0, which serves for
the group). Those that serve nothing start together in a first wave, then a canary wave (single
nodes), then the others ``rolling_batch`` at a time, never taking the last node serving a model
out of rotation (plan_waves, check_waves); when its wave comes, a unit is refused if the others
of its model left rotation meanwhile (last_in_rotation) or the rollout stopped (Rollout.refusal).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sglang_deploy.errors import DeployError
from sglang_deploy.plan.settings import default
from sglang_deploy.rollout import sizes


def batches(names, size):
    """A rolling restart's batches: ``names`` in their order, ``size`` at a time (pyinfra's
    ``_parallel`` slices its active hosts the same way; router hosts, which have no restart,
    count in a slice, so a batch restarts at most ``size`` nodes)."""
    if size < 1:
        raise ValueError("batch size must be at least 1")
    names = list(names)
    return [names[i : i + size] for i in range(0, len(names), size)]


def idle_reason(unit, view, with_routers) -> str | None:
    """Why a node serves nothing, from what was read before any restart (``unit``: UnitState;
    ``view``: facts/fleet.ServingView, None when unread); None when it serves, or may: a router
    that did not answer, or nothing read, leaves the node with the ones that roll."""
    active = unit.get("ActiveState")
    if unit.get("LoadState") == "not-found" or (view and not view.get("last_good") and active != "active"):
        return "not installed"  # no configuration ever passed its gate here
    if active == "failed" or unit.get("SubState") == "auto-restart":
        return "unit failed"
    if active in ("inactive", "deactivating"):
        return "unit stopped"
    if view is None:
        return None
    if with_routers:
        seen = (view.get("routers") or {}).values()
        if seen and all(state in ("absent", "unhealthy") for state in seen):
            return "not healthy in any router"
        return None
    return None if view.get("ping") else "not answering /ping"


def by_host_name(name):
    """A sort key that puts node2 before node10: the order the run's output says waves in (pyinfra
    lists active hosts as they connected, which differs between runs)."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


@dataclass(frozen=True)
class NodeFacts:
    """One node of a restart, as read before any restart: ``idle`` says why it serves nothing
    (idle_reason), None when it serves."""

    name: str
    model: str
    idle: str | None = None


@dataclass(frozen=True)
class Waves:
    """A restart's order: ``first`` start together (they serve nothing: ``idle`` says why),
    then ``batches`` one after the other."""

    first: tuple = ()
    batches: tuple = ()
    idle: tuple = ()  # (name, why) of every node that serves nothing
    cut: tuple = ()  # models whose nodes a batch was cut for, so one stays in rotation
    size: int = 1
    canary: tuple = ()  # the canary wave (also batches[0]): restarted, baked, compared

    def wave_of(self, name) -> int:
        """0 for the first wave, 1 for the first batch, ..."""
        if name in self.first:
            return 0
        return 1 + next(i for i, names in enumerate(self.batches) if name in names)

    def lines(self) -> list:
        """What the run's output says of the order."""
        why = dict(self.idle)
        said = []
        if self.first:
            reasons = ", ".join(f"{name} {why[name]}" for name in self.first)
            together = "starts" if len(self.first) == 1 else "start together"
            said.append(f"first wave (serving nothing: {reasons}): {', '.join(self.first)} {together}")
        elif self.idle:
            said.append(
                "no first wave (rolling_first_wave: false): serving nothing, rolled like the others: "
                + ", ".join(f"{name} {reason}" for name, reason in self.idle)
            )
        batches = self.batches[1:] if self.canary else self.batches
        if self.canary:
            said.append(
                ("then " if self.first else "")
                + f"canary wave: {', '.join(self.canary)} alone, then a bake compared with the nodes "
                "still on the old configuration"
            )
        if batches:
            said.append(
                ("then rolling" if self.first or self.canary else "rolling")
                + f" {self.size} at a time: "
                + " | ".join(", ".join(names) for names in batches)
                + (f" (batches cut so {', '.join(self.cut)} keep(s) a node in rotation)" if self.cut else "")
            )
        return said


def plan_waves(nodes, batch, first_wave=default("rolling_first_wave"), others=None, canary=0) -> Waves:
    """The order of a restart over ``nodes`` (NodeFacts, in pyinfra's order): the nodes that
    serve nothing in a first wave (they have no capacity to protect), then ``canary`` serving
    nodes alone (a canary wave, when above 0), then the serving ones ``batch`` at a time. No
    batch takes the last node serving a model out of rotation while that model has another
    node: ``others`` {model: nodes of it in the fleet that do not restart here (counted as
    serving)}; a first-wave node of the model counts too, as it serves before the batches start
    (the rollout refuses a later node when it did not: last_in_rotation). Every canary's model
    keeps a node on the old configuration in a later batch to be compared with, or DeployError.
    With ``first_wave`` false, every node rolls in batches, as before there was a first wave."""
    if batch < 1:
        raise ValueError("batch size must be at least 1")
    others = others or {}
    nodes = list(nodes)
    first = [n for n in nodes if n.idle] if first_wave else []
    pending = [n for n in nodes if n not in first]
    serving = {}
    for n in nodes:
        if n.idle is None or n in first:
            serving[n.model] = serving.get(n.model, 0) + 1

    def darkens(names):
        for model in {n.model for n in names}:
            out = sum(1 for n in names if n.model == model and n.idle is None)
            total = serving.get(model, 0) + others.get(model, 0)
            if out and total > 1 and out >= total:
                return model
        return None

    cut = []

    def take(size, eligible=lambda node: True):
        current = []
        for node in list(pending):
            if len(current) == size:
                break
            if not eligible(node):
                continue
            model = darkens([*current, node])
            if model:
                if model not in cut:
                    cut.append(model)
                continue
            current.append(node)
            pending.remove(node)
        return tuple(n.name for n in current)

    batches = []
    canaries = take(canary, lambda node: node.idle is None) if canary else ()
    if canaries:
        batches.append(canaries)
        _check_comparable(canaries, nodes, pending)
    while pending:
        batches.append(take(batch))
    waves = Waves(
        first=tuple(n.name for n in first),
        batches=tuple(batches),
        idle=tuple((n.name, n.idle) for n in nodes if n.idle),
        cut=tuple(cut),
        size=batch,
        canary=canaries,
    )
    check_waves(waves, nodes, others)
    return waves


def _check_comparable(canaries, nodes, later):
    """DeployError when a canary's model has no serving node left on the old configuration
    (in a later batch) to compare the canary with."""
    models = {n.name: n.model for n in nodes}
    for model in dict.fromkeys(models[name] for name in canaries):
        if not any(n.model == model and n.idle is None for n in later):
            mine = ", ".join(name for name in canaries if models[name] == model)
            raise DeployError(
                f"rolling_canary: refused: canary {mine} would leave no node serving {model} on the old "
                "configuration to compare with (lower rolling_canary, or add nodes of that model to the run)"
            )


def check_waves(waves, nodes, others=None) -> None:
    """DeployError when a wave would take the last node serving a model out of rotation while
    the model has another node: the first wave may hold only nodes that serve nothing, and no
    batch every node that serves a model of several nodes."""
    others = others or {}
    facts = {n.name: n for n in nodes}
    serving = [n for n in nodes if n.idle is None]
    busy = [name for name in waves.first if facts[name].idle is None]
    if busy:
        raise DeployError(f"refused: {', '.join(busy)} serve(s): not in a first wave, which nothing drains")
    for names in waves.batches:
        for model in {facts[name].model for name in names}:
            ours = [n.name for n in serving if n.model == model]
            total = (
                len(ours)
                + others.get(model, 0)
                + sum(1 for name in waves.first if facts[name].model == model)
            )
            out = [name for name in names if name in ours]
            if out and total > 1 and len(out) >= total:
                raise DeployError(
                    f"refused: restarting {', '.join(out)} together would take every node serving "
                    f"{model} out of rotation"
                )


def last_in_rotation(name, nodes, waves, done, failed, others=None) -> str | None:
    """Why ``name`` must not leave rotation now: every other node of its model is out (failed
    in this run, or a first-wave node that never came up) while the model has several; None
    when another one serves. ``done``/``failed``: names restarted and back / failed so far."""
    others = others or {}
    facts = {n.name: n for n in nodes}
    me = facts.get(name)
    if me is None or me.idle is not None:
        return None  # serves nothing: takes nothing out of rotation
    mine = waves.wave_of(name)
    peers = [n for n in nodes if n.model == me.model and n.name != name]
    if not peers or others.get(me.model, 0):
        return None
    for peer in peers:
        if peer.name in done:
            return None
        if peer.idle is None and peer.name not in failed and waves.wave_of(peer.name) != mine:
            return None
    out = ", ".join(p.name for p in peers)
    return f"it is the last node serving {me.model} in rotation ({out} not serving)"


class Rollout:
    """One run's rolling restart, shared by every node's restart (pyinfra marks failed hosts
    only after all batches of an operation: stopping at the first failure needs this).

    A node may start while no more than ``max_failures`` nodes failed (with
    ``max_fail_percent``: while failed nodes are no more than that percentage of the run's
    ``size`` nodes); after that, or once ``stop`` was called (a canary failed its bake), the
    rollout is stopped and every later node keeps its previous configuration. ``notes`` says,
    per node, what it serves at the end."""

    def __init__(self, max_failures=0, max_fail_percent=None, size=0):
        self.max_failures = max_failures
        self.max_fail_percent = max_fail_percent
        self.size = size  # nodes (and groups) of the run's restart, once known
        self.failures = []  # (node, why), in order
        self.done = []  # nodes restarted and back in rotation
        self.notes = {}  # node -> what it serves now (for the per-host report)
        self.stopped = None  # why the rollout stopped other than by failures (a canary's bake)

    def refusal(self, name):
        """Why ``name`` must not restart (the rollout stopped), or None."""
        if self.stopped:
            return f"rollout stopped: {self.stopped}"
        if sizes.too_many_failures(len(self.failures), self.size, self.max_failures, self.max_fail_percent):
            first, why = self.failures[0]
            done = ", ".join(self.done) or "none"
            limit = (
                f"; more than {self.max_fail_percent:g}% of {self.size} nodes failed"
                if self.max_fail_percent is not None
                else ""
            )
            return f"rollout stopped at {first} ({why}){limit}; restarted before it: {done}"
        return None

    def stop(self, why):
        self.stopped = self.stopped or why

    def failed(self, name, why):
        self.failures.append((name, why))

    def succeeded(self, name):
        self.done.append(name)

    def note(self, name, text):
        self.notes[name] = text
