"""One deploy at a time per node."""

from __future__ import annotations

from pathlib import Path

from pyinfra import host, logger, state
from pyinfra.api import FunctionCommand, operation

from sglang_deploy import run_state
from sglang_deploy.node.lib import result
from sglang_deploy.operations import remote
from sglang_deploy.operations.service import fail_with
from sglang_deploy.plan.commands import cycles_dir_of_lock, lock_command

NODE_DIR = Path(__file__).resolve().parent.parent / "node"


@operation()
def deploy_lock(path: str, wait_s: float, holder: str):
    """
    Hold the node's deploy lock for the rest of this run.

    Two operators cannot interleave restarts. The lock lives in an SSH session of its own: it
    goes away with this process, however the process ends. Taking it is not a change. It is taken
    when the run executes (pyinfra generates each operation again then, in order): preparing the
    run, and all of a ``--dry`` run, runs nothing on the node.

    + path: lock file on the node
    + wait_s: how long to wait for another deploy to finish
    + holder: who we are, shown to whoever waits for us

    **Examples:**

    .. code:: python

        sglang.deploy_lock(
            name="Deploy lock",
            path=plan.lock_path,
            wait_s=float(plan.settings.deploy_lock_wait_s),
            holder=plan.lock_holder,
        )
    """
    if not state.is_executing:
        host.noop(f"the deploy lock {path} is taken when the deploy runs")
        return
    held = run_state.of(state).held_locks
    outcome = held.get(host.name)
    if outcome is None:
        outcome = held[host.name] = _take_lock(path, wait_s, holder)
    if isinstance(outcome, str):
        yield FunctionCommand(fail_with, (f"deploy lock {path}: {outcome}",), {})
        return
    host.noop(f"holding the deploy lock {path}")


def previous_cycle_line(event, waited=False):
    """What a restart cycle that ended with no controller watching left the node serving."""
    when = "ended while this run waited for it" if waited else "finished while no controller watched"
    outcome, cause = event.get("outcome"), event.get("cause")
    restored = event.get("restored_profile") or "its previous configuration"
    said = {
        "served": f"served {event.get('profile')}",
        "rolled_back": f"rolled back: serves {restored} ({cause})",
        "preflight_failed": f"preflight failed: serves {restored} ({cause})",
        "router_unreachable": f"not restarted: {cause}",
        "router_failed": f"not restarted: {cause}",
        "last_in_rotation": f"not restarted: {cause}",
        "regressed": f"serves {event.get('profile')}, unrecorded: {cause}",
    }.get(outcome)
    if said is None:
        said = (
            f"{outcome}: {cause}"
            if outcome
            else f"it ended with no result (exit status {event.get('exit_status')}): state unknown"
        )
    return f"the restart of the previous run (started {event.get('started')}) {when}: {said}"


def _take_lock(path, wait_s, holder):
    """The channel holding the lock, or a one-line reason why it could not be taken. The
    helper runs as the deploy's other commands do (sudo and all: remote.unix_command): the
    lock file is root's."""
    client = getattr(host.connector, "client", None)
    if client is None:
        return "this connector cannot hold a lock (SSH only)"
    source = (NODE_DIR / "lock.py").read_text()
    channel = client.get_transport().open_session()
    channel.exec_command(
        remote.unix_command(
            host, lock_command(path, wait_s, holder, source=source, cycles_dir=cycles_dir_of_lock(path))
        )
    )
    lines = channel.makefile("r")
    waited_for = set()  # the cycles this run waited for (and followed) before the lock
    for line in lines:
        for event in result.events([line]):
            if event["event"] == "locked":
                return channel
            if event["event"] == "cycle_running":
                waited_for.add(event["started"])
                host.log(
                    f"the restart of a previous run (started {event['started']}, {event['profile']}) "
                    f"still runs on the node: waiting up to {wait_s:.0f}s for it, following it",
                    logger.warning,
                )
            elif event["event"] == "cycle_progress":
                host.log(f"  {event['line']}", logger.info)
            elif event["event"] == "previous_cycle":
                host.log(previous_cycle_line(event, event["started"] in waited_for), logger.warning)
            elif event["event"] == "waiting":
                host.log(
                    f"waiting up to {wait_s:.0f}s for the deploy lock, held by {event['holder']}",
                    logger.warning,
                )
            elif event["event"] == "busy":
                return f"held by {event['holder']} (waited {wait_s:.0f}s)"
    code = channel.recv_exit_status()
    said = [line.strip() for line in channel.makefile_stderr("r") if line.strip()]
    return f"lock helper exited with status {code}" + (f": {said[-1][:300]}" if said else "")
