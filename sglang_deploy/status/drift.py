"""Drift as `make status` shows it: the drift check that `make verify` last recorded for each
host (reports/verify.json, the verify summary's JSON: one report per host, its checks by name),
not a fresh one. Hashing an engine venv's files against their RECORD takes seconds to minutes
(torch's CUDA libraries: bench/drift.py), far beyond a quick look; the age of the record is
shown with it, and `make verify` refreshes it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from sglang_deploy.plan.hosts import REPO_ROOT

VERIFY_REPORT = REPO_ROOT / "reports" / "verify.json"
SOURCE = "make verify"
DRIFT_CHECK = "drift"  # verify/engine_checks.py's check


def recorded(path=VERIFY_REPORT, now=None) -> dict:
    """{host: {"state", "detail", "source", "age_s"}} of every host the report checked drift
    on; {} when there is no report (or it cannot be read: the rows then say "not recorded")."""
    path = Path(path)
    try:
        reports = json.loads(path.read_text())
        age = round((time.time() if now is None else now) - path.stat().st_mtime, 1)
    except (OSError, ValueError):
        return {}
    found = {}
    for report in reports if isinstance(reports, list) else []:
        checks = report.get("checks") if isinstance(report, dict) else None
        for check in checks if isinstance(checks, list) else []:
            if isinstance(check, dict) and check.get("name") == DRIFT_CHECK:
                found[report.get("host")] = {
                    "state": check.get("state"),
                    "detail": check.get("detail"),
                    "source": SOURCE,
                    "age_s": age,
                }
    return found
