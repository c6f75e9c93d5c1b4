"""A canary's bake, the gateway's side (report/canary_gateway.py): each node's answers as smg
1.13.0's exporter counts them per worker, ``smg_worker_cb_outcomes_total{worker, outcome}``,
from the real gateway's /metrics (captured/smg_1.13.0_metrics_{start,end}.txt, written by
captured/capture_smg_metrics.py: between the scrapes one worker answered 26 requests, the
other 20 of which 6 were a 500), and series written in that shape."""

import dataclasses
from pathlib import Path

from test_canary import bake

from sglang_deploy.plan.fleet_hosts import rotation_for
from sglang_deploy.plan.hosts import deploy_defaults
from sglang_deploy.plan.settings import Canary
from sglang_deploy.report import canary, canary_gateway, prom_text
from sglang_deploy.report.canary import Scrape

CAPTURED = Path(__file__).parent / "captured"
START = (CAPTURED / "smg_1.13.0_metrics_start.txt").read_text()
END = (CAPTURED / "smg_1.13.0_metrics_end.txt").read_text()
LIMITS = Canary(
    rolling_canary_max_error_rate=0.01,
    rolling_canary_max_ttft_regression_pct=20,
    rolling_canary_max_decode_regression_pct=10,
    rolling_canary_min_requests=10,
)
REQUIRED = LIMITS.model_copy(update={"rolling_canary_require_gateway_metrics": True})
EXPORTER = "http://10.0.0.5:29000/metrics"
OTHER_EXPORTER = "http://10.0.0.6:29000/metrics"


def _captured_workers():
    """(the worker that answered a 500 now and then, the one that never did), by their URLs."""
    found = prom_text.parse(END)
    urls = sorted({s.labels["worker"] for s in found.samples if s.name == canary_gateway.OUTCOMES})
    failing = next(u for u in urls if found.values(canary_gateway.OUTCOMES, worker=u, outcome="failure"))
    return failing, next(u for u in urls if u != failing)


FAILING, HEALTHY = _captured_workers()


def outcomes(worker, success, failure=0):
    """smg's exporter text for one worker's circuit-breaker outcomes (the captured shape: the
    failure series is absent until the first failure)."""
    lines = [
        "# HELP smg_worker_cb_outcomes_total Circuit breaker outcomes by worker and outcome (success/failure)",
        "# TYPE smg_worker_cb_outcomes_total counter",
        f'smg_worker_cb_outcomes_total{{worker="{worker}",outcome="success"}} {success}',
    ]
    if failure:
        lines.append(f'smg_worker_cb_outcomes_total{{worker="{worker}",outcome="failure"}} {failure}')
    return "\n".join(lines) + "\n"


def with_gateway(ends, worker, texts):
    """A node's (start, end) SGLang scrapes (test_canary.bake) with ``texts``: {exporter:
    (start text, end text)}, a text None being a read that failed."""

    def read(text):
        return Scrape(0.0, text) if text is not None else Scrape(error="URLError: connection refused")

    start, end = ends
    return tuple(
        dataclasses.replace(s, worker=worker, gateway={url: read(pair[i]) for url, pair in texts.items()})
        for i, s in enumerate((start, end))
    )


def node(worker, texts=None):
    return with_gateway(bake(), worker, {EXPORTER: (START, END)} if texts is None else texts)


def test_the_parser_reads_smgs_exposition():
    found = prom_text.parse(END)
    assert found.types[canary_gateway.OUTCOMES] == "counter"
    assert found.values("smg_http_responses_total", path="/generate", status_code="200", error_code="")
    assert found.values(canary_gateway.OUTCOMES, worker=HEALTHY, outcome="failure") == []


def test_answers_over_the_bake_from_the_captured_scrapes():
    failing, healthy = node(FAILING), node(HEALTHY)
    assert canary_gateway.answers(EXPORTER, *failing) == (20.0, 6.0)
    assert canary_gateway.answers(EXPORTER, *healthy) == (26.0, 0.0)


def test_a_canary_with_more_gateway_errors_than_the_old_nodes_fails_naming_gateway_error_rate():
    verdict = canary.judge({"n1": node(FAILING)}, {"n2": node(HEALTHY)}, LIMITS)
    assert not verdict.passed
    assert [(n, metric) for n, metric, _ in verdict.failures] == [("n1", "gateway: error rate")]
    assert verdict.cause().startswith(
        "n1: gateway: error rate: 6 of its 20 answers failed (30.0%) against 0.0%"
    )
    assert "smg_worker_cb_outcomes_total" in verdict.cause()


def test_a_canary_as_good_through_the_gateway_passes_saying_its_figures():
    verdict = canary.judge({"n1": node(HEALTHY)}, {"n2": node(HEALTHY)}, LIMITS)
    assert verdict.passed and not verdict.warnings, verdict.cause()
    assert (
        "gateway: n1: 26 answers, error rate 0.0% (smg_worker_cb_outcomes_total, 1 router(s))"
        in verdict.lines
    )


def test_equal_gateway_error_rates_pass():
    ends = {EXPORTER: (outcomes("http://a:1", 100, 5), outcomes("http://a:1", 190, 10))}
    same = {EXPORTER: (outcomes("http://b:1", 10, 0), outcomes("http://b:1", 100, 5))}
    verdict = canary.judge(
        {"n1": with_gateway(bake(), "http://a:1", ends)},
        {"n2": with_gateway(bake(), "http://b:1", same)},
        LIMITS,
    )
    assert verdict.passed, verdict.cause()


def test_answers_add_up_over_the_routers():
    texts = {
        EXPORTER: (outcomes("http://a:1", 0), outcomes("http://a:1", 10, 1)),
        OTHER_EXPORTER: (outcomes("http://a:1", 0), outcomes("http://a:1", 10, 1)),
    }
    healthy = {url: (outcomes("http://b:1", 0), outcomes("http://b:1", 22)) for url in texts}
    verdict = canary.judge(
        {"n1": with_gateway(bake(), "http://a:1", texts)},
        {"n2": with_gateway(bake(), "http://b:1", healthy)},
        LIMITS,
    )
    assert "2 of its 22 answers failed" in verdict.cause()
    assert (
        "gateway: n1: 22 answers, error rate 9.1% (smg_worker_cb_outcomes_total, 2 router(s))"
        in verdict.lines
    )


def test_an_exporter_one_node_cannot_read_is_left_out_and_the_others_judge():
    texts = {EXPORTER: (START, END), OTHER_EXPORTER: (None, None)}
    verdict = canary.judge({"n1": node(FAILING, texts)}, {"n2": node(HEALTHY)}, LIMITS)
    assert any(line.startswith(f"gateway: {OTHER_EXPORTER} (n1: no /metrics") for line in verdict.lines)
    assert [m for _, m, _ in verdict.failures] == ["gateway: error rate"]


def test_gateway_metrics_not_reachable_are_said_and_sglang_judges_alone():
    unread = {EXPORTER: (None, None)}
    verdict = canary.judge({"n1": node(FAILING, unread)}, {"n2": node(HEALTHY, unread)}, LIMITS)
    assert verdict.passed, verdict.cause()
    assert verdict.warnings == [
        f"gateway: metrics not reachable: {EXPORTER} (n1: no /metrics at the bake's start: URLError: connection "
        "refused): not judged there, SGLang's /metrics judge alone"
    ]


def test_gateway_metrics_not_reachable_fail_the_bake_when_required():
    unread = {EXPORTER: (START, None)}
    verdict = canary.judge({"n1": node(HEALTHY)}, {"n2": node(HEALTHY, unread)}, REQUIRED)
    assert not verdict.passed
    assert verdict.failures[0][:2] == ("bake", "gateway")
    assert (
        "metrics not reachable" in verdict.cause() and "n2: no /metrics at the bake's end" in verdict.cause()
    )
    assert "rolling_canary_require_gateway_metrics" in verdict.cause()


def test_too_few_answers_through_the_gateway_are_not_judged_there():
    few = {EXPORTER: (outcomes("http://a:1", 0), outcomes("http://a:1", 2, 2))}
    verdict = canary.judge({"n1": with_gateway(bake(), "http://a:1", few)}, {"n2": node(HEALTHY)}, LIMITS)
    assert verdict.passed and "n1 gave 4 answers through the gateway" in verdict.warnings[0]
    strict = canary.judge({"n1": with_gateway(bake(), "http://a:1", few)}, {"n2": node(HEALTHY)}, REQUIRED)
    assert [(n, m) for n, m, _ in strict.failures] == [("n1", "gateway")]


def test_a_fleet_without_routers_says_nothing_of_the_gateway_unless_required():
    verdict = canary.judge({"n1": bake()}, {"n2": bake()}, LIMITS)
    assert verdict.passed and not verdict.warnings
    assert not any(line.startswith("gateway") for line in verdict.lines)
    strict = canary.judge({"n1": bake()}, {"n2": bake()}, REQUIRED)
    assert "no router's exporter to read" in strict.cause()


def test_a_gateway_restarted_during_the_bake_counts_from_zero():
    reset = {EXPORTER: (outcomes("http://a:1", 500, 3), outcomes("http://a:1", 20, 5))}
    start, end = with_gateway(bake(), "http://a:1", reset)
    assert canary_gateway.answers(EXPORTER, start, end) == (25.0, 5.0)


def test_the_nodes_rotation_names_every_routers_exporter():
    defaults = deploy_defaults()
    hosts = [
        ("n1", {**defaults, "ssh_hostname": "10.0.0.11", "profile": "sandbox"}),
        ("r1", {**defaults, "ssh_hostname": "10.0.0.5", "role": "router", "router_prometheus_port": 29100}),
    ]
    rotation = rotation_for("n1", hosts[0][1], hosts, 30000)
    assert rotation.gateway_metrics == ("http://10.0.0.5:29100/metrics",)
    assert rotation.worker_url == "http://10.0.0.11:30000"


def test_an_unreadable_exporter_answer_is_left_out():
    bad = {EXPORTER: ("smg_worker_cb_outcomes_total{worker= 1\n", END)}
    verdict = canary.judge({"n1": node(HEALTHY, bad)}, {"n2": node(HEALTHY)}, LIMITS)
    assert "/metrics unreadable: line 1" in verdict.warnings[0]


def test_too_few_answers_from_the_old_nodes_are_not_judged_there():
    few = {EXPORTER: (outcomes("http://b:1", 0), outcomes("http://b:1", 3))}
    verdict = canary.judge({"n1": node(FAILING)}, {"n2": with_gateway(bake(), "http://b:1", few)}, LIMITS)
    assert verdict.passed and "the old nodes gave 3 answers through the gateway" in verdict.warnings[0]
    assert any(line.startswith("gateway: n1: 20 answers, error rate 30.0%") for line in verdict.lines)
