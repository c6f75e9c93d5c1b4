"""node/prometheus_gate.py, node/prometheus_targets.py and node/lib/prometheus_api.py against a
small HTTP server that answers with what Debian's Prometheus 2.42 answered (captured/: its
/api/v1/targets with one target down, its /metrics after a refused reload, its log of it)."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

from sglang_deploy.node import prometheus_gate, prometheus_targets
from sglang_deploy.node.lib import prometheus_api, result, status

CAPTURED = Path(__file__).parent / "captured"
TARGETS = (CAPTURED / "prometheus_2.42_targets_one_down.json").read_text()
METRICS_REFUSED = (CAPTURED / "prometheus_2.42_metrics_reload_refused.txt").read_text()
LOG_REFUSED = (CAPTURED / "prometheus_2.42_reload_refused.log").read_text().splitlines()
UP = "http://127.0.0.1:19390/metrics"
DOWN = "http://127.0.0.1:19391/metrics"
RULE_ERROR = (
    'loading groups failed: rules/bad.yml: 5:11: group "x", rule 1, "Bad": could not parse '
    "expression: 1:17: parse error: unclosed left parenthesis"
)


class FakePrometheus(BaseHTTPRequestHandler):
    answers = {}  # path -> (code, body)

    def log_message(self, *args):
        pass

    def do_GET(self):
        code, body = self.answers.get(self.path, (404, ""))
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def prometheus():
    FakePrometheus.answers = {
        "/-/ready": (200, "Prometheus Server is Ready.\n"),
        "/api/v1/targets?state=active": (200, TARGETS),
    }
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakePrometheus)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def last_result(capsys):
    return result.parse(capsys.readouterr().out.splitlines())


# -- the captured formats ------------------------------------------------------------------------


def test_target_health_reads_up_down_and_targets_prometheus_does_not_list():
    health, unexpected = prometheus_api.target_health(TARGETS, [UP, DOWN, "http://10.0.0.9:9100/metrics"])
    assert health[UP] == ("up", "")
    assert health[DOWN][0] == "down" and "connection refused" in health[DOWN][1]
    assert health["http://10.0.0.9:9100/metrics"] == (prometheus_api.NOT_SCRAPED, "")
    assert unexpected == []
    assert prometheus_api.target_health(TARGETS, [UP])[1] == [DOWN]


def test_reload_metrics_and_the_cause_of_a_refused_reload():
    found = prometheus_api.samples(
        METRICS_REFUSED,
        ("prometheus_config_last_reload_successful", "prometheus_build_info", "prometheus_ready"),
    )
    assert found == {"prometheus_config_last_reload_successful": 0.0, "prometheus_ready": 1.0}
    # The first error since the configuration was loaded names the rule, not "Error reloading config".
    assert prometheus_api.journal_cause(LOG_REFUSED) == RULE_ERROR
    assert prometheus_api.journal_cause(LOG_REFUSED[:5]) is None


# -- the target check ----------------------------------------------------------------------------


def test_every_target_not_up_is_named_a_down_one_as_down(prometheus, capsys):
    missing = "http://10.0.0.9:9100/metrics"
    code = prometheus_targets.main(
        ["--url", prometheus, "--expect", UP, "--expect", DOWN, "--expect", missing]
    )
    found = last_result(capsys)
    assert code == status.TARGETS_DOWN == found["status"]
    assert found["cause"].startswith(f"2 of 3 target(s) not up: {DOWN} down (Get ")
    assert f"{missing} not scraped" in found["cause"]
    assert found["targets"][UP] == {"health": "up", "error": ""}
    assert found["targets"][DOWN]["health"] == "down"


def test_all_targets_up_pass(prometheus, capsys):
    assert prometheus_targets.main(["--url", prometheus, "--expect", UP]) == status.READY
    assert last_result(capsys)["unexpected"] == [DOWN]


def test_a_target_not_scraped_yet_is_waited_for_then_named(prometheus, capsys):
    unknown = TARGETS.replace('"health": "down"', '"health": "unknown"')
    FakePrometheus.answers["/api/v1/targets?state=active"] = (200, unknown)
    code = prometheus_targets.main(
        ["--url", prometheus, "--expect", DOWN, "--settle", "0.3", "--interval", "0.1"]
    )
    assert code == status.TARGETS_DOWN
    assert f"{DOWN} unknown" in last_result(capsys)["cause"]


def test_prometheus_not_answering_is_a_timeout(capsys):
    code = prometheus_targets.main(["--url", "http://127.0.0.1:9", "--expect", UP])
    assert code == status.TIMEOUT
    assert "did not answer" in last_result(capsys)["cause"]


# -- the gate ------------------------------------------------------------------------------------


@pytest.fixture
def unit(monkeypatch):
    """systemd faked: the unit's ActiveState, what `systemctl reload` does, the journal."""
    fake = SimpleNamespace(active="active", reloads=[], journal=LOG_REFUSED, on_reload=None)

    def systemctl(args, **kwargs):
        fake.reloads.append(args)
        if fake.on_reload:
            fake.on_reload()
        return SimpleNamespace(returncode=0, stderr="")

    monkeypatch.setattr(
        prometheus_gate.systemd, "unit_show", lambda unit, props: {"ActiveState": fake.active}
    )
    monkeypatch.setattr(prometheus_gate.systemd, "systemctl", systemctl)
    monkeypatch.setattr(
        prometheus_gate.systemd,
        "journal_read",
        lambda matches: ([(None, line) for line in fake.journal], None),
    )
    return fake


def gate(url, *extra):
    args = ["--url", url, "--path", "/-/ready", "--unit", "prometheus.service", "--timeout", "0.5"]
    return prometheus_gate.main([*args, "--interval", "0.05", *extra])


def test_ready_answers_200(prometheus, unit, capsys):
    assert gate(prometheus) == status.READY
    assert last_result(capsys)["http_code"] == 200


def test_a_failed_unit_fails_at_once_with_the_cause_from_its_journal(prometheus, unit, capsys):
    unit.active = "failed"
    assert gate(prometheus) == status.FAILED_START
    found = last_result(capsys)
    assert found["cause"] == f"prometheus.service: the unit failed; journal: {RULE_ERROR}"
    assert found["journal"][-1].startswith("ts=")


def test_not_ready_in_time_is_a_timeout(prometheus, unit, capsys):
    FakePrometheus.answers["/-/ready"] = (503, "Service Unavailable")
    assert gate(prometheus) == status.TIMEOUT
    assert "/-/ready answered 503 after 0s" in last_result(capsys)["cause"]


def test_a_reload_passes_once_prometheus_says_it_loaded_the_configuration_since(prometheus, unit, capsys):
    loaded = METRICS_REFUSED.replace("successful 0", "successful 1")
    FakePrometheus.answers["/metrics"] = (200, loaded)  # the last load is older than the reload

    def reloaded():
        FakePrometheus.answers["/metrics"] = (200, loaded.replace("1.796176367617973e+09", "9.9e+09"))

    unit.on_reload = reloaded
    assert gate(prometheus, "--reload") == status.READY
    assert unit.reloads == [["reload", "prometheus.service"]]


def test_a_reload_that_loaded_nothing_new_is_not_ready(prometheus, unit, capsys):
    loaded = METRICS_REFUSED.replace("successful 0", "successful 1")
    FakePrometheus.answers["/metrics"] = (200, loaded)  # never changes: the reload was not applied
    assert gate(prometheus, "--reload") == status.TIMEOUT
    assert "no configuration loaded since the reload" in last_result(capsys)["cause"]


def test_a_refused_reload_fails_naming_the_rule(prometheus, unit, capsys):
    unit.on_reload = lambda: FakePrometheus.answers.update({"/metrics": (200, METRICS_REFUSED)})
    assert gate(prometheus, "--reload") == status.RELOAD_FAILED
    found = last_result(capsys)
    assert "did not load its configuration again (it keeps the one before)" in found["cause"]
    assert found["cause"].endswith(RULE_ERROR)


def test_the_result_line_is_json(prometheus, unit, capsys):
    gate(prometheus)
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert json.loads(line)["result"] == "READY"
