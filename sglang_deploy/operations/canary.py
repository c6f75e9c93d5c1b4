"""A canary's own steps in a rolling restart: its last known good kept aside before it
restarts, and its rollback when it failed its bake (rollout/bake.py judges the bake): back on
the configuration it served before (the record kept aside: lastgood.py keep / reinstate), out
of rotation like any restart.
"""

from __future__ import annotations

from pyinfra.api import StringCommand

from sglang_deploy.node.lib import result, status
from sglang_deploy.operations import remote
from sglang_deploy.operations.files import hook_paths
from sglang_deploy.operations.service import fail_with, run_cycle, script_cause


def keep_last_good(host, scripts):
    """Copy the canary's last known good aside before it restarts; why not, or None."""
    ok, output = remote.run(host, StringCommand(scripts.keep_last_good()))
    found = result.parse(output.stdout_lines) or {}
    if ok and found.get("status") == status.READY:
        return None
    return f"its last known good could not be kept for a rollback ({script_cause(output)})"


def roll_back(state, host, scripts, hook_python, rotation, run, why):
    """A canary that failed its bake, back on the configuration it served before, out of
    rotation (rotation.py around cycle.py --revert). Always False: the canary failed."""
    command = rotation.wrap(
        scripts.directory, scripts.revert_cycle(hook_paths(hook_python)), scripts.restore_last_good()
    )
    run.failed(host.name, why)
    try:
        found, output = run_cycle(host, command, scripts)
    except Exception as exc:  # the connection went away mid-rollback
        found, output = None, None
        cause = f"{type(exc).__name__}: {exc}"
    else:
        cause = (found or {}).get("cause") or (script_cause(output) if output else "no result")
    if found and found.get("outcome") == "rolled_back":
        previous = found.get("profile") or "its previous configuration"
        run.note(host.name, f"canary rolled back: serves {previous}")
        return fail_with(state, host, f"{why}; rolled back to {previous}")
    run.note(host.name, f"canary NOT rolled back ({cause}): check it")
    return fail_with(state, host, f"{why}; its rollback failed: {cause}")
