"""Preflight's drift check names both ways out: repair, or the profile's engine.allow_drift."""

from sglang_deploy.node import preflight
from sglang_deploy.node.lib import status

DRIFTED = {
    "status": status.DRIFT,
    "seconds": 0.1,
    "python": "3.11",
    "missing_distributions": [],
    "distributions": {
        "sglang": {
            "version": "0.5.23",
            "record": True,
            "files_checked": 10,
            "skipped": 0,
            "unreadable": [],
            "modified": ["sglang/srt/managers/scheduler.py"],
            "missing": [],
            "unexpected": [],
        }
    },
}


def test_a_refusal_names_repair_and_allow_drift(monkeypatch):
    monkeypatch.setattr(preflight.drift, "drift", lambda names: DRIFTED)
    verdict, text = preflight.check_drift(["sglang"], allow=False)
    assert verdict == "failed"
    assert "modified sglang/srt/managers/scheduler.py" in text
    assert "`make repair` reinstalls them" in text and "engine.allow_drift: true" in text


def test_allowed_drift_warns_naming_the_setting(monkeypatch):
    monkeypatch.setattr(preflight.drift, "drift", lambda names: DRIFTED)
    verdict, text = preflight.check_drift(["sglang"], allow=True)
    assert verdict == "warning" and text.endswith("(engine.allow_drift: starting anyway)")
