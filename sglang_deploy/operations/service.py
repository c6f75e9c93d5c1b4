"""The server's lifecycle: preflight, the restart cycle through the readiness gate with rollback
(run by operations/rollout.py's rolled_restart, out of rotation), and "serving" checks that leave
a serving node alone."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, StringCommand, operation
from pyinfra.facts.files import File

from sglang_deploy.facts.serving import LastGood, Preflight, Serving, UnitState, WorkerEnvironment
from sglang_deploy.node.lib import result, status
from sglang_deploy.operations import remote
from sglang_deploy.operations.files import hook_paths
from sglang_deploy.operations.streamed import run_detached, run_streamed
from sglang_deploy.plan.settings import default
from sglang_deploy.report import throughput_log as throughput

if TYPE_CHECKING:
    from sglang_deploy.plan.commands.unit import NodeScripts


def fail_with(state, host, message):
    host.log_styled(message, fg="red", log_func=logger.error)
    return False


@operation()
def preflight(scripts: NodeScripts, engine_ready: bool, repairing: bool = False):
    """
    Check, before anything on the node changes, that this configuration can start there.

    The engine's own parser accepts the argv (when the pinned engine is already installed; the
    restart repeats it after an install), model paths, GPUs, port, free disk. A check only: never a
    change.

    + scripts: ``NodeScripts`` for this node
    + engine_ready: whether the venv already holds the pinned engine
    + repairing: drift is about to be repaired, so it only warns here

    **Examples:**

    .. code:: python

        sglang.preflight(
            name="Preflight",
            scripts=plan.scripts,
            engine_ready=sglang.engine_matches(plan.venv, plan.profile.engine.packages),
        )
    """
    if host.get_fact(File, path=f"{scripts.directory}/preflight.py") is None:
        host.noop("preflight runs once our scripts are on the node (a dry run of a first deploy)")
        return
    # The venv of this pin set judges the argv once built; before, is there room to build it?
    python = f"{scripts.venv}/bin/python" if engine_ready else "python3"
    found = host.get_fact(
        Preflight,
        command=scripts.preflight(
            python,
            argv_check=engine_ready,
            allow_drift=repairing,
            new_venv=None if engine_ready else scripts.venv,
        ),
    )
    if found is None:
        yield FunctionCommand(fail_with, ("preflight failed: the script printed no result",), {})
        return
    for warning in found["warnings"]:
        host.log(f"preflight warning: {warning}", logger.warning)
    if found["status"] != status.READY:
        yield FunctionCommand(fail_with, (f"preflight failed: {found['cause']}",), {})
        return
    host.noop("; ".join("preflight %(verdict)s: %(text)s" % check for check in found["checks"]))


def script_cause(output):
    """Why a script failed: the cause in its result line; without one (it died), its last
    line of stderr."""
    found = result.parse(output.stdout_lines)
    if found and found.get("cause"):
        return found["cause"]
    lines = [line.strip() for line in output.stderr_lines + output.stdout_lines if line.strip()]
    return lines[-1] if lines else "no output"


def _run_step(host, what, command):
    """Run one step, streaming its output; on failure log what failed and why (the script's
    result line) and return (False, output)."""
    ok, output = run_streamed(host, command)
    if not ok:
        host.log_styled(f"{what} failed: {script_cause(output)}", fg="red", log_func=logger.error)
    return ok, output


def _run_steps(host, steps):
    return all(_run_step(host, what, command)[0] for what, command in steps)


def _gate_steps(scripts):
    """Readiness gate, then the workers' environment."""
    return [("readiness gate", scripts.gate()), ("worker environment check", scripts.workers())]


def run_cycle(host, command, scripts=None):
    """Run a restart cycle (node/cycle.py, or rotation.py around it), streaming its output; its
    result (None when it printed none) and output. Failed steps and the decode check's figure
    are said here, once for every caller. With ``scripts`` (the node's NodeScripts) it runs
    detached from this SSH session (streamed.run_detached): a controller that dies leaves it
    running to its end."""
    _, output = run_detached(host, scripts, command) if scripts is not None else run_streamed(host, command)
    found = result.parse(output.stdout_lines)
    if found is None:
        return None, output
    for step in found.get("steps", []):
        if step["status"] != status.READY:
            host.log_styled(f"{step['step']} failed: {step['cause']}", fg="red", log_func=logger.error)
    _say_decode_check(host, found)
    return found, output


def _restart_or_roll_back(state, host, scripts, hook_python, rollback, running=False):
    """The restart cycle, on the node in one call (node/cycle.py): preflight, restart on the
    new configuration, gate, workers, decode check, record; if it does not pass, put the last
    one that did back, restart on it and gate again. Either way a failed change fails the
    deploy. A failed preflight stops nothing: the files go back and the server keeps serving.
    ``running``: the server already runs what is installed: the cycle starts at the gate."""
    found, output = run_cycle(host, scripts.cycle(hook_paths(hook_python), rollback, running), scripts)
    if found is None:
        host.log_styled(f"restart cycle failed: {script_cause(output)}", fg="red", log_func=logger.error)
        return False
    return say_outcome(host, found)


def _say_decode_check(host, found):
    """The decode check's figure (recorded in reports/throughput/), if one ran."""
    said = throughput.took_note(host.name, found)
    if said:
        text, level = said
        log, colour = {
            "info": (logger.info, None),
            "warning": (logger.warning, "yellow"),
            "error": (logger.error, "red"),
        }[level]
        host.log_styled(text, fg=colour, log_func=log)
    restored = throughput.took_restored_note(host.name, found)
    if restored:
        host.log(restored, logger.info)


def say_outcome(host, found):
    """The cycle's outcome, in the words the operator reads; True when the new one serves."""
    outcome, previous = found["outcome"], found.get("profile") or "?"
    if outcome == "preflight_failed" and found["restored"]:
        host.log_styled(
            "nothing was stopped: the running server is untouched", fg="yellow", log_func=logger.error
        )
    elif outcome == "failed" and found.get("restored") is False:
        host.log_styled("rollback disabled: the node is left as it is", fg="red", log_func=logger.error)
    elif outcome == "rolled_back":
        host.log_styled(f"rolled back: serving {previous} again", fg="yellow", log_func=logger.error)
    elif outcome == "regressed":
        host.log_styled(
            "on_regression: fail: the new configuration serves, but is not recorded as the last known good",
            fg="red",
            log_func=logger.error,
        )
    elif outcome == "rollback_failed" and found["restored"]:
        host.log_styled(f"rollback to {previous} failed too", fg="red", log_func=logger.error)
    return outcome == "served"


def _start_and_record(state, host, scripts, hook_python, rollback):
    """Start the unit, then judge what it serves like any restart: gate, workers, decode
    check, record (or roll back)."""
    return _run_steps(host, [("start", scripts.start())]) and _restart_or_roll_back(
        state, host, scripts, hook_python, rollback, running=True
    )


def _gate_and_record(state, host, scripts, hook_python, rollback):
    return _run_steps(host, _gate_steps(scripts)) and _last_good_is_what_serves(
        state, host, scripts, hook_python, rollback
    )


def _last_good_is_what_serves(state, host, scripts, hook_python, rollback):
    """A server that passed its gate and worker check runs a configuration: if that is not the
    recorded last known good (a deploy died before recording it, or its decode check found a
    regression under `on_regression: fail`), judge it like a restart from the gate on: decode
    check, then record it or not. If the server started before what is installed was written
    (a deploy died before restarting), what is installed never passed a gate: restart through
    the gate, with rollback."""
    paths = hook_paths(hook_python)
    ok, output = remote.run(host, StringCommand(scripts.compare_last_good(paths)))
    found = LastGood().process(output.stdout_lines) if ok else None
    if found is None:
        host.log_styled(
            f"comparing with the last known good failed: {script_cause(output)}",
            fg="red",
            log_func=logger.error,
        )
        return False
    if not found["differs"]:
        return True
    if found["not_running"]:
        host.log(f"{found['not_running']}: restarting", logger.warning)
        return _restart_or_roll_back(state, host, scripts, hook_python, rollback)
    host.log(
        f"serving a configuration other than the last known good "
        f"({', '.join(found['differs'])}): checking it before recording it",
        logger.warning,
    )
    return _restart_or_roll_back(state, host, scripts, hook_python, rollback, running=True)


def _check_workers(state, host, scripts):
    return _run_steps(host, [("worker environment check", scripts.workers())])


@operation()
def serving(scripts: NodeScripts, hook_python: str, rollback: bool = default("rollback")):
    """
    Ensure the unit is enabled and serving without touching a server that already serves.

    Start and gate it when it is not active, gate it when it is active but not ready, and check that
    every scheduler carries the profile's environment. A server it starts, and a serving
    configuration that is not the recorded last known good, are judged like a restart (gate,
    workers, decode check) before they are recorded; one installed after the server started is
    restarted into (a deploy that died midway leaves either).

    + scripts: ``NodeScripts`` for this node
    + hook_python: interpreter whose start-up hook belongs to the configuration
    + rollback: restore the last known good when what it starts or finds fails its checks

    **Examples:**

    .. code:: python

        sglang.serving(
            name="Serving",
            scripts=plan.scripts,
            hook_python=plan.hook_python,
            rollback=plan.settings.rollback,
        )
    """
    unit, profile = scripts.unit, scripts.profile
    unit_state = host.get_fact(UnitState, unit=unit)
    if unit_state.get("UnitFileState") != "enabled":
        yield f"systemctl enable {shlex.quote(unit)}"
    if unit_state.get("ActiveState") not in ("active", "activating"):
        yield FunctionCommand(_start_and_record, (scripts, hook_python, rollback), {})
        return
    serving_now = host.get_fact(
        Serving,
        port=profile.service.port,
        health_path="/ping",
        served_name=profile.model.served_name,
        host=profile.service.probe_host,
        auth=tuple(scripts.api_key_args()),
    )
    if not (serving_now and serving_now["ready"]):
        yield FunctionCommand(_gate_and_record, (scripts, hook_python, rollback), {})
        return
    paths = hook_paths(hook_python)
    last_good = paths and host.get_fact(
        LastGood, scripts_dir=scripts.directory, command=scripts.compare_last_good(paths)
    )
    if last_good and last_good["differs"] and last_good.get("not_running"):
        # What is installed was written after the server started (a deploy that died before
        # its restart): its workers cannot carry it yet; restart into it through the gate.
        yield FunctionCommand(_last_good_is_what_serves, (scripts, hook_python, rollback), {})
        return
    report = host.get_fact(
        WorkerEnvironment, scripts_dir=scripts.directory, unit=unit, expect=profile.hook_vars()
    )
    if not report or report.get("status") != status.READY:
        yield FunctionCommand(_check_workers, (scripts,), {})
        return
    if last_good and last_good["differs"]:
        yield FunctionCommand(_last_good_is_what_serves, (scripts, hook_python, rollback), {})
        return
    host.noop(
        f"{unit} serves {profile.model.served_name}; "
        f"{len(report['workers'])} schedulers carry the profile's environment"
    )
