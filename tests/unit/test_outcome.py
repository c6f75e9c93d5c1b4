"""A deploy's per-host outcome lines and exit status."""

import logging
from types import SimpleNamespace

from pyinfra.api.state import State, StateStage

from sglang_deploy.cli import EXIT_DEPLOY_ERROR, EXIT_UNREACHABLE
from sglang_deploy.report.outcome import (
    DEPLOYED,
    FAILED,
    NOT_RUN,
    UNCHANGED,
    UNREACHABLE,
    WOULD_CHANGE,
    Outcome,
    OutcomeRecorder,
    exit_status,
    host_outcome,
    report_lines,
)


def ran(name, **kwargs):
    return host_outcome(name, **{"executed": True, "prepared_ops": 12, "changed_ops": 0, **kwargs})


def test_each_outcome_and_why():
    assert ran("n1", changed_ops=5) == Outcome("n1", DEPLOYED, "5 operations changed")
    assert ran("n1") == Outcome("n1", UNCHANGED)
    assert ran("n1", failed_at="'Preflight'").line() == (
        "sglang-deploy: n1: failed (at 'Preflight'; its cause is above)"
    )
    assert (
        ran("n2", unreachable="Could not connect (Connection refused)", prepared_ops=0).line()
        == "sglang-deploy: n2: unreachable (Could not connect (Connection refused))"
    )
    assert ran("n1", prepared_ops=0).state == NOT_RUN
    assert ran("n1", executed=False, changed_ops=1) == Outcome("n1", WOULD_CHANGE, "1 operation")
    assert ran("n1", executed=False).state == UNCHANGED


def test_exit_status_says_what_happened():
    deployed, unchanged = ran("a", changed_ops=1), ran("b")
    unreachable = ran("c", unreachable="refused")
    failed = ran("d", failed_at="'Serving'")
    assert exit_status([deployed, unchanged]) == 0
    assert exit_status([deployed, unreachable]) == EXIT_UNREACHABLE
    assert exit_status([unreachable, failed]) == EXIT_DEPLOY_ERROR
    assert exit_status([ran("e", prepared_ops=0)]) == EXIT_DEPLOY_ERROR
    assert len({0, EXIT_UNREACHABLE, EXIT_DEPLOY_ERROR, 2}) == 4  # 2 is a usage error


def test_report_ends_with_the_exit_status():
    lines = report_lines([ran("node1", changed_ops=2), ran("node2", unreachable="refused")])
    assert lines == [
        "sglang-deploy: node1: deployed (2 operations changed)",
        "sglang-deploy: node2: unreachable (refused)",
        f"sglang-deploy: exit status {EXIT_UNREACHABLE}: no host failed, but at "
        "least one could not be reached",
    ]


class Meta:
    def __init__(self, changed, complete=True):
        self.changed, self.complete = changed, complete

    def is_complete(self):
        return self.complete

    def did_succeed(self, _raise_if_not_complete=True):
        return True

    def did_change(self):
        return self.changed


class Host:
    def __init__(self, name, op_hash_order=()):
        self.name = name
        self.op_hash_order = list(op_hash_order)


class FakeState(SimpleNamespace):
    """A run's state over fake ops, meta and op_meta, read through pyinfra's own accessors."""

    get_op_meta = State.get_op_meta
    get_meta_for_host = State.get_meta_for_host
    get_op_data_for_host = State.get_op_data_for_host


def fake_state(stage):
    node1, node2 = Host("node1", ["a", "b"]), Host("node2")
    ops = {
        node1: {
            "a": SimpleNamespace(operation_meta=Meta(True)),
            "b": SimpleNamespace(operation_meta=Meta(False)),
        }
    }
    return (
        FakeState(
            inventory=[node1, node2],
            is_host_in_limit=lambda host: True,
            current_stage=stage,
            failed_hosts={node2},
            activated_hosts={node1},
            ops=ops,
            meta={node1: SimpleNamespace(ops_change=1)},
            op_meta={"a": SimpleNamespace(names={"Serving"})},
        ),
        node1,
        node2,
    )


def test_recorder_reads_a_run_with_one_host_unreachable():
    state, node1, node2 = fake_state(StateStage.Disconnect)
    recorder = OutcomeRecorder()
    logger = logging.getLogger("test_outcome")
    logger.addHandler(recorder.errors)
    # As pyinfra logs a connection error: a bold host prefix, the reason in red.
    logger.error("\x1b[1m[node2]\x1b[0m \x1b[31mCould not connect\n (Connection refused)\x1b[0m")
    logger.error("[node2] a later error")
    assert recorder.outcomes(state) == [
        Outcome("node1", DEPLOYED, "1 operation changed"),
        Outcome("node2", UNREACHABLE, "Could not connect (Connection refused)"),
    ]


def test_recorder_names_the_failed_operation_after_its_last_retry():
    state, node1, node2 = fake_state(StateStage.Disconnect)
    state.failed_hosts = {node1}
    state.activated_hosts = {node1, node2}
    recorder = OutcomeRecorder()
    recorder.operation_host_error(state, node1, "a", retry_count=0, max_retries=1)
    assert recorder.failed_at == {}
    recorder.operation_host_error(state, node1, "a", retry_count=1, max_retries=1)
    assert recorder.outcomes(state)[0] == Outcome("node1", FAILED, "at 'Serving'; its cause is above")


def test_the_failed_operation_is_named_without_its_recipe():
    """Operations called inside a recipe (pyinfra's @deploy) carry its name as a prefix."""
    state, node1, node2 = fake_state(StateStage.Disconnect)
    state.failed_hosts = {node1}
    state.op_meta = {"a": SimpleNamespace(names={"Serving node | Restart (configuration changed)"})}
    recorder = OutcomeRecorder()
    recorder.operation_host_error(state, node1, "a", retry_count=0, max_retries=0)
    assert recorder.outcomes(state)[0] == Outcome(
        "node1", FAILED, "at 'Restart (configuration changed)'; its cause is above"
    )


def test_a_dry_run_says_what_would_change():
    state, node1, node2 = fake_state(StateStage.Prepare)
    state.failed_hosts, state.activated_hosts = set(), {node1, node2}
    outcomes = OutcomeRecorder().outcomes(state)
    assert outcomes[0] == Outcome("node1", WOULD_CHANGE, "1 operation")
    assert outcomes[1].state == NOT_RUN


def test_a_run_stopped_by_an_internal_error_is_a_failure_not_unchanged():
    # pyinfra's greenlet died inside an operation: nothing recorded a failure, and the
    # operations from there on never completed.
    state, node1, node2 = fake_state(StateStage.Disconnect)
    state.ops[node1] = {"a": SimpleNamespace(operation_meta=Meta(False, complete=False))}
    state.failed_hosts, state.activated_hosts = set(), {node1, node2}
    found = OutcomeRecorder().outcomes(state)
    assert found[0] == Outcome(
        "node1", FAILED, "the run stopped before 'Serving' completed; its cause is above"
    )
    assert exit_status(found) == EXIT_DEPLOY_ERROR


def test_a_run_that_stopped_on_an_exception_in_the_deploy_file_ran_nothing_anywhere():
    # pyinfra prepares host after host; an exception in deploy.py for the last one ends the run
    # before anything executes: the hosts prepared before it must not read as unchanged.
    state, node1, node2 = fake_state(StateStage.Prepare)
    state.failed_hosts, state.activated_hosts = set(), {node1, node2}
    recorder = OutcomeRecorder()
    logger = logging.getLogger("test_outcome_aborted")
    logger.addHandler(recorder.aborted)
    logger.warning("--> \x1b[31;1mAn exception occurred in: deploy.py\x1b[0m:\n")
    found = recorder.outcomes(state)
    assert found[0] == Outcome(
        "node1", NOT_RUN, "nothing ran: the run stopped: An exception occurred in: deploy.py; see above"
    )
    assert exit_status(found) == EXIT_DEPLOY_ERROR
