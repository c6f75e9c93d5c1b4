"""Fan-out, planned: which source each node copies a model directory (or the engine
wheelhouse) from, so the controller sends each byte once and the nodes pass it on.

Pure: the nodes of the run that need the same bytes (one manifest digest) and those that
already hold them, verified, give a tree. The controller feeds at most ``degree`` roots; every
node holding a verified copy serves at most ``degree`` children; the depth is minimal (slots are
filled breadth first, the holders' before the controller's, so a run where some node already
holds the bytes sends the controller's uplink nothing).

The tree changes while it runs (``FanoutTree``): a node becomes a source only once its copy
is verified; a node that fails is never one, and a source that could not be read is lost. A
node whose source failed or was lost is given another (``reassign``): a node holding a
verified copy with a free slot, else the controller if it has one, else a node still copying
with a free slot (the shallowest), else the controller anyway; never a source it already
failed from, never one of its own descendants.

The operation that runs it is operations/fanout.py; the copy on the node node/fanout_pull.py.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from sglang_deploy.plan.settings import default

CONTROLLER = None  # a node's parent when the controller feeds it
MODES = ("auto", "on", "off")
AUTO_ABOVE = 2  # auto: on when more nodes than this need the same bytes


def fanout_on(mode: str, needing: int) -> bool:
    """Whether ``needing`` nodes that need the same bytes get them in a tree (``mode``: the
    ``fanout`` setting): ``auto`` above two nodes (two roots of the controller hold as many)."""
    if mode not in MODES:
        raise ValueError(f"fanout: {mode!r} is none of {', '.join(MODES)}")
    return mode == "on" or (mode == "auto" and needing > AUTO_ABOVE)


def plan_tree(needing, holders=(), degree=default("fanout_degree")) -> dict:
    """{node: parent} (parent None: the controller) for every node of ``needing`` (in the order
    given), breadth first: depth 1 is the holders' slots (``degree`` each, taken round-robin)
    then the controller's ``degree``; each node placed adds its ``degree`` slots one level
    deeper."""
    if degree < 1:
        raise ValueError("fanout_degree must be at least 1")
    holders = [h for h in holders if h not in set(needing)]
    slots = deque((1, holder) for _ in range(degree) for holder in holders)
    slots.extend((1, CONTROLLER) for _ in range(degree))
    parents = {}
    for name in needing:
        depth, parent = slots.popleft()
        parents[name] = parent
        slots.extend((depth + 1, name) for _ in range(degree))
    return parents


@dataclass
class FanoutTree:
    """One tree as it runs: the parent of every node that needs the bytes, what each node
    became (verified, failed), the sources lost, and the sources each node already failed from."""

    parents: dict  # node -> parent (None: the controller)
    degree: int = 2
    holders: tuple = ()  # held a verified copy before the run
    verified: set = field(default_factory=set)
    failed: set = field(default_factory=set)  # its own copy failed: never a source
    lost: set = field(default_factory=set)  # could not be read from: no longer a source
    tried: dict = field(default_factory=dict)  # node -> sources it failed from
    on: bool = True  # False: every node straight from the controller, all at once

    @classmethod
    def planned(cls, needing, holders=(), degree=default("fanout_degree"), on=True) -> FanoutTree:
        parents = plan_tree(needing, holders, degree) if on else {name: CONTROLLER for name in needing}
        return cls(parents, degree, tuple(holders), on=on)

    def sources(self) -> set:
        """Nodes a child may copy from now: holders and verified nodes not lost."""
        return (set(self.holders) | self.verified) - self.lost - self.failed

    def children(self, source) -> list:
        return [n for n, p in self.parents.items() if p == source and n not in self.failed]

    def depth(self, name) -> int:
        seen, depth = set(), 0
        while name is not CONTROLLER and name in self.parents and name not in seen:
            seen.add(name)
            name, depth = self.parents[name], depth + 1
        return depth

    def descends_from(self, name, ancestor) -> bool:
        seen = set()
        while name in self.parents and name not in seen:
            seen.add(name)
            name = self.parents[name]
            if name == ancestor:
                return True
        return False

    def settled(self, name) -> bool:
        """Whether ``name``'s children need wait no longer for it (verified or not a source)."""
        return name in self.holders or name in self.verified or name in self.failed or name in self.lost

    def usable(self, source) -> bool:
        """Whether a child may copy from ``source`` now (the controller always)."""
        return source is CONTROLLER or source in self.sources()

    def verify(self, name) -> None:
        """``name``'s copy passed its check: a source, unless it failed before in this run."""
        self.verified.add(name)

    def fail(self, name) -> None:
        """``name``'s own copy failed: it serves nobody (its partial copy is never read)."""
        self.failed.add(name)

    def lose(self, source) -> None:
        """``source`` could not be read from (down, its copy gone): no child copies from it."""
        if source is not CONTROLLER:
            self.lost.add(source)

    def pull_failed(self, name, source) -> None:
        self.tried.setdefault(name, set()).add(source)

    def reassign(self, name):
        """Another parent for ``name`` (its own failed or was lost, or it failed from it)."""
        tried = self.tried.get(name, set())
        free = [
            s for s in self.sources() if s != name and s not in tried and len(self.children(s)) < self.degree
        ]
        if free:
            choice = min(free, key=lambda s: (len(self.children(s)), self.depth(s), str(s)))
        elif CONTROLLER not in tried and len(self.children(CONTROLLER)) < self.degree:
            choice = CONTROLLER
        else:
            pending = [
                n
                for n in self.parents
                if n != name
                and n not in tried
                and not self.settled(n)
                and not self.descends_from(n, name)
                and len(self.children(n)) < self.degree
            ]
            choice = min(pending, key=lambda n: (self.depth(n), str(n))) if pending else CONTROLLER
        self.parents[name] = choice
        return choice

    def lines(self) -> list:
        """The tree as the operator reads it: one line per level."""
        if not self.on:
            return [f"from the controller: {', '.join(sorted(self.parents))}"]
        by_depth = {}
        for name in self.parents:
            by_depth.setdefault(self.depth(name), []).append(name)
        return [
            f"level {depth}: "
            + ", ".join(f"{n} <- {self.parents[n] or 'controller'}" for n in by_depth[depth])
            for depth in sorted(by_depth)
        ]
