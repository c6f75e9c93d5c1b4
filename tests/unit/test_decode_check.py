"""The decode check: its measuring (node/lib/decode_rate.py) against a tiny local streaming server,
its verdict and history (node/decode_check.py), the restart cycle's policies, and the
controller's record and phrase (sglang_deploy/report/throughput_log.py)."""

import json
import shlex
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from test_node_cycle import _commands, _run, _step

from sglang_deploy.node import cycle, decode_check
from sglang_deploy.node.lib import decode_rate, result, status
from sglang_deploy.plan.commands.unit import NodeScripts
from sglang_deploy.profile.schema import load_profile
from sglang_deploy.report import outcome
from sglang_deploy.report import throughput_log as throughput

pytestmark = pytest.mark.usefixtures("cycle_in_session")


class _Streamer(BaseHTTPRequestHandler):
    """SSE chat completions at ``rate`` tok/s: a role chunk, ``tokens`` content chunks (the
    first after one token-time), a finish chunk and a usage chunk claiming ``usage`` tokens."""

    rate, tokens, usage, version, error, seen = 100.0, 11, None, "0.5.23", None, []
    reasoning = 0  # the first ``reasoning`` tokens stream as reasoning_content (a reasoning parser)

    def log_message(self, *args):
        pass

    def do_GET(self):
        body = json.dumps({"version": self.version}).encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["content-length"])))
        type(self).seen.append(request)
        if self.error == "http":
            self.send_response(503)
            self.end_headers()
            self.wfile.write(b"busy")
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()

        def send(event):
            self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
            self.wfile.flush()

        send({"choices": [{"delta": {"role": "assistant", "content": ""}}]})
        start = time.perf_counter()
        for i in range(self.tokens):
            time.sleep(max(0.0, start + (i + 1) / self.rate - time.perf_counter()))
            field = "reasoning_content" if i < self.reasoning else "content"
            send({"choices": [{"delta": {field: " w"}}]})
        if self.error == "stream":
            send({"error": {"message": "scheduler died"}})
        send({"choices": [{"delta": {}, "finish_reason": "length"}]})
        if self.usage:
            send({"choices": [], "usage": {"completion_tokens": self.usage}})
        self.wfile.write(b"data: [DONE]\n\n")


def _serving(host):
    handler = type("Handler", (_Streamer,), {"seen": []})
    httpd = ThreadingHTTPServer((host, 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield handler, httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def server():
    yield from _serving("127.0.0.1")


@pytest.fixture
def bound_server():
    """The server bound to one address, a loopback alias: it listens on 127.0.0.2 only."""
    yield from _serving("127.0.0.2")


def _url(port):
    return f"http://127.0.0.1:{port}/v1/chat/completions"


# -- measuring --------------------------------------------------------------------------------


def test_stream_once_times_the_decode_from_first_to_last_token(server):
    handler, port = server
    tokens, decode_s, ttft_s, content, reasoning = decode_rate.stream_once(_url(port), "m", "hi", 11, 10)
    assert tokens == 11 and (content, reasoning) == (11, 0)
    assert decode_rate.decode_rate(tokens, decode_s) == pytest.approx(100, rel=0.3)
    assert 0 < ttft_s < 0.5
    body = handler.seen[0]
    assert body["temperature"] == 0 and body["stream"] is True and body["max_tokens"] == 11
    assert body["stream_options"] == {"include_usage": True} and body["model"] == "m"


def test_the_usage_chunk_wins_when_chunks_pack_several_tokens(server):
    handler, port = server
    handler.usage = 31  # speculative decoding: three tokens per chunk
    tokens, decode_s, *_ = decode_rate.stream_once(_url(port), "m", "hi", 32, 10)
    assert tokens == 31 and decode_rate.decode_rate(tokens, decode_s) == pytest.approx(300, rel=0.3)


@pytest.mark.parametrize("reasoning", [11, 9])
def test_a_reasoning_models_thinking_is_decode_too(server, reasoning):
    """With a reasoning parser (Kimi-K2.5, DeepSeek-R1, Qwen3) SGLang streams the thinking as
    delta.reasoning_content (seen on 0.5.17: every token of a short answer): all of it is
    timed, not only the content after it (unmeasured when all is thinking, tok/s overstated
    when two tokens of content close a long thought)."""
    handler, port = server
    handler.reasoning, handler.usage = reasoning, 11
    timed = decode_rate.stream_once(_url(port), "m", "hi", 11, 10)
    assert timed.tokens == 11 and decode_rate.decode_rate(timed.tokens, timed.seconds) == pytest.approx(
        100, rel=0.3
    )
    assert (timed.reasoning, timed.content) == (reasoning, 11 - reasoning)  # both channels, apart
    figures = decode_rate.summary([timed, timed])
    assert figures["channels"] == {"reasoning": 2 * reasoning, "content": 2 * (11 - reasoning)}
    assert "; %d chunks of reasoning, %d of content" % (
        2 * reasoning,
        2 * (11 - reasoning),
    ) in decode_check.describe({**figures, "decode_tok_s_min": 1.0, "decode_tok_s_max": 1.0})


@pytest.mark.parametrize("error, says", [("http", "HTTP 503: busy"), ("stream", "scheduler died")])
def test_a_request_that_cannot_be_timed_says_why(server, error, says):
    handler, port = server
    handler.error = error
    with pytest.raises(decode_rate.MeasureError, match=says):
        decode_rate.stream_once(_url(port), "m", "hi", 11, 10)


def test_one_token_cannot_be_timed(server):
    handler, port = server
    handler.tokens = 1
    with pytest.raises(decode_rate.MeasureError, match="too few tokens"):
        decode_rate.stream_once(_url(port), "m", "hi", 1, 10)


def test_summary_is_median_min_max_and_median_ttft():
    found = decode_rate.summary([(11, 0.5, 0.1), (11, 0.25, 0.3), (21, 0.25, 0.2)])
    assert found == {
        "requests": 3,
        "tokens": 43,
        "channels": {"content": 0, "reasoning": 0},
        "decode_tok_s": 40.0,
        "decode_tok_s_min": 20.0,
        "decode_tok_s_max": 80.0,
        "ttft_ms": 200.0,
    }
    assert decode_rate.median([4, 1, 3, 2]) == 2.5


def test_measure_warms_up_untimed_and_cycles_the_prompts(server):
    handler, port = server
    found = decode_rate.measure(_url(port), "m", ["a", "b"], requests=3, warmup=1, max_tokens=11, timeout=10)
    assert found["requests"] == 3 and found["tokens"] == 33
    assert [r["messages"][0]["content"] for r in handler.seen] == ["a", "a", "b", "a"]


# -- verdict and history ----------------------------------------------------------------------


def test_the_incident_is_a_27_percent_regression():
    change, reasons = decode_check.verdict(60.1, 82.4, max_regression_pct=10)
    assert change == -27.1
    assert reasons == ["-27% vs baseline 82.4 exceeds max_regression_pct 10"]
    assert decode_check.verdict(80.0, 82.4, max_regression_pct=10) == (-2.9, [])


def test_the_floor_is_checked_with_or_without_a_baseline():
    assert decode_check.verdict(60.0, None, min_decode_tok_s=70) == (
        None,
        ["60.0 tok/s is below min_decode_tok_s 70"],
    )
    assert decode_check.verdict(None, 82.0, min_decode_tok_s=70)[1] == [
        "no figure is below min_decode_tok_s 70"
    ]
    assert decode_check.verdict(60.0, 82.0) == (-26.8, [])  # no expectations: figures only


def test_the_baseline_is_the_last_known_goods_latest_accepted_figure():
    history = [
        {"profile": "base", "accepted": True, "decode_tok_s": 81.0, "time": "t1"},
        {"profile": "base", "accepted": True, "decode_tok_s": 82.0, "time": "t2"},
        {"profile": "base", "accepted": False, "decode_tok_s": 50.0, "time": "t3"},
        {"profile": "eagle", "accepted": True, "decode_tok_s": 60.0, "time": "t4"},
    ]
    assert decode_check.baseline_of(history, "base")["time"] == "t2"
    assert decode_check.baseline_of(history, None) is None
    assert decode_check.baseline_of(history, "other") is None


def _args(tmp_path, port, **over):
    argv = [
        "--port",
        str(port),
        "--served-name",
        "m",
        "--profile",
        over.pop("profile", "eagle"),
        "--history",
        str(tmp_path / "throughput.jsonl"),
        "--last-good-dir",
        str(tmp_path / "last-good"),
        "--requests",
        "2",
        "--warmup",
        "0",
        "--max-tokens",
        "11",
        "--timeout",
        "10",
    ]
    for key, value in over.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return argv


def _last_good(tmp_path, profile, figure):
    (tmp_path / "last-good").mkdir()
    (tmp_path / "last-good" / "manifest.json").write_text(json.dumps({"profile": profile}))
    decode_check.append(
        str(tmp_path / "throughput.jsonl"),
        {"profile": profile, "accepted": True, "decode_tok_s": figure, "time": "t0"},
    )


def test_the_restored_last_known_good_is_recorded_and_judged_against_nothing(tmp_path, server, capsys):
    handler, port = server
    handler.rate = 100.0
    _last_good(tmp_path, "base", 200.0)
    got = decode_check.main(
        _args(tmp_path, port, max_regression_pct=10, min_decode_tok_s=150, on_regression="rollback")
        + ["--restored", "--profile", "base"]
    )
    out = capsys.readouterr().out.splitlines()
    entry = result.parse(out)["throughput"]
    assert got == status.READY and entry["profile"] == "base" and entry["restored"] is True
    assert entry["accepted"] and entry["regression"] == [] and entry["change_pct"] < -30
    assert any(line.startswith("decode check (the last known good, restored): ") for line in out)


def test_the_controller_records_and_says_the_restored_servers_figure(tmp_path):
    restored = {
        "profile": "base",
        "decode_tok_s": 82.0,
        "change_pct": -0.4,
        "restored": True,
        "baseline": {"profile": "base", "decode_tok_s": 82.3, "time": "t0"},
    }
    said = throughput.took_restored_note("node1", {"restored_throughput": restored}, reports=tmp_path)
    assert said == "decode check after the rollback: base serves at 82.0 tok/s (-0% vs baseline 82.3)"
    assert throughput.read(tmp_path / "node1.jsonl") == [dict(restored, host="node1")]
    assert throughput.took_restored_note("node1", {"outcome": "served"}, reports=tmp_path) is None


@pytest.mark.parametrize(
    "policy, code, accepted",
    [
        ("warn", status.READY, True),
        ("fail", status.THROUGHPUT_REGRESSION, False),
        ("rollback", status.THROUGHPUT_REGRESSION, False),
    ],
)
def test_check_records_and_judges_against_the_last_known_good(
    tmp_path, server, capsys, policy, code, accepted
):
    handler, port = server
    handler.rate, handler.version = 100.0, "0.5.23+sandbox"
    _last_good(tmp_path, "base", 200.0)
    got = decode_check.main(_args(tmp_path, port, max_regression_pct=10, on_regression=policy))
    out = capsys.readouterr().out.splitlines()
    found = result.parse(out)
    assert got == code == found["status"] and found["on_regression"] == policy
    entry = found["throughput"]
    assert entry["baseline"] == {"profile": "base", "decode_tok_s": 200.0, "time": "t0"}
    assert -70 < entry["change_pct"] < -30 and entry["accepted"] is accepted
    assert entry["engine_version"] == "0.5.23+sandbox" and entry["profile"] == "eagle"
    assert decode_check.read_history(tmp_path / "throughput.jsonl")[-1] == entry
    assert any("not a GPU's" in line for line in out)  # said only for a +sandbox engine


def test_without_expectations_the_figures_are_recorded_only(tmp_path, server, capsys):
    handler, port = server
    got = decode_check.main(_args(tmp_path, port))
    out = capsys.readouterr().out.splitlines()
    entry = result.parse(out)["throughput"]
    assert got == status.READY and entry["accepted"] and entry["regression"] == []
    assert entry["baseline"] is None and entry["decode_tok_s"] > 50
    assert not any("not a GPU's" in line for line in out)


@pytest.mark.parametrize(
    "error, says", [("http", "HTTP 503"), ("stream", "scheduler died"), ("tokens", "too few")]
)
@pytest.mark.parametrize(
    "expect",
    [
        {},
        {"on_regression": "warn"},
        {"min_decode_tok_s": 10, "on_regression": "fail"},
        {"max_regression_pct": 10},
    ],
)
def test_an_unmeasured_check_fails_whatever_the_expectations(tmp_path, server, capsys, error, says, expect):
    handler, port = server
    if error == "tokens":
        handler.tokens = 0
    else:
        handler.error = error
    assert decode_check.main(_args(tmp_path, port, **expect)) == status.DECODE_UNMEASURED
    out = capsys.readouterr().out.splitlines()
    found = result.parse(out)
    assert found["result"] == "DECODE_UNMEASURED" and found["cause"].startswith("decode not measured: ")
    assert says in found["cause"]
    entry = decode_check.read_history(tmp_path / "throughput.jsonl")[-1]
    assert entry == found["throughput"]
    assert entry["decode_tok_s"] is None and says in entry["error"] and entry["accepted"] is False
    assert entry["regression"] == []  # not a regression: nothing was measured to judge
    assert any("not measured: the restart fails" in line for line in out)


def test_a_server_that_stopped_answering_is_unmeasured(tmp_path, capsys):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert decode_check.main(_args(tmp_path, port)) == status.DECODE_UNMEASURED
    found = result.parse(capsys.readouterr().out.splitlines())
    assert "refused" in found["cause"].lower(), found["cause"]


def test_a_server_bound_to_one_address_is_checked_there(tmp_path, bound_server, capsys):
    """service.host 127.0.0.2: the decode check's command line as the controller builds it
    (NodeScripts.decode_check) measures the server there (127.0.0.1 refuses)."""
    handler, port = bound_server
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    overrides = {
        "service": {"host": "127.0.0.2", "port": port},
        "throughput": {"requests": 2, "warmup_requests": 0, "max_tokens": 11, "timeout_s": 10},
    }
    profile = load_profile("sandbox", overrides=overrides)
    scripts = NodeScripts("/opt/d/node", "sglang.service", profile, {}, str(tmp_path / "last-good"), "", "")
    argv = shlex.split(scripts.decode_check())
    assert argv[:2] == ["python3", "/opt/d/node/decode_check.py"]
    got = decode_check.main(argv[2:])
    entry = result.parse(capsys.readouterr().out.splitlines())["throughput"]
    assert got == status.READY and entry["error"] is None and entry["engine_version"] == "0.5.23"
    assert entry["decode_tok_s"] == pytest.approx(100, rel=0.3) and len(handler.seen) == 2


def test_the_restored_server_unmeasured_is_recorded_and_never_fails(tmp_path, server, capsys):
    handler, port = server
    handler.error = "http"
    got = decode_check.main(_args(tmp_path, port, min_decode_tok_s=10) + ["--restored", "--profile", "base"])
    entry = result.parse(capsys.readouterr().out.splitlines())["throughput"]
    assert got == status.READY and entry["decode_tok_s"] is None and entry["restored"] is True


# -- the restart cycle's policies -------------------------------------------------------------


def _cycle(tmp_path, capsys, policy, code=status.THROUGHPUT_REGRESSION, rollback=True):
    commands = _commands(tmp_path)
    commands["decode"] = _step(
        tmp_path,
        "decode",
        [(code, "decode regression: -27%" if code else None)],
        on_regression=policy,
        throughput={"decode_tok_s": 60.0},
    )
    got = cycle.cycle(commands, rollback)
    out = capsys.readouterr().out.splitlines()
    return got, result.parse(out), (tmp_path / "ran").read_text().split()


def test_a_regression_under_rollback_rolls_back(tmp_path, capsys):
    code, found, ran = _cycle(tmp_path, capsys, "rollback")
    # ... and the restored server is measured once more (decode_check.py --restored).
    assert ran == [
        "preflight",
        "switch",
        "restart",
        "gate",
        "workers",
        "decode",
        "restore",
        "restart",
        "gate",
        "decode",
    ]
    assert found["outcome"] == "rolled_back" and found["profile"] == "previous"
    assert code == status.THROUGHPUT_REGRESSION and found["cause"] == "decode regression: -27%"
    assert found["throughput"] == {"decode_tok_s": 60.0} == found["restored_throughput"]
    assert [s["step"] for s in found["steps"] if s["status"]] == ["decode check"]


def test_a_regression_under_fail_leaves_it_serving_unrecorded(tmp_path, capsys):
    code, found, ran = _cycle(tmp_path, capsys, "fail")
    assert ran == ["preflight", "switch", "restart", "gate", "workers", "decode"]
    assert found["outcome"] == "regressed" and code == status.THROUGHPUT_REGRESSION


def test_no_rollback_wins_over_the_rollback_policy(tmp_path, capsys):
    _, found, ran = _cycle(tmp_path, capsys, "rollback", rollback=False)
    assert found["outcome"] == "regressed" and "restore" not in ran


@pytest.mark.parametrize("policy", ["warn", "fail", "rollback"])
def test_an_unmeasured_check_rolls_back_whatever_the_policy(tmp_path, capsys, policy):
    commands = _commands(tmp_path)
    commands["decode"] = _step(
        tmp_path,
        "decode",
        [(status.DECODE_UNMEASURED, "decode not measured: HTTP 503: busy"), (0, None)],
        on_regression=policy,
        throughput={"decode_tok_s": None, "error": "HTTP 503: busy"},
    )
    code = cycle.cycle(commands, rollback=True)
    found = result.parse(capsys.readouterr().out.splitlines())
    ran = (tmp_path / "ran").read_text().split()
    assert ran == [
        "preflight",
        "switch",
        "restart",
        "gate",
        "workers",
        "decode",
        "recheck",
        "restore",
        "restart",
        "gate",
        "decode",
    ]
    assert found["outcome"] == "rolled_back" and code == status.DECODE_UNMEASURED
    assert found["cause"] == "decode not measured: HTTP 503: busy" and "save" not in ran


def test_an_unmeasured_check_without_rollback_fails_unrecorded(tmp_path, capsys):
    commands = _commands(tmp_path)
    commands["decode"] = _step(
        tmp_path, "decode", [(status.DECODE_UNMEASURED, "decode not measured: x")], on_regression="warn"
    )
    code = cycle.cycle(commands, rollback=False)
    found = result.parse(capsys.readouterr().out.splitlines())
    ran = (tmp_path / "ran").read_text().split()
    assert found["outcome"] == "failed" and found["restored"] is False and code == status.DECODE_UNMEASURED
    assert ran == ["preflight", "switch", "restart", "gate", "workers", "decode", "recheck"]


def test_a_decode_check_that_dies_is_a_failed_step(tmp_path, capsys):
    commands = _commands(tmp_path)
    commands["decode"] = f"{shlex.quote(sys.executable)} -c 'raise OSError(\"boom\")'"
    cycle.cycle(commands, rollback=True)
    found = result.parse(capsys.readouterr().out.splitlines())
    assert found["outcome"] == "rolled_back" and found["cause"] == "OSError: boom"


def test_a_passing_check_is_served_and_recorded(tmp_path, capsys):
    code, found, ran = _cycle(tmp_path, capsys, "warn", code=status.READY)
    assert ran == ["preflight", "switch", "restart", "gate", "workers", "decode", "recheck", "save"]
    assert code == status.READY and found["outcome"] == "served"
    assert found["throughput"] == {"decode_tok_s": 60.0}


def test_without_a_decode_command_the_cycle_is_as_before(tmp_path, capsys):
    code, found, ran, _ = _run(tmp_path, capsys)
    assert ran == ["preflight", "switch", "restart", "gate", "workers", "recheck", "save"]
    assert "throughput" not in found


# -- the controller ---------------------------------------------------------------------------

INCIDENT = {
    "profile": "eagle",
    "decode_tok_s": 60.1,
    "change_pct": -27.1,
    "baseline": {"profile": "base", "decode_tok_s": 82.4, "time": "t0"},
    "regression": ["-27% vs baseline 82.4 exceeds max_regression_pct 10"],
    "on_regression": "rollback",
}


def test_the_phrase_names_the_figure_and_its_change():
    assert throughput.phrase(INCIDENT) == "60.1 tok/s (-27% vs baseline 82.4)"
    assert throughput.phrase({"decode_tok_s": 82.0, "baseline": None}) == "82.0 tok/s (no baseline yet)"
    assert throughput.phrase({"decode_tok_s": None, "error": "HTTP 503"}) == "decode not measured: HTTP 503"


def test_took_note_records_on_the_controller_and_the_outcome_line_shows_it(tmp_path, fresh_run):
    text, level = throughput.took_note("node1", {"throughput": INCIDENT}, reports=tmp_path)
    assert level == "error" and text.startswith(
        "decode check: 60.1 tok/s (-27% vs baseline 82.4): regression"
    )
    assert throughput.read(tmp_path / "node1.jsonl") == [dict(INCIDENT, host="node1")]
    assert throughput.took_note("node1", {"outcome": "served"}, reports=tmp_path) is None
    line = outcome.with_note(
        outcome.Outcome("node1", outcome.FAILED, "at 'Restart'"), fresh_run.decode_notes["node1"]
    ).line()
    assert line == "sglang-deploy: node1: failed (at 'Restart'; 60.1 tok/s (-27% vs baseline 82.4))"
    assert (
        outcome.with_note(outcome.Outcome("n", outcome.UNCHANGED), None).line()
        == "sglang-deploy: n: unchanged"
    )


def test_the_controller_says_a_regressed_outcome_and_fails_the_deploy():
    from test_node_cycle import _Host

    from sglang_deploy.operations.service import say_outcome

    host = _Host()
    assert say_outcome(host, {"outcome": "regressed", "restored": False}) is False
    assert host.said == [
        "on_regression: fail: the new configuration serves, but is not recorded as the last known good"
    ]


# -- a server the deploy did not restart: the cycle from the gate ------------------------------


def _running(tmp_path, capsys, policy, code=status.THROUGHPUT_REGRESSION):
    commands = _commands(tmp_path)
    commands["decode"] = _step(
        tmp_path,
        "decode",
        [(code, "decode regression: -27%" if code else None)],
        on_regression=policy,
        throughput={"decode_tok_s": 60.0},
    )
    got = cycle.cycle(commands, rollback=True, running=True)
    return got, result.parse(capsys.readouterr().out.splitlines()), (tmp_path / "ran").read_text().split()


def test_a_running_server_is_checked_from_the_gate_before_it_is_recorded(tmp_path, capsys):
    code, found, ran = _running(tmp_path, capsys, "warn", code=status.READY)
    assert ran == ["gate", "workers", "decode", "recheck", "save"] and found["outcome"] == "served"


def test_a_regressed_configuration_found_serving_is_not_recorded_under_fail(tmp_path, capsys):
    # The re-run after an `on_regression: fail` deploy: the same files, nothing to restart; the
    # configuration must not become the last known good unmeasured.
    code, found, ran = _running(tmp_path, capsys, "fail")
    assert ran == ["gate", "workers", "decode"] and found["outcome"] == "regressed"
    assert code == status.THROUGHPUT_REGRESSION


def test_a_regressed_configuration_found_serving_rolls_back_under_rollback(tmp_path, capsys):
    code, found, ran = _running(tmp_path, capsys, "rollback")
    assert ran == ["gate", "workers", "decode", "restore", "restart", "gate", "decode"]
    assert found["outcome"] == "rolled_back" and found["profile"] == "previous"


def test_the_cycle_script_takes_running():
    from test_operations import PLAN

    argv = shlex.split(PLAN.scripts.cycle({"hook": "/site/h.py"}, running=True))
    assert argv[-1] == "--running" and "--running" not in shlex.split(
        PLAN.scripts.cycle({"hook": "/site/h.py"})
    )


class _ShellHost:
    """Runs nothing: answers each command line with the result line ``answer`` gives for it."""

    name = "node1"

    def __init__(self, answer):
        self.answer, self.ran, self.said = answer, [], []

    def run_shell_command(self, command, print_output=False):
        from types import SimpleNamespace

        self.ran.append(str(command))
        line = self.answer(str(command))
        return line["status"] == 0, SimpleNamespace(stdout_lines=[json.dumps(line)], stderr_lines=[])

    def log_styled(self, message, **_):
        self.said.append(message)

    def log(self, message, *_):
        self.said.append(message)

    def get_fact(self, fact, **_):  # the interpreter's site directory, for the hook's paths
        from test_operations import STARTUP

        return STARTUP


def _answer(command):
    if " compare " in command:  # lastgood.py compare: the serving configuration is not the record
        return {"status": 0, "last_good": "incident-baseline", "differs": ["env"], "not_running": None}
    if "cycle.py" in command:
        return {
            "status": status.THROUGHPUT_REGRESSION,
            "outcome": "regressed",
            "restored": False,
            "steps": [],
            "cause": "decode regression: -27%",
        }
    return {"status": 0}


@pytest.mark.parametrize("path", ["found serving", "started"])
def test_the_serving_step_records_nothing_before_a_decode_check(path, monkeypatch, tmp_path):
    from test_operations import PLAN

    from sglang_deploy.operations import service

    monkeypatch.setattr(throughput, "REPORTS", tmp_path)
    from pyinfra.context import ctx_host

    host = _ShellHost(_answer)
    step = service._start_and_record if path == "started" else service._last_good_is_what_serves
    with ctx_host.use(host):
        served = step(None, host, PLAN.scripts, "/opt/sglang/venv/bin/python", True)
    assert served is False
    cycles = [shlex.split(c) for c in host.ran if "cycle.py" in c]
    assert len(cycles) == 1 and cycles[0][-1] == "--running"
    assert "decode" in json.loads(cycles[0][cycles[0].index("--steps-json") + 1])
    assert not any("lastgood.py save" in c for c in host.ran if "cycle.py" not in c)  # only the cycle records
    assert any("on_regression: fail" in said for said in host.said)


def test_an_unmeasured_check_is_said_as_an_error(tmp_path):
    entry = {"profile": "p", "decode_tok_s": None, "error": "no tokens", "regression": [], "accepted": False}
    text, level = throughput.took_note("node1", {"throughput": entry}, reports=tmp_path)
    assert level == "error" and text.startswith("decode check: ")
