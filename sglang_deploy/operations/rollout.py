"""A fleet's operations: a node's restart out of rotation, ordered in waves across the run
(the nodes that serve nothing together first, then the others in batches), and the router's
service and gate."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, StringCommand, operation

from sglang_deploy.facts.fleet import RouterGate
from sglang_deploy.facts.serving import UnitState
from sglang_deploy.node.lib import result, status
from sglang_deploy.operations import canary, remote
from sglang_deploy.operations.files import hook_paths
from sglang_deploy.operations.service import fail_with, run_cycle, say_outcome, script_cause
from sglang_deploy.operations.streamed import run_streamed
from sglang_deploy.rollout.bake import scraper
from sglang_deploy.rollout.waves import NODES, node_facts, rollout, turn

if TYPE_CHECKING:
    from sglang_deploy.plan.commands.unit import NodeScripts
    from sglang_deploy.plan.fleet_hosts import Rotation, RouterPlan

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


@operation(is_idempotent=False)
def rolled_restart(
    scripts: NodeScripts, hook_python: str, rotation: Rotation, profile_name: str, rollback: bool
):
    """
    Restart the server out of rotation, in its wave.

    node/rotation.py around node/cycle.py: out of every router, drained, restarted through the gate
    (rolled back when it fails), back in every router and healthy there. Every node's operation runs
    at once and waits for its wave (rollout/waves.py): the nodes that serve nothing (read before any
    restart: unit state, router health) start together first, then the others ``rolling_batch`` at a
    time. Once the rollout stopped (more than ``rolling_max_failures`` nodes failed), a later node
    is not restarted: its files go back to its last known good and it keeps serving what it served.

    + scripts: ``NodeScripts`` for this node
    + hook_python: interpreter whose start-up hook belongs to the configuration
    + rotation: ``plan.fleet_hosts.Rotation`` for this node
    + profile_name: the profile being rolled out (for the per-host report)
    + rollback: restore the last known good when the new configuration fails its gate

    **Examples:**

    .. code:: python

        sglang.rolled_restart(
            name="Restart (configuration changed)",
            scripts=plan.scripts,
            hook_python=plan.hook_python,
            rotation=plan.rotation,
            profile_name=plan.profile.name,
            rollback=plan.settings.rollback,
        )
    """
    yield FunctionCommand(_rotate, (scripts, hook_python, rotation, profile_name, rollback), {})


def _rotate(state, host, scripts, hook_python, rotation, profile_name, rollback):
    run = rollout(state, rotation.rolling)

    def facts():
        return node_facts(host, scripts, rotation)

    with turn(state, host, NODES, rotation, facts, scraper(host, rotation)) as (waves, refusal):
        if waves and waves.bake and host.name in waves.bake.canaries:
            args = (state, host, scripts, hook_python, rotation, profile_name, rollback, run)
            return _canary(*args, refusal, waves.bake)
        return _restart(state, host, scripts, hook_python, rotation, profile_name, rollback, run, refusal)


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
    verdict = bake.take_part(host.name, scraper(host, rotation))
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
def router_restarted(plan: RouterPlan, scripts_dir: str):
    """
    Restart the router (its configuration changed) and gate it.

    The gate: /readiness 200 and every expected worker healthy in /workers.

    + plan: ``plan.fleet_hosts.RouterPlan``
    + scripts_dir: where our on-node scripts are

    **Examples:**

    .. code:: python

        sglang.router_restarted(
            name="Router restart",
            plan=router,
            scripts_dir=scripts_dir,
        )
    """
    yield f"systemctl restart {shlex.quote(plan.unit)}"
    yield FunctionCommand(_router_gate, (plan, scripts_dir), {})


@operation()
def router_serving(plan: RouterPlan, scripts_dir: str):
    """
    The router enabled and running, and its gate passed; nothing changes when it is.

    + plan: ``plan.fleet_hosts.RouterPlan``
    + scripts_dir: where our on-node scripts are

    **Examples:**

    .. code:: python

        sglang.router_serving(
            name="Router serving",
            plan=router,
            scripts_dir=scripts_dir,
        )
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
