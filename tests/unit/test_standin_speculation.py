"""The stand-in speculates as SGLang does where the deploy sees it: with --speculative-algorithm
its decode rate follows draft steps, accept length and verify cost (sandbox/speculation.py), and
it reports the accept length in /server_info's internal_states (avg_spec_accept_length, 0.5.17
and 0.5.23) and on /metrics (sglang:spec_accept_length, sglang:spec_accept_rate). Its defaults
reproduce the incident: 82 tok/s without speculation, EAGLE-3 2 steps ~60, 3 steps ~60."""

import json
import re

import pytest
from test_standin_server import TINY_CONFIG, Standin

from sglang_deploy.node.lib import decode_rate

RATE = 82
EAGLE3 = ["--speculative-algorithm", "EAGLE3", "--speculative-eagle-topk", "1"]


def eagle3(tmp_path, steps):
    draft = tmp_path / f"draft-{steps}"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps(TINY_CONFIG))
    return [
        *EAGLE3,
        "--speculative-draft-model-path",
        str(draft),
        "--speculative-num-steps",
        str(steps),
        "--speculative-num-draft-tokens",
        str(steps + 1),
    ]


def served(tmp_path, args):
    s = Standin(
        tmp_path,
        ["--enable-metrics", *args],
        env={"SGLANG_STANDIN_TOKENS_PER_SECOND": str(RATE), "SGLANG_STANDIN_WARMUP_SECONDS": "0.1"},
        tp=1,
    )
    assert s.wait_log("fired up", timeout=20), s.log()[-2000:]
    return s


def decode(s, tokens=150):
    timed = decode_rate.stream_once(
        f"http://127.0.0.1:{s.port}/v1/chat/completions", "tiny-standin", "Go.", tokens, 30
    )
    assert timed.tokens == tokens
    return decode_rate.decode_rate(timed.tokens, timed.seconds)


def gauge(s, name):
    status, text = s.request("GET", "/metrics")
    assert status == 200
    found = re.search(r"^%s\{[^}]*\} (\S+)$" % re.escape(name), text.decode(), re.M)
    return float(found.group(1)) if found else None


@pytest.mark.parametrize("steps, tok_s, length", [(None, 82, None), (2, 60.4, 1.96), (3, 59.7, 2.176)])
def test_the_decode_rate_and_accept_length_follow_the_speculation(tmp_path, steps, tok_s, length):
    s = served(tmp_path, eagle3(tmp_path, steps) if steps else [])
    try:
        rate = decode(s)
        assert rate == pytest.approx(tok_s, rel=0.08), rate
        status, info = s.get_json("/server_info")
        state = info["internal_states"][0]
        if length is None:
            assert "avg_spec_accept_length" not in state
            assert gauge(s, "sglang:spec_accept_length") == 0.0  # registered, as SGLang does
            return
        assert state["avg_spec_accept_length"] == pytest.approx(length, rel=0.05)
        assert gauge(s, "sglang:spec_accept_length") == pytest.approx(length, rel=0.05)
        assert gauge(s, "sglang:spec_accept_rate") == pytest.approx((length - 1) / steps, rel=0.1)
    finally:
        s.kill()


def test_speculation_pays_when_drafts_are_accepted_and_verify_is_cheap(tmp_path):
    s = Standin(
        tmp_path,
        eagle3(tmp_path, 3),
        env={
            "SGLANG_STANDIN_TOKENS_PER_SECOND": str(RATE),
            "SGLANG_STANDIN_WARMUP_SECONDS": "0.1",
            "SGLANG_STANDIN_SPEC_ACCEPT_PROB": "0.9",
            "SGLANG_STANDIN_SPEC_VERIFY_COST": "0.1",
            "SGLANG_STANDIN_SPEC_DRAFT_COST": "0.1",
        },
        tp=1,
    )
    try:
        assert s.wait_log("fired up", timeout=20)
        # L = 1 + .9 + .81 + .729 = 3.439 tokens a step of 1.4 target steps: 2.46 x 82
        assert decode(s) == pytest.approx(RATE * 3.439 / 1.4, rel=0.08)
    finally:
        s.kill()


def test_an_accept_probability_of_one_or_more_is_a_knob_error(tmp_path):
    s = Standin(tmp_path, eagle3(tmp_path, 2), env={"SGLANG_STANDIN_SPEC_ACCEPT_PROB": "1"}, tp=1)
    try:
        assert s.wait_exit() == 2
        assert "SGLANG_STANDIN_SPEC_ACCEPT_PROB=1.0 must be below 1" in s.log()
    finally:
        s.kill()
