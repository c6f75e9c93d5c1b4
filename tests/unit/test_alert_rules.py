"""The alert rules shipped with the deploy (templates/prometheus/sglang-alerts.rules.yml): they
parse (`promtool check rules`), every rule has a case in tests/unit/prometheus/alerts_test.yml,
and the cases pass (`promtool test rules`). promtool comes from Debian's prometheus package
(.ci/run installs it)."""

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "templates" / "prometheus" / "sglang-alerts.rules.yml"
CASES = REPO / "tests" / "unit" / "prometheus" / "alerts_test.yml"

promtool = pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool not installed (Debian package: prometheus)"
)


def _promtool(*args, cwd=REPO):
    return subprocess.run(["promtool", *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def _alerts():
    rules = yaml.safe_load(RULES.read_text())
    return [rule["alert"] for group in rules["groups"] for rule in group["rules"]]


@promtool
def test_the_rules_parse():
    done = _promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(_alerts())} rules found" in done.stdout


@promtool
def test_every_rules_case_passes():
    done = _promtool("test", "rules", CASES.name, cwd=CASES.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_rule_has_a_case_that_expects_it_to_fire():
    cases = yaml.safe_load(CASES.read_text())
    assert cases["rule_files"] == [str(Path("../../..") / RULES.relative_to(REPO))]
    firing = {
        check["alertname"]
        for test in cases["tests"]
        for check in test.get("alert_rule_test", ())
        if check.get("exp_alerts")
    }
    assert sorted(firing) == sorted(_alerts())


@promtool
def test_a_rule_that_does_not_parse_is_refused(tmp_path):
    broken = tmp_path / "broken.rules.yml"
    broken.write_text(
        RULES.read_text().replace("sglang_deploy_drift_detected == 1", "sglang_deploy_drift_detected ==")
    )
    done = _promtool("check", "rules", str(broken))
    assert done.returncode != 0 and "FAILED" in (done.stdout + done.stderr)
