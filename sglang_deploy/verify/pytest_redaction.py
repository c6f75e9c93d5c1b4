"""pytest plugin of `make verify` (tests/host): every report redacted before anything shows it.

Each test and collection report is rendered to text exactly as the terminal would print it (the
traceback, assertion rewriting, `-vv` diffs, `-l` locals, at whatever verbosity and `--tb`
style produced it), passed through the session's Redactor, and kept as that text; captured
output sections and skip reasons likewise. The terminal, `-r` summaries and any other report
consumer then only ever see redacted text.
"""

from __future__ import annotations

import io

import pytest
from _pytest._code.code import ReprFileLocation, TerminalRepr
from _pytest._io import TerminalWriter

from sglang_deploy.verify.redact import Redactor


class RedactedRepr(TerminalRepr):
    """A failure's text, already redacted; `reprcrash` keeps the one-line summary for `-r`."""

    def __init__(self, text, reprcrash=None):
        self.text = text
        self.reprcrash = reprcrash

    def toterminal(self, tw) -> None:
        for line in self.text.splitlines():
            tw.line(line, red=line.startswith("E "), bold=line.startswith("E "))


def scrub(report, redactor: Redactor):
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):  # a skip: (path, lineno, reason)
        path, lineno, reason = longrepr
        report.longrepr = (path, lineno, redactor.text(reason))
    elif longrepr is not None:
        crash = getattr(longrepr, "reprcrash", None)
        if crash is not None:
            crash = ReprFileLocation(crash.path, crash.lineno, redactor.text(crash.message))
        report.longrepr = RedactedRepr(redactor.text(_rendered(longrepr)), crash)
    report.sections = [(title, redactor.text(content)) for title, content in report.sections]
    return report


def _rendered(longrepr):
    """The text the terminal would show (without colours)."""
    if isinstance(longrepr, str):
        return longrepr
    out = io.StringIO()
    writer = TerminalWriter(file=out)
    writer.hasmarkup = False
    longrepr.toterminal(writer)
    return out.getvalue()


class ReportRedaction:
    """Registered by tests/host/conftest.py with the session's Redactor (which grows as each
    host's plan is made)."""

    def __init__(self, redactor: Redactor):
        self.redactor = redactor

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        return scrub((yield), self.redactor)

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector):
        return scrub((yield), self.redactor)
