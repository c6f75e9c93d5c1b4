"""The decode check knows speculation: for a server started with --speculative-algorithm it
records the accept length (and SGLang's accept rate) beside tok/s and TTFT, from /server_info
(internal_states[].avg_spec_accept_length, as SGLang 0.5.17 and 0.5.23 report it)."""

import json

import pytest
from test_decode_check import _args
from test_standin_speculation import eagle3, served

from sglang_deploy.node import decode_check
from sglang_deploy.node.lib import result, speculation, status

INFO = {
    "version": "0.5.23",
    "api_key": "sk-never-kept",
    "speculative_algorithm": "EAGLE3",
    "speculative_num_steps": 2,
    "speculative_num_draft_tokens": 3,
    "internal_states": [{"last_gen_throughput": 60.1, "avg_spec_accept_length": 1.9}],
}


def test_accept_length_and_sglangs_accept_rate_from_server_info():
    assert speculation.of_server_info(INFO) == {
        "algorithm": "EAGLE3",
        "steps": 2,
        "accept_length": 1.9,
        "accept_rate": 0.45,  # (1.9 - 1) / (3 - 1)
    }
    ngram = {"speculative_algorithm": "NGRAM", "speculative_num_draft_tokens": 4}
    ngram["internal_states"] = [{"avg_spec_accept_length": 2.0}, {"avg_spec_accept_length": 2.25}]
    assert speculation.of_server_info(ngram)["accept_length"] == 2.125  # the schedulers' mean
    assert speculation.of_server_info(ngram)["accept_rate"] == 0.375  # as seen on 0.5.17


@pytest.mark.parametrize(
    "info",
    [{}, {"speculative_algorithm": None, "internal_states": [{}]}, {"version": "0.5.17"}, None],
)
def test_a_server_that_does_not_speculate_has_no_speculation(info):
    assert speculation.of_server_info(info) is None


def test_a_speculating_server_that_has_not_decoded_reports_no_figure():
    info = dict(INFO, internal_states=[{"last_gen_throughput": 0.0}])
    spec = speculation.of_server_info(info)
    assert spec["accept_length"] is None and spec["accept_rate"] is None
    assert speculation.describe(spec) == "EAGLE3 accept length not reported"


def test_the_check_records_and_says_the_accept_length_of_a_speculating_server(tmp_path, capsys):
    s = served(tmp_path, eagle3(tmp_path, 2))
    try:
        argv = _args(tmp_path, s.port, profile="eagle3-2step")
        argv[argv.index("--served-name") + 1] = "tiny-standin"
        argv[argv.index("--max-tokens") + 1] = "60"
        decode_check.main(argv)
    finally:
        s.kill()
    out = capsys.readouterr().out
    entry = result.parse(out.splitlines())["throughput"]
    spec = entry["speculation"]
    assert spec["algorithm"] == "EAGLE3" and spec["steps"] == 2
    assert spec["accept_length"] == pytest.approx(1.96, rel=0.06)
    assert spec["accept_rate"] == pytest.approx(0.48, rel=0.15)
    assert entry["decode_tok_s"] == pytest.approx(60.4, rel=0.1)
    assert "; EAGLE3 accept length 1.9" in out
    history = [json.loads(line) for line in (tmp_path / "throughput.jsonl").read_text().splitlines()]
    assert history[-1]["speculation"] == spec
    assert "sk-" not in (tmp_path / "throughput.jsonl").read_text()


def test_a_server_without_speculation_records_none(tmp_path, capsys):
    s = served(tmp_path, [])
    try:
        argv = _args(tmp_path, s.port, profile="baseline")
        argv[argv.index("--served-name") + 1] = "tiny-standin"
        decode_check.main(argv)
    finally:
        s.kill()
    entry = result.parse(capsys.readouterr().out.splitlines())["throughput"]
    assert entry["decode_tok_s"] and "speculation" not in entry


# -- speculation must pay --------------------------------------------------------------------

EAGLE = {"algorithm": "EAGLE3", "steps": 2, "accept_length": 1.9, "accept_rate": 0.45}
BASELINE = {"profile": "baseline", "accepted": True, "decode_tok_s": 82.4, "time": "t0"}


def test_slower_than_no_speculation_is_said_in_the_incidents_words():
    reasons = decode_check.speculation_verdict(60.1, EAGLE, BASELINE, "baseline")
    assert reasons == [
        "EAGLE3 decodes 60.1 tok/s, 27 % slower than baseline's 82.4 on this node; accept length 1.9"
    ]


def test_a_speedup_short_of_the_percentage_asked_is_a_regression_too():
    assert decode_check.speculation_verdict(90.0, EAGLE, BASELINE, "baseline") == []
    (reason,) = decode_check.speculation_verdict(90.0, EAGLE, BASELINE, "baseline", min_speedup_pct=20)
    assert reason.startswith("EAGLE3 decodes 90.0 tok/s, only 9 % faster than baseline's 82.4 on this node")
    assert reason.endswith("(min_speedup_pct 20)")


def test_an_accept_length_floor():
    assert decode_check.speculation_verdict(90.0, EAGLE, None, None, min_accept_length=1.5) == []
    assert decode_check.speculation_verdict(90.0, EAGLE, None, None, min_accept_length=2.5) == [
        "accept length 1.90 is below min_accept_length 2.5"
    ]
    unreported = dict(EAGLE, accept_length=None)
    assert decode_check.speculation_verdict(90.0, unreported, None, None, min_accept_length=2) == [
        "accept length not reported is below min_accept_length 2"
    ]


def _speculating_check(tmp_path, capsys, *rules, history=(BASELINE,)):
    """decode_check.py against the stand-in's EAGLE-3 2-step (the incident: ~60 tok/s where the
    node decoded 82.4 without speculation), with the history the node has."""
    for entry in history:
        decode_check.append(str(tmp_path / "throughput.jsonl"), entry)
    s = served(tmp_path, eagle3(tmp_path, 2))
    try:
        argv = _args(tmp_path, s.port, profile="eagle3-2step") + list(rules)
        argv[argv.index("--served-name") + 1] = "tiny-standin"
        argv[argv.index("--max-tokens") + 1] = "60"
        code = decode_check.main(argv)
    finally:
        s.kill()
    out = capsys.readouterr().out
    return code, out, result.parse(out.splitlines())


def test_the_incident_is_caught_and_rolled_back_by_its_policy(tmp_path, capsys):
    code, out, found = _speculating_check(
        tmp_path, capsys, "--min-speedup-over", "baseline", "--on-regression", "rollback"
    )
    assert code == status.THROUGHPUT_REGRESSION
    entry = found["throughput"]
    (reason,) = entry["regression"]
    assert (
        reason.startswith("EAGLE3 decodes 6")
        and "% slower than baseline's 82.4 on this node; accept length" in reason
    )
    assert entry["speedup"]["over"] == "baseline" and entry["speedup"]["reference_tok_s"] == 82.4
    assert entry["speedup"]["change_pct"] < -20 and not entry["accepted"]
    assert "decode check: regression (rollback): EAGLE3 decodes" in out


def test_without_a_figure_to_beat_on_this_node_it_is_said_not_judged(tmp_path, capsys):
    other = dict(BASELINE, profile="baseline-other-node")
    code, out, found = _speculating_check(
        tmp_path, capsys, "--min-speedup-over", "baseline", "--on-regression", "fail", history=[other]
    )
    assert code == status.READY and found["throughput"]["accepted"]
    assert "no figure of baseline on this node yet: whether speculation pays is not judged" in out


def test_speculation_that_pays_passes(tmp_path, capsys):
    slow = dict(BASELINE, decode_tok_s=40.0)
    code, _, found = _speculating_check(
        tmp_path, capsys, "--min-speedup-over", "baseline", "--on-regression", "fail", history=[slow]
    )
    assert code == status.READY and found["throughput"]["speedup"]["change_pct"] > 40
