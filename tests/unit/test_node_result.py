"""The result line every on-node script ends with, and the one reader of it."""

import json

from sglang_deploy.node.lib import result, status


def test_emit_prints_one_json_line_and_returns_the_status(capsys):
    assert result.emit(status.TIMEOUT, "timeout: last phase: loading", phase="loading") == status.TIMEOUT
    line = capsys.readouterr().out
    assert line.count("\n") == 1
    assert json.loads(line) == {
        "result": "TIMEOUT",
        "status": status.TIMEOUT,
        "cause": "timeout: last phase: loading",
        "phase": "loading",
    }


def test_parse_finds_the_last_result_line_among_progress_and_excerpts(capsys):
    result.emit(status.READY)
    first = capsys.readouterr().out.strip()
    result.emit(status.FAILED_START, "cuda-oom: CUDA out of memory")
    last = capsys.readouterr().out.strip()
    lines = [
        "[   1.0s] phase: loading",
        first,
        '{"not": "a result"}',
        "{broken json",
        last,
        "--- journal excerpt ---",
        '[engine] {"status": 3}',
    ]
    assert result.parse(lines)["cause"] == "cuda-oom: CUDA out of memory"
    assert result.parse(lines)["status"] == status.FAILED_START


def test_parse_without_a_result_line_is_none():
    assert result.parse([]) is None
    assert result.parse(["Traceback (most recent call last):", "OSError: boom"]) is None
    assert result.parse(['{"event": "locked"}']) is None


def test_events_and_progress_split_the_output():
    lines = [
        '{"event": "waiting", "holder": "a@b"}',
        "human line",
        '{"event": "locked"}',
        '{"result": "READY", "status": 0, "cause": null}',
    ]
    assert [e["event"] for e in result.events(lines)] == ["waiting", "locked"]
    assert result.progress(lines) == ["human line"]


class _Output:
    def __init__(self, stdout, stderr=()):
        self.stdout_lines, self.stderr_lines = list(stdout), list(stderr)


def test_the_controller_takes_the_cause_from_the_result_line_else_the_last_error():
    from sglang_deploy.operations.service import script_cause

    gate_out = [
        "[   0.6s] phase: loading weights",
        "[   2.0s] failed: cuda-oom: CUDA out of memory",
        '{"cause": "cuda-oom: CUDA out of memory", "result": "FAILED_START", "status": 3}',
        "--- last 2 journal lines of this start ---",
        "torch.OutOfMemoryError",
        "---",
    ]
    assert script_cause(_Output(gate_out)) == "cuda-oom: CUDA out of memory"
    # A script that died before its result line: its last words on stderr.
    assert (
        script_cause(_Output([], ["", "Traceback (most recent call last):", "OSError: boom", ""]))
        == "OSError: boom"
    )
    assert script_cause(_Output([])) == "no output"
