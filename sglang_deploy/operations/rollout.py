"""A fleet's operations: a node's restart out of rotation, ordered in waves across the run
(the nodes that serve nothing together first, then the others in batches), and the router's
service and gate."""

import shlex
from collections import Counter

from gevent.event import Event
from gevent.lock import BoundedSemaphore
from pyinfra import host, logger
from pyinfra.api import FunctionCommand, StringCommand, operation

from sglang_deploy import run_state
from sglang_deploy.errors import DeployError
from sglang_deploy.facts.fleet import RouterGate, ServingView
from sglang_deploy.facts.serving import UnitState
from sglang_deploy.node.lib import result, status
from sglang_deploy.operations import canary, remote
from sglang_deploy.operations.files import hook_paths
from sglang_deploy.operations.service import fail_with, run_cycle, say_outcome, script_cause
from sglang_deploy.operations.streamed import run_streamed
from sglang_deploy.rollout import sizes as rolling_sizes
from sglang_deploy.rollout.order import (
    NodeFacts,
    Rollout,
    by_host_name,
    idle_reason,
    last_in_rotation,
    plan_waves,
)

# rotation.py's outcomes when it took the node out of no router (or put it back): the cycle
# did not run, the node serves what it served.
ROTATION_REFUSED = ("router_unreachable", "router_failed", "last_in_rotation")


def rotation_line(turn):
    """How long a node was out of rotation and how its drain ended, from rotation.py's result."""
    if turn.get("drained", True):
        drain = ""
    elif turn.get("load_unknown"):
        drain = f", load unknown: {turn['load_unknown']}"
    else:
        drain = f", {turn.get('in_flight_left')} left"
    return (
        f"out of rotation {turn.get('out_s', 0):.1f}s (drained in {turn.get('drain_s', 0):.1f}s{drain}); "
        f"routers: {', '.join(turn['routers'])}"
    )


def rollout(max_failures=0, state=None, max_fail_percent=None) -> Rollout:
    """This run's rolling restart, shared by every node (and serving group) of the run."""
    return run_state.of(state).rollout_of(max_failures, max_fail_percent)


@operation(is_idempotent=False)
def rolled_restart(scripts, hook_python, rotation, profile_name, rollback=True):
    """
    Restart the server out of rotation (node/rotation.py around node/cycle.py): out of every
    router, drained, restarted through the gate (rolled back when it fails), back in every
    router and healthy there. Every node's operation runs at once and waits for its wave
    (WaveRun): the nodes that serve nothing (read before any restart: unit state, router
    health) start together first, then the others ``rolling_batch`` at a time. Once the
    rollout stopped (more than ``rolling_max_failures`` nodes failed), a later node is not
    restarted: its files go back to its last known good and it keeps serving what it served.

    + scripts: ``NodeScripts`` for this node
    + hook_python: interpreter whose start-up hook belongs to the configuration
    + rotation: ``fleet_plan.Rotation`` for this node
    + profile_name: the profile being rolled out (for the per-host report)
    + rollback: restore the last known good when the new configuration fails its gate
    """
    yield FunctionCommand(_rotate, (scripts, hook_python, rotation, profile_name, rollback), {})


def _rotate(state, host, scripts, hook_python, rotation, profile_name, rollback):
    run = rollout(rotation.rolling.max_failures, state, rotation.rolling.max_fail_percent)
    waves = _waves(state, host, rotation)
    if waves is None:  # this node restarts alone: nothing to order
        return _restart(state, host, scripts, hook_python, rotation, profile_name, rollback, run, None)
    try:
        waves.arrive(host.name, node_facts(host, scripts, rotation) if waves.together else None)
        refusal = waves.turn(host.name, canary.scraper(host, rotation))
        if waves.bake and host.name in waves.bake.canaries:
            args = (state, host, scripts, hook_python, rotation, profile_name, rollback, run)
            return _canary(*args, refusal, waves.bake)
        return _restart(state, host, scripts, hook_python, rotation, profile_name, rollback, run, refusal)
    finally:
        waves.leave(host.name)


def _canary(state, host, scripts, hook_python, rotation, profile_name, rollback, run, refusal, bake):
    """A canary's turn: its last known good kept aside, its restart, the bake (with the nodes
    still on the old configuration), then back to what it served before if the bake failed."""
    served = False
    try:
        refusal = run.refusal(host.name) or refusal
        if not refusal:
            why = canary.keep_last_good(host, scripts)
            if why:
                run.failed(host.name, f"canary {host.name}: {why}")
                refusal = f"canary {host.name}: {why}"
        if refusal:
            return _keep_previous(host, scripts, run, refusal)
        served = _restart(state, host, scripts, hook_python, rotation, profile_name, rollback, run, None)
    finally:
        bake.restarted(host.name, served)
    if not served:
        return False
    verdict = bake.take_part(host.name, canary.scraper(host, rotation))
    if verdict.passed:
        run.note(host.name, f"serves {profile_name}, back in rotation; canary passed its bake")
        return True
    if host.name in run.done:
        run.done.remove(host.name)
    mine = [f"{metric}: {why}" for node, metric, why in verdict.failures if node == host.name]
    why = f"canary {host.name} failed its bake ({'; '.join(mine) or verdict.cause()})"
    return canary.roll_back(state, host, scripts, hook_python, rotation, run, why)


def _restart(state, host, scripts, hook_python, rotation, profile_name, rollback, run, refusal):
    refusal = run.refusal(host.name) or refusal
    if refusal:
        return _keep_previous(host, scripts, run, refusal)
    command = rotation.wrap(
        scripts.directory, scripts.cycle(hook_paths(hook_python), rollback), scripts.restore_last_good()
    )
    try:
        found, output = run_cycle(host, command, scripts)
    except Exception as exc:  # the connection went away mid-restart
        why = f"{host.name} became unreachable mid-rollout ({type(exc).__name__}: {exc})"
        run.failed(host.name, why)
        run.note(host.name, "unreachable mid-restart: state unknown")
        return fail_with(state, host, why)
    if found is None:
        why = f"{host.name}: no result from the restart ({script_cause(output)}); unreachable?"
        run.failed(host.name, why)
        run.note(host.name, "no result from its restart: state unknown")
        return fail_with(state, host, why)
    turn = found.get("rotation") or {}
    if turn.get("routers"):
        host.log(rotation_line(turn), logger.info)
    outcome = found.get("outcome")
    if outcome in ROTATION_REFUSED:
        host.log_styled(f"rollout refused: {found.get('cause')}", fg="red", log_func=logger.error)
        run.failed(host.name, found.get("cause"))
        run.note(host.name, f"not restarted: serves {_previous(found)}")
        return False
    served = say_outcome(host, found) and found["status"] == status.READY
    if found.get("rotation_failed"):
        host.log_styled(
            f"back in rotation failed: {found['rotation_failed']}", fg="red", log_func=logger.error
        )
    if served:
        run.succeeded(host.name)
        if rotation.router_urls:  # without routers, "deployed" says it all
            run.note(host.name, f"serves {profile_name}, back in rotation")
        return True
    run.failed(host.name, found.get("cause") or outcome)
    run.note(host.name, _serves_after(found, profile_name))
    return False


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


def _restarting(state, op_hash):
    """The active hosts whose restart operation ``op_hash`` runs (its ``_if`` holds: they all
    reach _rotate); the others (routers, unchanged nodes) have nothing to wait for."""
    names = []
    for other in state.inventory.get_active_hosts():
        data = state.ops.get(other, {}).get(op_hash)
        if data is None:
            continue
        checks = data.global_arguments.get("_if")
        checks = checks if isinstance(checks, list) else [checks] if callable(checks) else []
        if all(check() for check in checks):
            names.append(other.name)
    return names


def _waves(state, host, rotation):
    """This run's WaveRun for the operation ``host`` is in, made by its first node; None when
    the node restarts alone."""
    op_hash = getattr(host, "current_op_hash", None)
    if state is None or op_hash is None:
        return None
    return wave_run(state, op_hash, lambda: _restarting(state, op_hash), rotation)


def wave_run(state, key, restarting, rotation, title=None, canaries=True):
    """The run's WaveRun for ``key``, made by the first to ask with the names ``restarting()``
    gives (by host name: node2 before node10); None when fewer than two restart (nothing to order). ``title``
    heads the lines that say the order (serving groups are named by their rank 0);
    ``canaries``: whether a canary wave may be planned (single nodes only)."""
    waves = run_state.of(state).waves
    if key not in waves:
        names = sorted(restarting(), key=by_host_name)
        if len(names) < 2:
            return None
        # Every node's operation must run at once to arrive: pyinfra spawns at most
        # --parallel hosts, so below the run's host count the nodes take turns instead.
        hosts = len(list(state.inventory.get_active_hosts()))
        pool = getattr(getattr(state, "pool", None), "size", None)
        together = pool is None or pool >= hosts
        waves[key] = WaveRun(
            names, rotation, together=together, hosts=hosts, state=state, title=title, canaries=canaries
        )
    return waves[key]


class WaveRun:
    """One restart operation's waves across the nodes restarting in it. Each node arrives with
    its facts; once every node did (before any restart), the order is planned
    (plan_fleet.plan_waves) and said once; a node starts when every earlier wave ended. Below
    pyinfra's --parallel, no first wave: ``rolling_batch`` nodes take turns."""

    def __init__(self, names, rotation, together=True, hosts=None, state=None, title=None, canaries=True):
        self.state = state  # the run whose rollout the waves share
        self.title = title
        self.canaries = canaries  # a canary wave may be planned (its bake scrapes each node)
        self.noun = "nodes" if canaries else "serving groups"
        self.names, self.rotation, self.together = list(names), rotation, together
        self.facts, self.planned, self.waves, self.refused = {}, Event(), None, None
        self.ended, self.left = [], []
        self.bake = None  # the canary wave's (operations/canary.py), when there is one
        self.holding = set()
        rolling = rotation.rolling
        try:
            size = rolling.batch_of(len(self.names), self.noun)
        except DeployError as exc:
            size, self.refused = 1, str(exc)
        self.turns = BoundedSemaphore(size)
        rollout(rolling.max_failures, state, rolling.max_fail_percent).size += len(self.names)
        if not together:
            logger.warning(
                f"no first wave{' and no canary wave' if rolling.canary and canaries else ''}: pyinfra runs fewer "
                f"hosts at once (--parallel) than this run's {hosts}; {len(self.names)} nodes restart "
                f"{size} at a time"
            )

    def arrive(self, name, facts):
        self.facts[name] = facts
        if self.together and not self.planned.is_set() and set(self.names) <= set(self.facts):
            self._plan()

    def _plan(self):
        nodes = [self.facts[name] for name in self.names]
        rolling = self.rotation.rolling
        others = Counter(model for name, model in self.rotation.fleet_models if name not in self.facts)
        try:
            if self.refused:
                raise DeployError(self.refused)
            serving = [n for n in nodes if n.idle is None]
            self.waves = plan_waves(
                nodes,
                rolling.batch_of(len(nodes), self.noun),
                rolling.first_wave,
                dict(others),
                canary=rolling_sizes.canary_count(rolling.canary, len(serving)) if self.canaries else 0,
            )
        except DeployError as exc:
            self.refused = str(exc)
            logger.error(f"rollout {self.refused}: nothing restarts")
        else:
            for line in self.waves.lines():
                logger.info(f"{self.title}: {line}" if self.title else line)
            if self.waves.canary:
                later = {name for names in self.waves.batches[1:] for name in names}
                self.bake = canary.Bake(
                    self.waves.canary,
                    [n.name for n in nodes if n.name in later and n.idle is None],
                    {n.name: n.model for n in nodes},
                    rolling,
                    rollout(state=self.state),
                )
            for names in (self.waves.first, *self.waves.batches):
                self.left.append(set(names))
                self.ended.append(Event())
                if not names:
                    self.ended[-1].set()
        self.planned.set()

    def turn(self, name, scrape=None):
        """Wait for ``name``'s wave; why it must not restart, or None. A node still on the old
        configuration takes part in the canary's bake meanwhile (``scrape``: its metrics)."""
        if not self.together:
            self.turns.acquire()
            self.holding.add(name)
            return self.refused
        self.planned.wait()
        if self.refused:
            return self.refused
        wave = self.waves.wave_of(name)
        if self.bake and name in self.bake.old:
            self.bake.take_part(name, scrape)
        for ended in self.ended[:wave]:
            ended.wait()
        run = rollout(state=self.state)
        others = Counter(model for n, model in self.rotation.fleet_models if n not in self.facts)
        return last_in_rotation(
            name,
            [self.facts[n] for n in self.names],
            self.waves,
            set(run.done),
            {who for who, _ in run.failures},
            dict(others),
        )

    def leave(self, name):
        if name in self.holding:
            self.holding.discard(name)
            self.turns.release()
        if self.waves is None:
            return
        wave = self.waves.wave_of(name)
        self.left[wave].discard(name)
        if not self.left[wave]:
            self.ended[wave].set()


def _serves_after(found, profile_name):
    """What a node serves after a restart that did not end "served and back in rotation"."""
    outcome, previous = found.get("outcome"), _previous(found)
    if outcome == "served":  # the new configuration passed its gate; a router did not take it back
        back = found.get("rotation_failed") or found.get("cause") or "?"
        return f"serves {profile_name}, out of rotation (back in rotation failed: {back})"
    return {
        "rolled_back": f"rolled back: serves {previous}",
        "preflight_failed": f"preflight failed: serves {previous}",
        "regressed": f"serves {profile_name}, slower than its last known good (on_regression: fail)",
    }.get(outcome, f"{outcome}: not serving")


def _previous(found):
    """The profile a node went back to: the cycle's, or its restore step's; else unnamed."""
    restored = [step["profile"] for step in found.get("steps") or [] if step.get("profile")]
    return found.get("profile") or (restored[-1] if restored else "its previous configuration")


def _keep_previous(host, scripts, run, refusal):
    """The rollout stopped before this node: put its files back to its last known good (what
    it serves), so nothing half-applied is left for a later run to restart into."""
    ok, output = remote.run(host, StringCommand(scripts.restore_last_good()))
    found = result.parse(output.stdout_lines) or {}
    if found.get("status") == status.NO_LAST_GOOD:
        serves = "nothing yet (no configuration ever passed its gate here)"
    else:
        serves = found.get("profile") or "its previous configuration"
        if not ok:
            serves += f" (restoring its files failed: {script_cause(output)})"
    host.log_styled(f"not restarted: {refusal}; serves {serves}", fg="yellow", log_func=logger.error)
    run.note(host.name, f"not restarted: serves {serves}")
    return False


@operation(is_idempotent=False)
def router_restarted(plan, scripts_dir):
    """
    Restart the router (its configuration changed) and gate it: /readiness 200 and every
    expected worker healthy in /workers.

    + plan: ``fleet_plan.RouterPlan``
    + scripts_dir: where our on-node scripts are
    """
    yield f"systemctl restart {shlex.quote(plan.unit)}"
    yield FunctionCommand(_router_gate, (plan, scripts_dir), {})


@operation()
def router_serving(plan, scripts_dir):
    """
    The router enabled and running, and its gate passed; nothing changes when it is.

    + plan: ``fleet_plan.RouterPlan``
    + scripts_dir: where our on-node scripts are
    """
    unit_state = host.get_fact(UnitState, unit=plan.unit)
    if unit_state.get("UnitFileState") != "enabled":
        yield f"systemctl enable {shlex.quote(plan.unit)}"
    if unit_state.get("ActiveState") not in ("active", "activating"):
        yield f"systemctl start {shlex.quote(plan.unit)}"
        yield FunctionCommand(_router_gate, (plan, scripts_dir), {})
        return
    gate = host.get_fact(RouterGate, command=plan.gate(scripts_dir, timeout=0))
    if gate and gate.get("status") == status.READY:
        host.noop(f"router {plan.router.url}: ready, {len(plan.worker_urls)} worker(s) healthy")
        return
    yield FunctionCommand(_router_gate, (plan, scripts_dir), {})


def _router_gate(state, host, plan, scripts_dir):
    ok, output = run_streamed(host, plan.gate(scripts_dir))
    if not ok:
        host.log_styled(f"router gate failed: {script_cause(output)}", fg="red", log_func=logger.error)
        _, journal = remote.run(
            host,
            StringCommand(f"journalctl -u {shlex.quote(plan.unit)} -n 15 --no-pager -o cat | cut -c1-300"),
        )
        for line in journal.stdout_lines:
            host.log(f"  {plan.unit}: {line}", logger.error)
    return ok
