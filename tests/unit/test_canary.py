"""A canary's bake judged from two /metrics scrapes per node (report/canary.py), on SGLang 0.5.3's
format as prometheus_client writes it (tests/unit/captured/capture_sglang_metrics.py)."""

import math
from pathlib import Path

import pytest

from sglang_deploy.plan.settings import Canary
from sglang_deploy.report import canary, prom_text
from sglang_deploy.report.canary import Scrape

CAPTURED = Path(__file__).parent / "captured"
START = (CAPTURED / "sglang_0.5.3_metrics_start.txt").read_text()
END = (CAPTURED / "sglang_0.5.3_metrics_end.txt").read_text()
LIMITS = Canary(
    rolling_canary_max_error_rate=0.01,
    rolling_canary_max_ttft_regression_pct=20,
    rolling_canary_max_decode_regression_pct=10,
    rolling_canary_min_requests=10,
)
TTFT_BOUNDS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0)


def test_the_parser_reads_sglangs_multiprocess_exposition():
    found = prom_text.parse(END)
    assert found.types["sglang:time_to_first_token_seconds"] == "histogram"
    assert found.types["sglang:num_requests_total"] == "counter"
    assert found.total("sglang:num_requests_total") == 65.0
    assert found.total("sglang:num_aborted_requests_total") == 1.0
    assert found.values("sglang:gen_throughput", tp_rank="0") == [790.02]
    buckets = found.buckets("sglang:time_to_first_token_seconds")
    assert buckets[0.1] == 9.0 and buckets[math.inf] == 65.0 and list(buckets) == sorted(buckets)


def test_the_parser_reads_escapes_exponents_infinities_and_timestamps():
    text = (
        "# a comment\n\n"
        'm{path="/a\\"b\\\\c\\nd",x="1"} 1.5e+03 1700000000000\n'
        "n +Inf\n"
        'o{le="-Inf"} -Inf\n'
        "p NaN\n"
    )
    found = prom_text.parse(text)
    assert found.samples[0].labels == {"path": '/a"b\\c\nd', "x": "1"}
    assert found.samples[0].value == 1500.0
    assert found.total("n") == math.inf and found.total("o") == -math.inf
    assert math.isnan(found.total("p"))


@pytest.mark.parametrize(
    "line", ['m{x="1" 2', "m{x=1} 2", "m", "m 1 2 3", 'm{x="\\q"} 1', '{x="1"} 2', "m abc"]
)
def test_a_malformed_line_is_an_error_naming_its_number(line):
    with pytest.raises(prom_text.ParseError, match="line 2"):
        prom_text.parse("ok 1\n" + line + "\n")


def test_rates_over_a_bake_from_the_captured_scrapes():
    r = canary.rates("node1", Scrape(100.0, START), Scrape(130.0, END))
    assert r.requests == 41.0 and r.aborted == 1.0  # 40 finished + 1 aborted
    assert r.error_rate == pytest.approx(1 / 41)
    assert r.decode[canary.PER_NODE] == pytest.approx((10284 - _total(START, canary.TOKENS)) / 30)
    assert r.decode[canary.GAUGE] == 790.02
    assert 30 < r.decode[canary.PER_REQUEST] < 60  # the capture decodes at 41 tok/s a request
    assert 0.2 < r.ttft_p95_s <= 0.6


def _total(text, name):
    return prom_text.parse(text).total(name)


def test_quantile_interpolates_inside_the_bucket_like_histogram_quantile():
    buckets = {0.1: 50.0, 0.2: 90.0, 0.4: 100.0, math.inf: 100.0}
    assert canary.quantile(0.5, buckets) == pytest.approx(0.1)
    assert canary.quantile(0.95, buckets) == pytest.approx(0.3)
    assert canary.quantile(0.95, {0.1: 0.0, math.inf: 0.0}) is None
    assert canary.quantile(0.99, {0.1: 1.0, math.inf: 100.0}) == 0.1  # in +Inf: the last finite bound


def exposition(requests, aborted=0, tokens=0, ttft=(), gauge=None, busy_s=None, model="m"):
    """SGLang's /metrics (the captured shape) for counters so far; ``ttft``: observations."""
    labels = f'model_name="{model}"'
    lines = [
        "# TYPE sglang:num_requests_total counter",
        f"sglang:num_requests_total{{{labels}}} {float(requests)}",
        f"sglang:num_aborted_requests_total{{{labels}}} {float(aborted)}",
        f"sglang:generation_tokens_total{{{labels}}} {float(tokens)}",
    ]
    if ttft is not None:
        lines.append(f"sglang:time_to_first_token_seconds_sum{{{labels}}} {sum(ttft)}")
        for bound in (*TTFT_BOUNDS, math.inf):
            le = "+Inf" if math.isinf(bound) else str(bound)
            count = sum(1 for t in ttft if t <= bound)
            lines.append(f'sglang:time_to_first_token_seconds_bucket{{{labels},le="{le}"}} {float(count)}')
    if busy_s is not None:
        lines.append(f"sglang:e2e_request_latency_seconds_sum{{{labels}}} {busy_s}")
    if gauge is not None:
        lines.append(f'sglang:gen_throughput{{{labels},tp_rank="0"}} {gauge}')
    return "\n".join(lines) + "\n"


def bake(requests=40, aborted=0, first_token_s=0.15, tok_s=80.0, seconds=30.0):
    """(start, end) scrapes of a node that finished ``requests`` during the bake."""
    tokens = requests * 100
    ttft = [first_token_s] * requests
    busy = sum(ttft) + tokens / tok_s
    start = Scrape(1000.0, exposition(5, tokens=500, ttft=[first_token_s] * 5, busy_s=0.0))
    end_ttft = [first_token_s] * (requests + 5)
    end = Scrape(
        1000.0 + seconds,
        exposition(requests + 5, aborted, 500 + tokens, end_ttft, gauge=tok_s, busy_s=busy + sum(ttft[:5])),
    )
    return start, end


def test_a_canary_like_the_old_nodes_passes():
    verdict = canary.judge({"n1": bake()}, {"n2": bake(), "n3": bake()}, LIMITS)
    assert verdict.passed, verdict.cause()
    assert any(line.startswith("n1: 40 requests") for line in verdict.lines)


def test_a_slower_decoding_canary_fails_naming_the_metric():
    verdict = canary.judge({"n1": bake(tok_s=40.0)}, {"n2": bake(), "n3": bake()}, LIMITS)
    assert not verdict.passed
    assert [(node, metric) for node, metric, _ in verdict.failures] == [("n1", "decode tok/s")]
    assert "per request" in verdict.cause() and "-50%" in verdict.cause()


def test_a_slower_first_token_fails_on_ttft_p95():
    verdict = canary.judge({"n1": bake(first_token_s=0.7)}, {"n2": bake(first_token_s=0.15)}, LIMITS)
    assert ("n1", "TTFT p95") in [(n, m) for n, m, _ in verdict.failures]


def test_aborted_requests_fail_on_error_rate():
    verdict = canary.judge({"n1": bake(aborted=4)}, {"n2": bake()}, LIMITS)
    assert [m for _, m, _ in verdict.failures] == ["error rate"]
    assert "9.1% of its requests aborted against 0.0%" in verdict.cause()


def test_a_bake_with_no_metrics_reachable_fails_saying_so():
    unread = (Scrape(error="connection refused"), Scrape(error="connection refused"))
    verdict = canary.judge({"n1": unread}, {"n2": unread}, LIMITS)
    assert not verdict.passed
    assert "n1: metrics: no /metrics at the bake's start: connection refused" in verdict.cause()
    assert "no metrics from any node on the old configuration (n2: no /metrics" in verdict.cause()


def test_old_nodes_unreadable_fail_the_bake_even_with_a_readable_canary():
    verdict = canary.judge(
        {"n1": bake()}, {"n2": (Scrape(error="timed out"), Scrape(error="timed out"))}, LIMITS
    )
    assert not verdict.passed and verdict.failures[0][:2] == ("bake", "metrics")


def test_metrics_without_sglangs_counters_are_no_evidence():
    plain = (Scrape(0, "# nothing\nup 1\n"), Scrape(30, "up 1\n"))
    verdict = canary.judge({"n1": plain}, {"n2": bake()}, LIMITS)
    assert "--enable-metrics" in verdict.cause()


def test_a_bake_without_traffic_fails():
    verdict = canary.judge({"n1": bake(requests=2)}, {"n2": bake(requests=3)}, LIMITS)
    assert {m for _, m, _ in verdict.failures} == {"requests"}
    assert "no traffic" in verdict.cause() and "no evidence" in verdict.cause()


def test_ttft_on_one_side_only_cannot_pass():
    start, end = bake()
    no_ttft = (
        Scrape(start.at, exposition(5, tokens=500, ttft=None)),
        Scrape(end.at, exposition(45, tokens=4500, ttft=None)),
    )
    verdict = canary.judge({"n1": no_ttft}, {"n2": bake()}, LIMITS)
    assert ("n1", "TTFT p95") in [(n, m) for n, m, _ in verdict.failures]


def test_a_counter_reset_during_the_bake_counts_from_zero():
    start = Scrape(0, exposition(500, tokens=50_000, ttft=[0.1] * 500))
    end = Scrape(30, exposition(20, tokens=2000, ttft=[0.1] * 20))
    r = canary.rates("n1", start, end)
    assert r.requests == 20 and r.decode[canary.PER_NODE] == pytest.approx(2000 / 30)
    assert r.ttft_buckets[math.inf] == 20
