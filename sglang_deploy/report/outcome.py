"""What became of each host, as a deploy's last lines, and an exit status that says so.

pyinfra's own ending reads as if a run with an unreachable host went well: the host is named
once among the connection lines, the results table counts only the hosts it reached, and
"No hosts remaining!" or "[Errno None]" lines follow a failure. So every deploy ends with one
line per host of the run, after everything pyinfra prints:

    sglang-deploy: node1: deployed (5 operations changed)
    sglang-deploy: node2: unreachable (Could not connect (Connection refused))
    sglang-deploy: exit status 3: no host failed, but at least one could not be reached

config.py (pyinfra loads it before connecting) starts watching, so connection errors are
seen; deploy.py asks for the report and registers a state callback for failed operations. The report runs at interpreter exit, the only point after
pyinfra's last line, and exits with the status of the outcomes where that says more than 0.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from pyinfra.api.state import BaseStateCallback, StateStage

from sglang_deploy import run_state
from sglang_deploy.cli import EXIT_DEPLOY_ERROR, EXIT_UNREACHABLE
from sglang_deploy.report import failed_hosts

DEPLOYED = "deployed"
UNCHANGED = "unchanged"
WOULD_CHANGE = "would change"  # a dry run, or a run not confirmed: nothing was executed
FAILED = "failed"
UNREACHABLE = "unreachable"
NOT_RUN = "not run"

EXIT_DESCRIPTIONS = {
    0: "every host deployed or unchanged",
    EXIT_DEPLOY_ERROR: "at least one host failed or never ran",
    EXIT_UNREACHABLE: "no host failed, but at least one could not be reached",
}


@dataclass(frozen=True)
class Outcome:
    host: str
    state: str
    why: str = ""

    def line(self) -> str:
        return f"sglang-deploy: {self.host}: {self.state}" + (f" ({self.why})" if self.why else "")


def host_outcome(
    name,
    *,
    unreachable=None,
    failed_at=None,
    executed,
    prepared_ops,
    changed_ops,
    stopped_before=None,
    aborted=None,
):
    """One host's outcome from what the run saw of it.

    unreachable: why the connection failed (None: connected); failed_at: the operation that
    failed (None: none did); executed: whether operations ran at all (not a dry run);
    prepared_ops: operations prepared for the host; changed_ops: those that changed (executed)
    or would change (not executed); stopped_before: the first operation an executed run never
    completed for the host, with no failure recorded (pyinfra stopped on an internal error);
    aborted: why the run stopped while preparing (an exception in deploy.py), if it did.
    """
    if unreachable is not None:
        return Outcome(name, UNREACHABLE, unreachable)
    if failed_at is not None:
        return Outcome(name, FAILED, f"at {failed_at}; its cause is above")
    if executed and stopped_before is not None:
        return Outcome(name, FAILED, f"the run stopped before {stopped_before} completed; its cause is above")
    if not prepared_ops:
        return Outcome(name, NOT_RUN, "the deploy stopped before its operations; see above")
    if aborted and not executed:
        return Outcome(name, NOT_RUN, f"nothing ran: {aborted}; see above")
    if not executed:
        return (
            Outcome(name, WOULD_CHANGE, _count(changed_ops, "operation"))
            if changed_ops
            else Outcome(name, UNCHANGED, "nothing would change")
        )
    if changed_ops:
        return Outcome(name, DEPLOYED, _count(changed_ops, "operation") + " changed")
    return Outcome(name, UNCHANGED)


def with_note(outcome, note):
    """The outcome with ``note`` (the decode check's figure) added to its reason."""
    if not note:
        return outcome
    return Outcome(outcome.host, outcome.state, f"{outcome.why}; {note}" if outcome.why else note)


def exit_status(outcomes) -> int:
    """EXIT_DEPLOY_ERROR if any host failed or never ran, else EXIT_UNREACHABLE if any host
    could not be reached, else 0."""
    states = {outcome.state for outcome in outcomes}
    if states & {FAILED, NOT_RUN}:
        return EXIT_DEPLOY_ERROR
    if UNREACHABLE in states:
        return EXIT_UNREACHABLE
    return 0


def report_lines(outcomes) -> list:
    status = exit_status(outcomes)
    return [outcome.line() for outcome in outcomes] + [
        f"sglang-deploy: exit status {status}: {EXIT_DESCRIPTIONS[status]}"
    ]


def with_rollout_notes(outcomes, notes):
    """Each host's outcome with what it serves after a rolling restart (``notes``: the run
    state's rollout notes), where one ran."""
    return [Outcome(o.host, o.state, "; ".join(filter(None, [o.why, notes.get(o.host)]))) for o in outcomes]


def _count(n, noun):
    return f"{n} {noun}{'' if n == 1 else 's'}"


# -- Watching a pyinfra run --------------------------------------------------------------------

_PREFIXED = re.compile(r"\[(?P<host>[^\]\s]+)\]\s+(?P<message>.*)", re.S)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class HostErrors(logging.Handler):
    """The first error line pyinfra logs for each host (for an unreachable host: why). State
    callbacks cannot see connection errors from a deploy: pyinfra connects before it runs
    config-time code that could register one."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.first = {}

    def emit(self, record):
        match = _PREFIXED.match(_ANSI.sub("", record.getMessage()))
        if match:
            self.first.setdefault(match["host"], " ".join(match["message"].split()))


class RunAborted(logging.Handler):
    """Whether pyinfra gave up while preparing the run: it logs an exception raised by the
    deploy file (or its own error) as a warning, then exits 1; the hosts prepared before it
    would otherwise read as unchanged."""

    MESSAGES = ("An exception occurred in: ", "pyinfra error")

    def __init__(self):
        super().__init__(logging.WARNING)
        self.why = None

    def emit(self, record):
        text = _ANSI.sub("", record.getMessage())
        for message in self.MESSAGES:
            if message in text and self.why is None:
                self.why = "the run stopped: " + text.split("--> ", 1)[-1].strip().rstrip(":")


class OutcomeRecorder(BaseStateCallback):
    """Which operation failed on which host, and, at the end, every host's outcome."""

    def __init__(self, errors=None):
        self.errors = errors if errors is not None else HostErrors()
        self.aborted = RunAborted()
        self.failed_at = {}
        self.report = False

    def operation_host_error(self, state, host, op_hash, retry_count=0, max_retries=0):
        if retry_count >= max_retries:
            self.failed_at.setdefault(host.name, _names(state, op_hash))

    def outcomes(self, state) -> list:
        executed = state.current_stage >= StateStage.Execute
        run = run_state.of(state)
        found = []
        for host in state.inventory:
            if not state.is_host_in_limit(host):
                continue
            unreachable = None
            if host in state.failed_hosts and host not in state.activated_hosts:
                unreachable = self.errors.first.get(host.name, "could not connect")
            failed_at = self.failed_at.get(host.name)
            if failed_at is None and executed and host in state.failed_hosts:
                failed_at = "an operation"
            ops = _host_ops(state, host)
            if executed:
                changed = sum(1 for data in ops.values() if _changed(data.operation_meta))
            else:
                changed = _changes_found(state, host)
            stopped_before = next(
                (
                    _names(state, op_hash)
                    for op_hash, data in ops.items()
                    if not data.operation_meta.is_complete()
                ),
                None,
            )
            outcome = host_outcome(
                host.name,
                unreachable=unreachable,
                failed_at=failed_at,
                executed=executed,
                prepared_ops=len(ops),
                changed_ops=changed,
                stopped_before=stopped_before,
                aborted=self.aborted.why,
            )
            outcome = with_note(outcome, run.decode_notes.get(host.name))
            found.append(with_note(outcome, run.group_notes.get(host.name)))
        return found


def _host_ops(state, host) -> dict:
    """{operation hash: pyinfra's data of it for ``host``} of the operations prepared for the
    host, in the order they were added, read through State.get_op_data_for_host. pyinfra has no
    public call that lists a host's operations: Host.op_hash_order (which State.get_op_order
    reads too) names them, and our run state records none."""
    found = {}
    for op_hash in getattr(host, "op_hash_order", ()):
        try:
            found[op_hash] = state.get_op_data_for_host(host, op_hash)
        except KeyError:  # a _run_once operation, prepared for another host only
            continue
    return found


def _changes_found(state, host) -> int:
    """The operations a run that executed nothing found would change on ``host``."""
    try:
        return state.get_meta_for_host(host).ops_change
    except KeyError:
        return 0


def _names(state, op_hash) -> str:
    """The operation's own name, without the recipe's (pyinfra prefixes "Recipe | ")."""
    names = {name.rsplit(" | ", 1)[-1] for name in state.get_op_meta(op_hash).names}
    return repr(", ".join(sorted(names)) or op_hash)


def _changed(meta) -> bool:
    return meta.did_succeed(_raise_if_not_complete=False) and meta.did_change()


def watch(state=None):
    """Start watching this run (idempotent; from config.py, before hosts are connected): its
    error lines now, the report at exit, printed once `report_at_exit` asked for it. The
    recorder is the run state's: one per pyinfra run."""
    from pyinfra import logger
    from pyinfra.context import ctx_state

    state = state if state is not None else ctx_state.get()
    run = run_state.of(state)
    if run.recorder is None:
        run.recorder = OutcomeRecorder()
        logger.addHandler(run.recorder.errors)
        logger.addHandler(run.recorder.aborted)
        atexit.register(_report, state, run.recorder)
    return run.recorder


def report_at_exit():
    """End this run with the per-host outcome lines and their exit status (from deploy.py,
    which runs once per host: registers once)."""
    from pyinfra import state

    recorder = watch()
    recorder.report = True
    if recorder not in state.callback_handlers:
        state.add_callback_handler(recorder)


def retry_line(outcomes, executed, path=None, inventory=None) -> str | None:
    """Rewrite the failed-hosts file (report/failed_hosts.py) after a run that executed; the
    line that says how to re-run what it lists, or None when it lists nothing."""
    if not executed:
        return None
    path = path or failed_hosts.PATH
    names = failed_hosts.update(outcomes, path, inventory)
    if not names:
        return None
    return (
        f"sglang-deploy: to re-run {len(names)} host(s) that did not deploy ({', '.join(names)}): "
        f"make deploy RETRY=1 (LIMIT=@{_shown(path)})"
    )


def _shown(path):
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


def _report(state, recorder):
    if not recorder.report or not getattr(state, "initialised", False):
        return
    outcomes = with_rollout_notes(recorder.outcomes(state), run_state.of(state).rollout_notes())
    if not outcomes:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        inventory = {h.name for h in state.inventory}
        retry = retry_line(outcomes, state.current_stage >= StateStage.Execute, inventory=inventory)
    except OSError as exc:  # the report's lines matter more than the file
        retry = f"sglang-deploy: the failed-hosts file could not be written: {exc}"
    # The re-run hint first: the last lines stay one per host, then the exit status.
    for line in ([retry] if retry else []) + report_lines(outcomes):
        print(line, file=sys.stderr)
    sys.stderr.flush()
    status = exit_status(outcomes)
    if status:
        # An atexit handler cannot change the status sys.exit() set; os._exit can (nothing
        # is left to run but interpreter clean-up: the streams are flushed above).
        logging.shutdown()
        os._exit(status)
