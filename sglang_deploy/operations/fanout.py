"""Fan-out, run: the nodes of one staging operation that need the same bytes (a model
directory, the engine wheelhouse) get them in a tree (plan/fanout.py) instead of each from the
controller.

How it runs in pyinfra. Every host runs an operation at once, each in its greenlet. In the
staging operation (operations/model.py, operations/wheelhouse_upload.py) each host *arrives*
while its commands are generated: as a holder (its live copy matches the manifest), as a node
that needs the bytes (it then yields one FunctionCommand, ``staged``), or as neither. Once
every host of the operation arrived (rollout/rendezvous.py), the tree is planned and said once
per digest; each node's FunctionCommand then waits on its parent's Event (set when the parent's
copy is verified or failed: level k before level k+1, along each branch) and copies: from the
controller (rsync, at most ``fanout_degree`` at once) or from its parent. Pyinfra runs fewer
hosts at once than the run has (``--parallel``): no fan-out, every node from the controller.

Transfer, and why the child pulls. The child runs rsync over SSH to its parent
(node/fanout_pull.py); the parent's side is rsync's rrsync, forced by the key's
authorized_keys line (``restrict,command="rrsync -ro DIR"``, node/fanout_access.py): the only
thing the key can do is read that one directory. Pushing would need write access to the
child's disk from the parent, a key that could overwrite what a node serves; pulling needs
only read access to bytes the child is meant to get anyway. SSH agent forwarding (pyinfra's
``ssh_forward_agent``) would hand every node the operator's own identity for the length of
the run, usable on any host the agent's keys open: refused.

Credentials (a key pair per run and digest, granted on a parent once its copy is verified,
revoked when the tree settled; what a run that died left): operations/fanout_keys.py.

Faults. A node serves only a copy its own check passed (the key reaches it only then): its
live directory, or its staging directory once finish marked it verified (it waits there for
the restart's swap); a half-staged copy is never read. A node whose copy fails once is
no source for the rest of the run (it retries for itself; its children are re-planned at
once, not after its retries); a parent that cannot be read (down, the link dropped or stalled) is lost: its
children are given another source (FanoutTree.reassign); a node's last try is the controller.
"""

from __future__ import annotations

import shlex
import uuid
from dataclasses import dataclass, field

from gevent.event import Event
from gevent.lock import BoundedSemaphore, RLock
from pyinfra import logger
from pyinfra.api import FunctionCommand

from sglang_deploy import run_state
from sglang_deploy.node.fanout_access import KEY_DIR_PREFIX, PREFIX
from sglang_deploy.node.lib import result, status
from sglang_deploy.operations import fanout_keys, remote
from sglang_deploy.operations.streamed import run_streamed
from sglang_deploy.plan.commands import fanout_pull_command
from sglang_deploy.plan.fanout import CONTROLLER, FanoutTree, fanout_on
from sglang_deploy.plan.fleet import address
from sglang_deploy.rollout import rendezvous
from sglang_deploy.run_state import host_settings

MAX_ATTEMPTS = 3  # sources one node tries; the last is the controller
ARRIVAL_TIMEOUT_S = 1800.0  # a host's facts (a deep check of 600 GB) may take this long


@dataclass
class Copy:
    """What one node copies: the bytes (digest) and, for a copy from the controller, how."""

    label: str  # "model /models/m", "wheelhouse /opt/.../wheelhouse/lock"
    digest: str  # the manifest's
    node_dir: str  # this node's directory (a link's target: what is swapped and served)
    scripts_dir: str
    controller_copy: object  # callable(state, host) -> bool: copied from the controller and checked
    served_dir: str = ""  # where its copy lies once verified (live, or staging until the restart)
    swap: str | None = None  # finish's swap: None (at the restart), "now", "in-place"


@dataclass
class Arrived:
    role: str | None  # "holder", "needs" or None (not taking part)
    digest: str | None = None
    node_dir: str | None = None


class Arrival:
    """This host's arrival in its staging operation's fan-out; ``close()`` (in the operation's
    ``finally``) makes a host that said nothing arrive as not taking part, so nobody waits
    for it."""

    def __init__(self, host_, mode=None):
        self.op, self.host = None, host_
        state = getattr(host_, "state", None)
        if state is None or not getattr(state, "is_executing", False):  # planning, --dry: inert
            return
        if (mode or host_settings(host_.data).fanout) != "off":
            self.op = _op_fanout(state, host_)

    @property
    def taking_part(self) -> bool:
        return self.op is not None and self.op.together

    def holder(self, digest, node_dir):
        self._arrive(Arrived("holder", digest, node_dir))

    def needs(self, digest, node_dir):
        self._arrive(Arrived("needs", digest, node_dir))

    def close(self):
        self._arrive(Arrived(None))

    def _arrive(self, arrived):
        if self.op is not None and self.host.name not in self.op.arrived:
            self.op.arrive(self.host.name, arrived)


def _participants(state, op_hash):
    """The active hosts this staging operation was prepared for (pyinfra's Host.op_hash_order:
    every operation the deploy called for the host)."""
    return [
        other.name
        for other in state.inventory.get_active_hosts()
        if op_hash in getattr(other, "op_hash_order", ())
    ]


def _op_fanout(state, host_):
    op_hash = getattr(host_, "current_op_hash", None)
    if op_hash is None:
        return None

    def make():
        together, hosts = rendezvous.together(state)
        if not together:
            logger.warning(
                f"no fan-out: pyinfra runs fewer hosts at once (--parallel) than this run's {hosts}; "
                "every node copies from the controller"
            )
        return OpFanout(state, _participants(state, op_hash), together)

    return rendezvous.meeting(state, ("fanout", op_hash), make)


class OpFanout(rendezvous.Rendezvous):
    """One staging operation's arrivals (a rollout/rendezvous.py meeting) and, once every host
    arrived, its trees (one per digest)."""

    def __init__(self, state, names, together=True):
        self.state, self.trees = state, {}
        super().__init__(names, self._plan_trees, together)

    def tree_of(self, digest) -> DigestFanout:
        self.wait(ARRIVAL_TIMEOUT_S, late=lambda missing: logger.warning(f"fan-out: {missing} never arrived"))
        return self.trees[digest]

    def _plan_trees(self, arrived):
        digests = sorted({a.digest for a in arrived.values() if a.role == "needs"})
        for digest in digests:
            # By name: the same fleet gets the same tree on every run (pyinfra's active hosts
            # come in no fixed order).
            needing = sorted(n for n in self.names if self._is(n, "needs", digest))
            holders = sorted(n for n in self.names if self._is(n, "holder", digest))
            self.trees[digest] = DigestFanout(self.state, digest, needing, holders, arrived)

    def _is(self, name, role, digest):
        found = self.arrived.get(name)
        return found is not None and found.role == role and found.digest == digest


@dataclass
class DigestFanout:
    """One tree as it runs: its FanoutTree, an Event per node (settled), the controller's slots,
    the key pair, the grants made."""

    state: object
    digest: str
    needing: list
    holders: list
    arrived: dict
    tree: FanoutTree = None
    events: dict = field(default_factory=dict)
    lock: object = field(default_factory=RLock)  # the tree's state
    grant_lock: object = field(default_factory=RLock)  # one grant at a time (remote commands)
    granted: dict = field(default_factory=dict)  # source -> True (granted) / False (cannot serve)
    keys: tuple = None  # (private, public)
    marker: str = ""
    left: set = field(default_factory=set)

    def __post_init__(self):
        first = self.state.inventory.get_host(self.needing[0])
        settings = host_settings(first.data)
        on = fanout_on(settings.fanout, len(self.needing))
        self.degree = settings.fanout_degree
        self.tree = FanoutTree.planned(self.needing, self.holders, self.degree, on)
        self.events = {name: Event() for name in [*self.needing, *self.holders]}
        for holder in self.holders:
            self.events[holder].set()
        self.slots = BoundedSemaphore(self.degree) if on else None
        self.left = set(self.needing)
        self.marker = f"{PREFIX}{run_id(self.state)}:{self.digest[:12]}"
        label = f"fan-out {self.digest[:12]} ({len(self.needing)} node(s), {len(self.holders)} holding it)"
        for line in self.tree.lines():
            logger.info(f"{label}: {line}")

    def key_pair(self):
        with self.lock:
            if self.keys is None:
                self.keys = fanout_keys.make_key_pair(self.marker)
            return self.keys


def run_id(state) -> str:
    found = run_state.of(state)
    if not found.fanout_run:
        found.fanout_run = uuid.uuid4().hex[:10]
    return found.fanout_run


def staged(state, host, copy: Copy, op: OpFanout):
    """The FunctionCommand of a node that needs ``copy``: wait for a source, copy, verify."""
    fanout = op.tree_of(copy.digest)
    try:
        return _stage(state, host, copy, fanout)
    finally:
        _leave(state, host, copy, fanout)


def _stage(state, host, copy, fanout):
    tree, name = fanout.tree, host.name
    settings = host_settings(host.data)
    attempts = 0
    while True:
        with fanout.lock:
            parent = tree.parents[name]
        if parent is not CONTROLLER:
            fanout.events[parent].wait()
            usable = tree.usable(parent) and _granted(fanout, parent)
            if not usable:
                with fanout.lock:
                    tree.lose(parent)
                    _said(host, copy, f"{parent} cannot serve: copies from {_name(tree.reassign(name))}")
                continue
        attempts += 1
        if parent is CONTROLLER:
            ok, source_fault = _from_controller(state, host, copy, fanout)
        else:
            ok, source_fault = _from_node(host, copy, fanout, parent, settings)
        with fanout.lock:
            if ok:
                fanout.arrived[name].node_dir = copy.served_dir or copy.node_dir
                tree.verify(name)
                fanout.events[name].set()
                return True
            tree.pull_failed(name, parent)
            if source_fault:
                tree.lose(parent)
            # Its children go elsewhere now, not after its retries; whatever it ends with,
            # this run never reads from it.
            tree.fail(name)
            fanout.events[name].set()
            if attempts >= MAX_ATTEMPTS:
                host.log_styled(
                    f"{copy.label}: no source left after {attempts} tries; the live directory is untouched, "
                    "the next run resumes",
                    fg="red",
                    log_func=logger.error,
                )
                return False
            if attempts == MAX_ATTEMPTS - 1 and CONTROLLER not in tree.tried.get(name, ()):
                tree.parents[name] = CONTROLLER
            else:
                tree.reassign(name)
            _said(host, copy, f"copies from {_name(tree.parents[name])} instead")


def _name(source):
    return "the controller" if source is CONTROLLER else source


def _said(host, copy, text):
    host.log(f"{copy.label}: {text}", logger.warning)


def _from_controller(state, host, copy, fanout):
    """rsync from the controller (at most ``fanout_degree`` nodes at once when fanned out;
    ``controller_bwlimit_kib`` applies)."""
    if fanout.slots is None:
        return copy.controller_copy(state, host), False
    with fanout.slots:
        return copy.controller_copy(state, host), False


def _granted(fanout, source) -> bool:
    """Grant this tree's key on ``source`` (once): its copy is verified by now. False: it
    cannot serve (no rrsync, its directory gone, unreachable)."""
    with fanout.grant_lock:
        return fanout_keys.grant(fanout, source)


def key_dir(settings, fanout) -> str:
    return f"{settings.run_dir}/{KEY_DIR_PREFIX}{run_id(fanout.state)}-{fanout.digest[:12]}"


def _from_node(host, copy, fanout, source, settings):
    """(ok, the source's fault) of a pull from ``source`` (node/fanout_pull.py)."""
    parent = fanout.state.inventory.get_host(source)
    private, _ = fanout.key_pair()
    directory = key_dir(settings, fanout)
    key, known = f"{directory}/key", f"{directory}/known_hosts-{fanout_keys.alias(source)}"
    parent_settings = host_settings(parent.data)
    port = parent_settings.fanout_ssh_port or parent_settings.ssh_port or 22
    _said(host, copy, f"copying from {source} ({address(parent.data, source)}:{port})")
    quoted = shlex.quote(directory)
    for command in (
        f"mkdir -p -m 0700 {quoted} && chmod 0700 {quoted}",
        remote.secret_write(key, private),
        remote.secret_write(known, fanout_keys.known_hosts_text(source, fanout.granted[source])),
    ):
        wrote, said = remote.run(host, command)
        if not wrote:
            host.log(f"{copy.label}: the key could not be written: {said.stderr_lines[-1:]}", logger.error)
            return False, False
    pull = fanout_pull_command(
        copy.scripts_dir,
        copy.node_dir,
        source=f"{fanout_keys.login(parent)}@{address(parent.data, source)}",
        port=port,
        key=key,
        known_hosts=known,
        alias=fanout_keys.alias(source),
        bwlimit=settings.fanout_bwlimit_kib,
        timeout=settings.fanout_stall_timeout_s,
        swap=copy.swap,
    )
    try:
        ok, output = run_streamed(host, pull)
    except Exception as exc:  # this node's own link went away
        host.log(f"{copy.label}: {type(exc).__name__}: {exc}", logger.error)
        return False, False
    found = result.parse(output.stdout_lines) or {}
    if ok and found.get("status") == status.READY:
        return True, False
    cause = found.get("cause") or "\n".join(output.stderr_lines[-3:])
    host.log(f"{copy.label}: copy from {source} failed: {cause}", logger.warning)
    return False, found.get("status") == status.FANOUT_SOURCE_FAILED


def _leave(state, host, copy, fanout):
    """This node settled: its key directory goes; the last node out revokes every grant."""
    settings = host_settings(host.data)
    try:
        remote.run(host, f"rm -rf {shlex.quote(key_dir(settings, fanout))}")
    except Exception:  # unreachable: fanout_cleanup removes it next time
        pass
    with fanout.lock:
        was_left = host.name in fanout.left
        fanout.left.discard(host.name)
        last = was_left and not fanout.left
    if last:
        fanout_keys.revoke_all(state, fanout)


def copy_command(copy: Copy, op: OpFanout) -> FunctionCommand:
    return FunctionCommand(staged, (copy, op), {})
