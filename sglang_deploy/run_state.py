"""What one deploy run shares across its hosts, in one object attached to pyinfra's state.

pyinfra prepares and runs every host in a greenlet of its own; what they must share (the
rollout's progress, a serving group's members and verdict, the deploy locks held, what the
last lines say of each host) lives here, so it lives as long as the run (pyinfra's ``State``)
and a second run in the same process starts afresh. Operations read it with ``of(state)`` (a
FunctionCommand's ``state``) or ``of()`` (pyinfra's current state).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyinfra.api.host import HostData
from pyinfra.context import ctx_state

from sglang_deploy.plan.settings import Settings, settings_of
from sglang_deploy.rollout.order import Rollout

ATTRIBUTE = "sglang_deploy_run"  # the attribute of pyinfra's State that holds this run's RunState


@dataclass
class RunState:
    # The deploy lock (operations/deploy_lock.py): host name -> the open SSH channel holding it,
    # or why it could not be taken.
    held_locks: dict = field(default_factory=dict)
    # The rolling restart (rollout/order.py), shared by every node: created by its first.
    rollout: Rollout | None = None
    # Meetings of the hosts of one operation (rollout/rendezvous.py): who is expected, per
    # meeting ({host name: the condition it comes on}, registered while the deploy is planned),
    # and each meeting, made by the first host to arrive (a restart's waves, a fan-out's trees).
    expected: dict = field(default_factory=dict)
    meetings: dict = field(default_factory=dict)
    # Serving groups (operations/group.py): {host name: Member}, resolved and checked once.
    members: dict | None = None
    group_plans: dict = field(default_factory=dict)  # group -> {host name: NodePlan}
    group_changes: dict = field(default_factory=dict)  # group -> operations whose change restarts it
    group_verdicts: dict = field(default_factory=dict)  # group -> (ok, text): rank 0's restart
    # Nodes serving several services (plan/shared_nodes.py): {host name: its node's units}, checked once.
    node_units: dict | None = None
    # The deploy's last lines (report/outcome.py): host name -> what they add for it.
    group_notes: dict = field(default_factory=dict)  # its serving group's rank and verdict
    decode_notes: dict = field(default_factory=dict)  # its decode check's phrase (throughput_log)
    warned: set = field(default_factory=set)  # lint warning lines printed (once, not per host)
    told_no_systemd: set = field(default_factory=set)  # hosts told their restart runs in the session
    recorder: object = None  # report/outcome.py's OutcomeRecorder of this run
    # Fan-out (operations/fanout.py; its OpFanout per staging operation is a meeting): this
    # run's id (in the key pairs' markers and the key directories' names).
    fanout_run: str = ""
    # Each host's settings (host_settings): host name -> (the data given it during the deploy
    # they were read with, its Settings).
    settings: dict = field(default_factory=dict)

    def rollout_of(self, max_failures=0, max_fail_percent=None) -> Rollout:
        """The run's rolling restart (created by the first node that restarts)."""
        if self.rollout is None:
            self.rollout = Rollout(max_failures, max_fail_percent)
        return self.rollout

    def rollout_notes(self) -> dict:
        """Per node, what it serves after the rolling restart (none when none ran)."""
        return self.rollout.notes if self.rollout is not None else {}


def of(state=None) -> RunState:
    """The RunState of ``state`` (pyinfra's current one when None), created on first use."""
    if state is None:
        state = ctx_state.get()
    if state is None:
        raise RuntimeError("no pyinfra run: the run state lives on pyinfra's state")
    found = getattr(state, ATTRIBUTE, None)
    if found is None:
        found = RunState()
        setattr(state, ATTRIBUTE, found)
    return found


def host_settings(host, who: str | None = None) -> Settings:
    """The settings of ``host`` (a pyinfra Host or its ``host.data``; a plain mapping or
    Settings as settings_of takes them, ``who`` naming it in errors), read as settings_of
    reads them. A pyinfra host's are validated once per run and the same Settings returned
    after, read again only when data is given the host during the deploy (``host.data.x =``):
    the inventory's layers, group data and --data stay as they were when the run began."""
    data = host if isinstance(host, (HostData, Mapping, Settings)) else host.data
    state = getattr(data.host, "state", None) if isinstance(data, HostData) else None
    if state is None:
        return settings_of(data, who)
    given = dict(data.override_datas)
    known = of(state).settings
    name = data.host.name
    if name not in known or known[name][0] != given:
        known[name] = (given, settings_of(data))
    return known[name][1]
