"""Our Grafana dashboard (templates/grafana/sglang-deploy.json): it loads, its panels are the
ones it promises, every query parses as PromQL (`promtool check rules` on each expr as a
recording rule) and names only metrics that exist: the deploy's textfile metrics
(node/metrics_textfile.py) and the SGLang families the stand-in serves as SGLang 0.5.23 declares
them (tests/unit/test_standin_metrics.py's EXPECTED).

SGLang's published dashboard (`make grafana-dashboards`, docs/grafana.md): which of its queries
the stand-in's /metrics serves, panel by panel; checked against the file itself where it was
downloaded."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sglang_deploy.node import metrics_textfile
from sglang_deploy.plan.grafana import GRAFANA_DATASOURCE_UID, render_dashboard
from tests.unit.test_standin_metrics import EXPECTED

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "engine-standin"))
from sglang.srt.observability.metrics_collector import EngineMetrics  # noqa: E402

DASHBOARD = REPO / "templates" / "grafana" / "sglang-deploy.json"
RULES = REPO / "templates" / "prometheus" / "sglang-alerts.rules.yml"
SGLANG_DASHBOARD = REPO / "build" / "grafana" / "sglang-dashboard.json"  # grafana_dashboard_files
METRIC = re.compile(r"\b(sglang:[a-zA-Z0-9_]+|sglang_deploy_[a-z0-9_]+)")


def _sglang_samples():
    """Every sample name SGLang's families put on /metrics (a histogram: _bucket, _sum, _count)."""
    names = set()
    for family, (kind, *_) in EXPECTED.items():
        names |= {family + s for s in ("_bucket", "_sum", "_count")} if kind == "histogram" else {family}
    return names


KNOWN = _sglang_samples() | {metrics_textfile.PREFIX + name for name in metrics_textfile.HELP}


def _panels():
    doc = json.loads(DASHBOARD.read_text())
    found = []
    for panel in doc["panels"]:
        found += [panel, *panel.get("panels", [])]  # a row's own panels
    return [p for p in found if p.get("targets")]


def _exprs():
    return [(p["title"], t["expr"]) for p in _panels() for t in p["targets"]]


def test_the_dashboard_shows_decode_rates_rotation_and_ttft():
    queries = " ".join(expr for _, expr in _exprs())
    for wanted in (
        "sglang_deploy_decode_check_tokens_per_second",
        "sglang:gen_throughput",
        "sglang_deploy_in_rotation",
        "histogram_quantile(0.95, sum by (le, instance) (rate(sglang:time_to_first_token_seconds_bucket",
    ):
        assert wanted in queries
    assert len({p["id"] for p in _panels()}) == len(_panels())


@pytest.mark.parametrize("title, expr", _exprs())
def test_every_query_names_only_metrics_that_exist(title, expr):
    names = set(METRIC.findall(expr))
    assert names, f"{title}: no metric of ours or SGLang's"
    assert names <= KNOWN, f"{title}: unknown {sorted(names - KNOWN)}"


def test_the_dashboards_textfile_metrics_are_the_alert_rules_too():
    """The figures a dashboard panel shows from the deploy are the ones the rules alert on."""
    rules = RULES.read_text()
    shown = {n for _, expr in _exprs() for n in METRIC.findall(expr) if n.startswith("sglang_deploy_")}
    judged = {
        "sglang_deploy_in_rotation",
        "sglang_deploy_drift_detected",
        "sglang_deploy_gpu_pcie_link_degraded",
    }
    assert judged <= shown and all(name in rules for name in judged)


@pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool not installed (Debian package: prometheus)"
)
def test_every_query_parses_as_promql(tmp_path):
    rules = [{"record": f"dashboard:query_{i}", "expr": expr} for i, (_, expr) in enumerate(_exprs())]
    path = tmp_path / "dashboard.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules)} rules found" in done.stdout


# SGLang's published dashboard at the Makefile's SGLANG_DASHBOARD_COMMIT: each panel's title and
# the samples its queries read. Every one is on the stand-in's /metrics, with the model_name label
# its heatmaps filter on; sglang:cache_hit_rate always reads 0 there (no prefix cache).
E2E = "sglang:e2e_request_latency_seconds"
TTFT = "sglang:time_to_first_token_seconds"
SGLANG_DASHBOARD_QUERIES = {
    "End-to-End Request Latency": {f"{E2E}_bucket", f"{E2E}_sum", f"{E2E}_count"},
    "End-to-End Request Latency(s) Heatmap": {f"{E2E}_bucket"},
    "Time-To-First-Token Latency": {f"{TTFT}_bucket", f"{TTFT}_sum", f"{TTFT}_count"},
    "Time-To-First-Token Seconds Heatmap": {f"{TTFT}_bucket"},
    "Num Running Requests": {"sglang:num_running_reqs"},
    "Token Generation Throughput (Tokens / S)": {"sglang:gen_throughput"},
    "Cache Hit Rate": {"sglang:cache_hit_rate"},
    "Number Queued Requests": {"sglang:num_queue_reqs"},
}
SERVED_AS_ZERO = {"sglang:cache_hit_rate"}


def _standin_samples():
    """{sample name: [(labels text, value)]} of the stand-in's /metrics after one streamed request."""
    engine = EngineMetrics("tiny-standin")
    engine.emit_constants(max_total_num_tokens=4096, context_len=2048)
    engine.log_stats(running=1, queued=2, gen_throughput=82.0, used_tokens=40, max_total_num_tokens=4096)
    engine.observe_time_to_first_token(0.3, stream=True)
    engine.observe_one_finished_request(8, 32, 1.2, stream=True, time_per_output_token=0.012)
    found = {}
    for line in engine.exposition().splitlines():
        if line and not line.startswith("#"):
            sample, value = line.rsplit(" ", 1)
            name, _, labels = sample.partition("{")
            found.setdefault(name, []).append((labels, float(value)))
    return found


@pytest.mark.parametrize("title", SGLANG_DASHBOARD_QUERIES)
def test_the_standin_serves_every_query_of_sglangs_dashboard(title):
    served = _standin_samples()
    for name in SGLANG_DASHBOARD_QUERIES[title]:
        assert name in served, f"{title}: the stand-in does not serve {name}"
        assert all('model_name="tiny-standin"' in labels for labels, _ in served[name])
        if name in SERVED_AS_ZERO:
            assert {value for _, value in served[name]} == {0.0}
        elif not name.endswith("_bucket"):
            assert any(value > 0 for _, value in served[name]), f"{name} does not follow the load"


def _sglang_dashboard():
    if not SGLANG_DASHBOARD.is_file():
        pytest.skip(f"{SGLANG_DASHBOARD.relative_to(REPO)} not downloaded (make grafana-dashboards)")
    return json.loads(SGLANG_DASHBOARD.read_text())


def test_sglangs_dashboard_reads_what_this_file_says_it_does():
    doc = _sglang_dashboard()
    read = {}
    for panel in doc["panels"]:
        for target in panel.get("targets", []):
            read.setdefault(panel["title"], set()).update(METRIC.findall(target["expr"]))
    assert read == SGLANG_DASHBOARD_QUERIES


def test_sglangs_dashboard_is_provisioned_bound_to_our_datasource():
    provisioned = json.loads(render_dashboard(SGLANG_DASHBOARD.name, json.dumps(_sglang_dashboard())))
    refs = []

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("datasource"), dict) and node["datasource"].get("type") == "prometheus":
                refs.append(node["datasource"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(provisioned)
    assert refs and all(ref == {"type": "prometheus", "uid": GRAFANA_DATASOURCE_UID} for ref in refs)
    assert "Provisioned by sglang-deploy from sglang-dashboard.json" in provisioned["description"]
