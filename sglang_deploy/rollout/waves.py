"""A restart operation's waves as they run in pyinfra: every unit (a node, or a serving group
named by its rank 0) arrives with what was read of it before any restart; the last to arrive
plans the waves (rollout/order.py plan_waves) and says them once; each unit waits for its
wave (turn). Below pyinfra's --parallel there is no first wave: ``rolling_batch`` units take
turns (rollout/rendezvous.py).

Who restarts in an operation is registered while the deploy is planned (``restarts``: the
restart's ``_if``), so the first unit to arrive knows whom to wait for.
"""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager
from dataclasses import replace

from gevent.event import Event
from pyinfra import logger

from sglang_deploy import run_state
from sglang_deploy.errors import DeployError
from sglang_deploy.facts.fleet import ServingView
from sglang_deploy.facts.serving import UnitState
from sglang_deploy.rollout import rendezvous, sizes
from sglang_deploy.rollout.bake import Bake
from sglang_deploy.rollout.order import NodeFacts, by_host_name, idle_reason, last_in_rotation, plan_waves

NODES = "restart"  # the single nodes' restart (operations/rollout.py rolled_restart)
GROUPS = "group restart"  # serving groups restarted for a change (operations/group.py group_restarted)
GROUPS_REPAIRED = "group repair"  # serving groups restarted because they did not serve (group_serving)


def restarts(key, name, when=None):
    """While the deploy is planned: unit ``name`` restarts in ``key``'s operation when
    ``when()`` holds (the operation's ``_if``); returns ``when``."""
    return rendezvous.expect(key, name, when)


def rollout(state=None, rolling=None):
    """This run's rolling restart (rollout/order.py Rollout), shared by every unit of the run;
    made by the first to ask, with its ``rolling`` (a host's settings.rolling)."""
    if rolling is None:
        return run_state.of(state).rollout_of()
    return run_state.of(state).rollout_of(rolling.rolling_max_failures, rolling.rolling_max_fail_percent)


def node_facts(host, scripts, rotation) -> NodeFacts:
    """This node as read before any restart: its unit and how every router lists it."""
    try:
        unit = host.get_fact(UnitState, unit=scripts.unit)
        view = host.get_fact(
            ServingView,
            worker_url=rotation.worker_url,
            local_port=rotation.local_port,
            last_good_dir=scripts.last_good_dir,
            router_urls=tuple(rotation.router_urls),
            local_host=rotation.local_host,
            auth=rotation.auth,
        )
    except Exception as exc:  # unread: rolled with the serving nodes, which is always safe
        host.log(f"serving state unread ({type(exc).__name__}: {exc}): rolled as serving", logger.warning)
        return NodeFacts(host.name, rotation.model)
    return NodeFacts(host.name, rotation.model, idle_reason(unit or {}, view, bool(rotation.router_urls)))


@contextmanager
def turn(state, host, key, rotation, facts, scrape=None):
    """Wait for this unit's wave in ``key``'s operation; yield (its WaveRun, or None when it
    has no waves; why it must not restart, or None). ``facts()``: the unit as read before any
    restart (node_facts), read once every unit runs at once. Without waves (fewer than two
    units restart, or no run to meet in) the units take turns, ``rolling_batch`` at a time."""
    waves = wave_run(state, key, rotation) if state is not None else None
    if waves is None:
        alone = rendezvous.meeting(state, ("alone", key), lambda: _alone(state, rotation.rolling))
        alone.take_turn(host.name)
        try:
            yield None, None
        finally:
            alone.end_turn(host.name)
        return
    try:
        waves.arrive(host.name, facts() if waves.together else None)
        yield waves, waves.turn(host.name, scrape)
    finally:
        waves.leave(host.name)


def _alone(state, rolling):
    """The turns of units that restart without waves: counted once in the rollout's size; a
    percentage has nothing to be a share of (1 at a time)."""
    rollout(state, rolling).size += 1
    size = rolling.rolling_batch if isinstance(rolling.rolling_batch, int) else 1
    return rendezvous.Rendezvous((), None, together=False, size=size)


def wave_run(state, key, rotation):
    """The run's WaveRun for ``key``, made by the first to ask with the units registered for it
    (by host name: node2 before node10); None when fewer than two restart (nothing to order)."""

    def make():
        names = sorted(rendezvous.expected(state, key), key=by_host_name)
        if len(names) < 2:
            return None
        if key == NODES:
            return WaveRun(names, rotation, state)
        # Followers serve through their rank 0: only rank 0s and single nodes count for a model.
        members = run_state.of(state).members or {}
        followers = {name for name, m in members.items() if not m.is_leader}
        models = tuple((name, model) for name, model in rotation.fleet_models if name not in followers)
        return WaveRun(
            names,
            replace(rotation, fleet_models=models),
            state,
            title="serving groups (by rank 0)",
            canaries=False,  # rolling_canary: single nodes only (the bake reads each node's /metrics)
        )

    return rendezvous.meeting(state, ("waves", key), make)


class WaveRun(rendezvous.Rendezvous):
    """One restart operation's waves across the units restarting in it: planned once every unit
    arrived with its facts, said once; a unit starts when every earlier wave
    ended. Below pyinfra's --parallel, no first wave: ``rolling_batch`` units take turns."""

    def __init__(self, names, rotation, state, title=None, canaries=True):
        self.state = state  # the run whose rollout the waves share
        self.title = title
        self.canaries = canaries  # a canary wave may be planned (its bake scrapes each node)
        self.noun = "nodes" if canaries else "serving groups"
        self.rotation = rotation
        self.waves, self.refused = None, None
        self.ended, self.left = [], []
        self.bake = None  # the canary wave's (rollout/bake.py), when there is one
        rolling = rotation.rolling
        try:
            size = sizes.batch_size(rolling.rolling_batch, len(names), self.noun)
        except DeployError as exc:
            size, self.refused = 1, str(exc)
        together, hosts = rendezvous.together(state)
        super().__init__(names, self._plan_waves, together, size)
        rollout(state, rolling).size += len(self.names)
        if not together:
            logger.warning(
                f"no first wave{' and no canary wave' if rotation.canary.rolling_canary and canaries else ''}: pyinfra runs fewer "
                f"hosts at once (--parallel) than this run's {hosts}; {len(self.names)} nodes restart "
                f"{size} at a time"
            )

    @property
    def facts(self) -> dict:
        """{name: NodeFacts} of the units that arrived."""
        return self.arrived

    def _others(self):
        """{model: nodes of it in the fleet that do not restart here}."""
        return dict(Counter(model for name, model in self.rotation.fleet_models if name not in self.facts))

    def _plan_waves(self, arrived):
        nodes = [arrived[name] for name in self.names]
        rolling = self.rotation.rolling
        try:
            if self.refused:
                raise DeployError(self.refused)
            serving = [n for n in nodes if n.idle is None]
            canaries = self.rotation.canary.rolling_canary if self.canaries else 0
            self.waves = plan_waves(
                nodes,
                sizes.batch_size(rolling.rolling_batch, len(nodes), self.noun),
                rolling.rolling_first_wave,
                self._others(),
                canary=sizes.canary_count(canaries, len(serving)),
            )
        except DeployError as exc:
            self.refused = str(exc)
            logger.error(f"rollout {self.refused}: nothing restarts")
            return
        for line in self.waves.lines():
            logger.info(f"{self.title}: {line}" if self.title else line)
        if self.waves.canary:
            later = {name for names in self.waves.batches[1:] for name in names}
            self.bake = Bake(
                self.waves.canary,
                [n.name for n in nodes if n.name in later and n.idle is None],
                {n.name: n.model for n in nodes},
                self.rotation.canary,
                rollout(self.state),
            )
        for names in (self.waves.first, *self.waves.batches):
            self.left.append(set(names))
            self.ended.append(Event())
            if not names:
                self.ended[-1].set()

    def turn(self, name, scrape=None):
        """Wait for ``name``'s wave; why it must not restart, or None. A node still on the old
        configuration takes part in the canary's bake meanwhile (``scrape``: its metrics)."""
        if not self.together:
            self.take_turn(name)
            return self.refused
        self.wait()
        if self.refused:
            return self.refused
        wave = self.waves.wave_of(name)
        if self.bake and name in self.bake.old:
            self.bake.take_part(name, scrape)
        for ended in self.ended[:wave]:
            ended.wait()
        run = rollout(self.state)
        return last_in_rotation(
            name,
            [self.facts[n] for n in self.names],
            self.waves,
            set(run.done),
            {who for who, _ in run.failures},
            self._others(),
        )

    def leave(self, name):
        self.end_turn(name)
        if self.waves is None:
            return
        wave = self.waves.wave_of(name)
        self.left[wave].discard(name)
        if not self.left[wave]:
            self.ended[wave].set()
