"""Our Grafana dashboard (templates/grafana/sglang-deploy.json): it loads, its panels are the
ones it promises, every query parses as PromQL (`promtool check rules` on each expr as a
recording rule) and names only metrics that exist: the deploy's textfile metrics
(node/metrics_textfile.py) and the SGLang families the stand-in serves as SGLang 0.5.23 declares
them (tests/unit/test_standin_metrics.py's EXPECTED)."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from sglang_deploy.node import metrics_textfile
from tests.unit.test_standin_metrics import EXPECTED

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "templates" / "grafana" / "sglang-deploy.json"
RULES = REPO / "templates" / "prometheus" / "sglang-alerts.rules.yml"
METRIC = re.compile(r"\b(sglang:[a-z_]+|sglang_deploy_[a-z_]+)")


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
