"""The decode check knows speculation: for a server started with --speculative-algorithm it
records the accept length (and SGLang's accept rate) beside tok/s and TTFT, from /server_info
(internal_states[].avg_spec_accept_length, as SGLang 0.5.17 and 0.5.23 report it)."""

import json

import pytest
from test_decode_check import _args
from test_standin_speculation import eagle3, served

from sglang_deploy.node import decode_check
from sglang_deploy.node.lib import result, speculation

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
