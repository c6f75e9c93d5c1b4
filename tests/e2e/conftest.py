"""The end-to-end suite's time guard: a test whose own run (its call, not the shared fixtures
its module converges once) takes longer than CEILING_S fails, unless it carries
`@pytest.mark.over_ceiling(reason=...)` saying why it must. Every test's time is also written to
reports/e2e-durations/<phase>.json (setup, call and teardown apart), for `make test`'s summary."""

from __future__ import annotations

import json
import os

import pytest

CEILING_S = float(os.environ.get("SGLANG_DEPLOY_E2E_CEILING_S", "180"))


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "over_ceiling(reason): an end-to-end test allowed past the suite's time ceiling, and why"
    )
    config._e2e_durations = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    item.config._e2e_durations.setdefault(item.nodeid, {})[report.when] = round(report.duration, 1)
    if report.when != "call" or not report.passed or report.duration <= CEILING_S:
        return
    marker = item.get_closest_marker("over_ceiling")
    if marker and marker.kwargs.get("reason"):
        return
    report.outcome = "failed"
    report.longrepr = (
        f"{item.nodeid} took {report.duration:.0f} s, over the end-to-end ceiling of {CEILING_S:.0f} s: "
        "make it faster, or mark it @pytest.mark.over_ceiling(reason=...) saying why it must take this long"
    )


def pytest_sessionfinish(session):
    durations = getattr(session.config, "_e2e_durations", {})
    if not durations:
        return
    reports = session.config.rootpath / "reports" / "e2e-durations"
    reports.mkdir(parents=True, exist_ok=True)
    phase = os.environ.get("SGLANG_DEPLOY_E2E_PHASE", "e2e")
    (reports / f"{phase}.json").write_text(json.dumps(durations, indent=1, sort_keys=True) + "\n")
