"""bench/monitoring.py: what it reads of Prometheus' API answers and the rules, and the computed
time the decode rule's rate window takes to cross its threshold (the bench itself needs a
sandbox fleet)."""

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "monitoring.py"


def _load():
    sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("bench_monitoring", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


bench = _load()

# Prometheus 2.42's /api/v1/alerts and /api/v1/rules answers ("data"), trimmed.
ALERTS = {
    "alerts": [
        {
            "labels": {"alertname": "SGLangEngineDown", "instance": "127.0.0.1:30008", "job": "sglang"},
            "state": "pending",
            "activeAt": "2026-12-02T03:04:05.5Z",
            "value": "0e+00",
        },
        {
            "labels": {"alertname": "SGLangDecodeBelowLastGood", "instance": "127.0.0.1:30001"},
            "state": "firing",
            "activeAt": "2026-12-02T03:00:00.123456789Z",
            "value": "6.0e+01",
        },
    ]
}
RULES = {
    "groups": [
        {
            "name": "sglang-deploy",
            "interval": 15,
            "rules": [
                {
                    "type": "alerting",
                    "name": "SGLangEngineDown",
                    "query": 'up{job="sglang"} == 0',
                    "duration": 300,
                },
                {"type": "alerting", "name": "SGLangDriftDetected", "query": "x == 1", "duration": 0},
                {"type": "recording", "name": "job:up:sum", "query": "sum(up)"},
            ],
        }
    ]
}


def test_durations_and_times_as_prometheus_writes_them():
    assert bench.seconds_of("15s") == 15
    assert bench.seconds_of("1h30m") == 5400
    assert bench.seconds_of("500ms") == 0.5
    assert bench.seconds_of("10 minutes") is None
    assert bench.unix_of("2026-12-02T03:04:05Z") == 1796180645
    assert bench.unix_of("2026-12-02T03:04:05.123456789Z") == pytest.approx(1796180645.123457)
    assert bench.unix_of("2026-12-02T04:04:05+01:00") == 1796180645
    assert bench.unix_of("0001-01-01T00:00:00") is None  # no zone: not Prometheus' format


def test_the_alert_of_one_target_by_name_and_instance():
    down = bench.alert_of(ALERTS, "SGLangEngineDown", "127.0.0.1:30008")
    assert down == bench.Alert("pending", 1796180645.5, 0.0)
    assert bench.alert_of(ALERTS, "SGLangDecodeBelowLastGood", "127.0.0.1:30001").state == "firing"
    assert bench.alert_of(ALERTS, "SGLangEngineDown", "127.0.0.1:30001") is None
    assert bench.alert_of({"alerts": []}, "SGLangEngineDown", "127.0.0.1:30008") is None


def test_alerting_rules_with_their_for_and_group_interval():
    rules = bench.rules_of(RULES)
    assert sorted(rules) == ["SGLangDriftDetected", "SGLangEngineDown"]
    assert rules["SGLangEngineDown"].for_s == 300
    assert rules["SGLangEngineDown"].group_interval_s == 15
    assert rules["SGLangDriftDetected"].for_s == 0


def test_the_engine_target_of_a_host():
    targets = {
        "activeTargets": [
            {"labels": {"job": "node", "host": "node1", "instance": "127.0.0.1:29001"}},
            {"labels": {"job": "sglang", "host": "node1", "instance": "127.0.0.1:30001"}},
        ]
    }
    assert bench.engine_instance(targets, "node1") == "127.0.0.1:30001"
    assert bench.engine_instance(targets, "node2") is None


def test_the_shipped_rules_for_and_rate_window():
    shipped = bench.template_for_s()
    assert shipped["SGLangDecodeBelowLastGood"] == 600
    assert shipped["SGLangEngineDown"] == 300
    assert shipped["SGLangDriftDetected"] == 0
    decode = bench.yaml.safe_load(bench.RULES_FILE.read_text())["groups"][0]["rules"][0]
    assert bench.rate_window(decode["expr"]) == 600


def test_the_window_crossing_full_and_partly_filled():
    # 82 -> 60 tok/s against 73.8 (10 % under 82): a full 600 s window crosses after
    # 600 x (82 - 73.8) / (82 - 60) = 223.6 s; with only 60 s of traffic before the fall,
    # after 60 x (82 - 73.8) / (73.8 - 60) = 35.7 s.
    assert bench.window_crossing_s(82, 60, 73.8, 600, 600) == 224.0
    assert bench.window_crossing_s(82, 60, 73.8, 600, 60) == 36.0
    assert bench.window_crossing_s(82, 75, 73.8, 600, 600) is None  # never under the threshold
    assert bench.window_crossing_s(float("nan"), 60, 73.8, 600, 600) is None


class AnswersInTurn:
    """A Prometheus whose /api/v1/targets answers are ``answers``, one per read (the last kept)."""

    def __init__(self, answers):
        self.answers, self.reads = list(answers), 0

    def get(self, path, **params):
        assert path == "/api/v1/targets" and params == {"state": "active"}
        self.reads += 1
        return self.answers[min(self.reads, len(self.answers)) - 1]


def test_a_just_restarted_prometheus_is_read_once_every_target_was_scraped():
    fresh = {"activeTargets": [{"health": "unknown", "labels": {"job": "sglang", "host": "node1"}}]}
    none_yet = {"activeTargets": []}
    scraped = {"activeTargets": [{"health": "up", "labels": {"job": "sglang", "host": "node1"}}]}
    prom = AnswersInTurn([none_yet, fresh, scraped])
    assert bench.wait_scraped(prom, timeout=30, poll_s=0) is scraped and prom.reads == 3
    # A target that stays unknown is given up on at the timeout: the skip then names it.
    prom = AnswersInTurn([fresh])
    assert bench.wait_scraped(prom, timeout=0, poll_s=0) is fresh
