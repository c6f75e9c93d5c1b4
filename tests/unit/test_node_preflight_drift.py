"""Preflight's drift check names both ways out: repair, or the profile's engine.allow_drift; what
it found is the node's drift sample (node/lib/textfile.py) whenever it runs."""

import argparse
import os
import sys

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


def _textfile_args(tmp_path):
    return argparse.Namespace(
        textfile_service="sglang", textfile_port=30000, textfile_dir=str(tmp_path / "textfile")
    )


def _drift_sample(tmp_path):
    venv = os.path.basename(os.path.realpath(sys.prefix))  # the interpreter that ran the check
    text = (tmp_path / "textfile" / "sglang-deploy-sglang@drift.prom").read_text()
    (line,) = [line for line in text.splitlines() if not line.startswith("#")]
    series, value = line.rsplit(" ", 1)
    assert series == f'sglang_deploy_drift_detected{{engine_port="30000",service="sglang",venv="{venv}"}}'
    return float(value)


def test_a_drifted_engine_is_the_drift_sample_allowed_or_not(monkeypatch, tmp_path):
    monkeypatch.setattr(preflight.drift, "drift", lambda names: DRIFTED)
    preflight.check_drift(["sglang"], allow=True, args=_textfile_args(tmp_path))
    assert _drift_sample(tmp_path) == 1.0
    clean = dict(DRIFTED, status=status.READY)
    monkeypatch.setattr(preflight.drift, "drift", lambda names: clean)
    assert preflight.check_drift(["sglang"], allow=False, args=_textfile_args(tmp_path))[0] == "ok"
    assert _drift_sample(tmp_path) == 0.0


def test_the_command_line_asks_for_the_sample(monkeypatch, tmp_path, capsys):
    seen = []
    monkeypatch.setattr(preflight.drift, "drift", lambda names: seen.append(names) or DRIFTED)
    argv = ["--unit", "sglang.service", "--argv-json", "[]", "--no-argv"]
    textfile = ["--textfile-service", "sglang", "--textfile-port", "30000"]
    textfile += ["--textfile-dir", str(tmp_path / "textfile")]
    monkeypatch.setattr(preflight, "check_argv", lambda argv: ("ok", "parsed"))
    monkeypatch.setattr(preflight, "check_lock", lambda path: None)
    # --no-argv (the engine not installed yet): no drift check, so no sample.
    preflight.main([*argv, "--drift", "sglang", *textfile])
    assert seen == [] and not (tmp_path / "textfile").exists()
    preflight.main([*argv[:-1], "--drift", "sglang", *textfile])
    assert seen == [["sglang"]] and _drift_sample(tmp_path) == 1.0
