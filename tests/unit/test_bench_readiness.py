"""bench/readiness.py's crash scenario: which start crashed and when the gate said so, from a
deploy's output lines alone (the bench itself needs a sandbox node)."""

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "readiness.py"


def _load():
    sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("bench_readiness", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


bench = _load()

# A crash-load deploy as the controller reads it: the cycle streams each step's progress as it
# comes (the crashed start, its gate's failure, the rollback's restart and gate); the summary
# `readiness gate failed:` and `rolled back:` lines come from the cycle's result, at its end.
CRASH_DEPLOY = [
    (100.0, "    [node3] [   0.0s] stopping sglang.service: active/running, main pid 1200, 4 processes"),
    (100.2, "    [node3] [   0.2s] port 30000 free"),
    (100.3, "    [node3] [   0.3s] started sglang.service: main pid 1300, invocation aaaa1111"),
    (100.4, "    [node3] [   0.0s] gating sglang.service: main pid 1300, http://127.0.0.1:30000, ..."),
    (102.5, "    [node3] [   2.1s] phase: loading weights"),
    (
        104.9,
        "    [node3] [   4.5s] failed: scheduler-died: the scheduler died during initialization: "
        "RuntimeError: ... (unit failed/failed, main process exited with status 1)",
    ),
    (104.9, "    [node3] --- last 12 journal lines of this start ---"),
    (104.9, "    [node3] [2026-12-01 10:00:31] Received sigquit from a child process. It usually means ..."),
    (104.9, "    [node3] ---"),
    (105.0, "    [node3] rolling back to the last configuration that passed the gate"),
    (105.2, "    [node3] [   0.1s] port 30000 free"),
    (105.3, "    [node3] [   0.2s] started sglang.service: main pid 1400, invocation bbbb2222"),
    (111.5, "    [node3] ready in 6.1s (phase times: starting 0.5s, loading 4.0s, warmup 1.6s)"),
    (111.9, "    [node3] readiness gate failed: scheduler-died: the scheduler died during initialization"),
    (111.9, "    [node3] rolled back: serving bench-ready-a again"),
]


def test_the_crashed_start_is_the_one_the_gate_failed_not_the_restored_one():
    invocation, failed, cause = bench.crashed_start(CRASH_DEPLOY)
    assert invocation == "aaaa1111"  # not bbbb2222, the rollback's start
    assert failed[0] == 104.9 and cause == "scheduler-died"  # the gate's own line, as it streamed
    # What the bench read before: the last start announced before the summary line, whose
    # journal (a healthy start of the last known good) has no error line to time the crash by.
    summary = next(when for when, text in CRASH_DEPLOY if "readiness gate failed:" in text)
    starts = bench.invocations(SimpleNamespace(lines=CRASH_DEPLOY))
    assert [inv for when, inv in starts if when <= summary][-1] == "bbbb2222"


def test_a_restart_that_failed_before_any_start_is_no_crashed_start():
    lines = [
        (10.0, "    [node3] [   6.4s] failed: port 30000 is held by pid 777 (python3 -m http.server)"),
        (10.1, "    [node3] restart failed: port 30000 is held by pid 777"),
    ]
    assert bench.crashed_start(lines) is None


def test_a_journal_line_in_the_excerpt_is_not_the_gates_verdict():
    lines = [
        (1.0, "    [node3] [   0.3s] started sglang.service: main pid 13, invocation cccc"),
        (2.0, "    [node3] [2026-12-01 10:00:31] failed: to-load: weights"),
    ]
    assert bench.crashed_start(lines) is None
