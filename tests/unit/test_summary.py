"""`make verify`'s per-host report (sglang_deploy.verify.summary): fitted to the terminal, one
block per host, the full table behind --wide and always in the JSON, and nothing it prints or
writes carries a secret value."""

import json

import pytest
from test_checks import HOST_DATA, SECRET, Node, Result

from sglang_deploy.verify import summary
from sglang_deploy.verify.redact import MASK, Redactor
from sglang_deploy.verify.router_summary import router_lines


@pytest.fixture
def run(monkeypatch, tmp_path, capsys):
    """summary.main over two hosts whose every command fails with the secret in its output."""
    monkeypatch.setenv("HF_TOKEN", SECRET)
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(summary, "inventory_hosts", lambda inv: [("node1", HOST_DATA), ("node2", HOST_DATA)])
    leaky = Result(1, "", f"error: {SECRET}; HF_TOKEN={SECRET}")
    monkeypatch.setattr(summary, "testinfra_host", lambda data: Node(outputs={"": leaky}, listening=False))

    def run(*args):
        path = tmp_path / "reports" / "verify.json"
        code = summary.main(["inventory.py", "--json", str(path), *args])
        return code, capsys.readouterr().out, path.read_text()

    return run


def _too_wide(lines, width):
    """Lines over ``width`` that wrapping could have kept inside it (a word that alone is wider
    than the room left cannot be cut: paths and URLs are kept whole)."""
    return [line for line in lines if len(line) > width and max(map(len, line.split())) < width - 40]


def test_the_report_fits_the_terminal_one_block_per_host(run):
    code, out, _ = run()
    lines = out.splitlines()
    assert code == 1
    assert not [line for line in lines if len(line) > 80], "\n".join(line for line in lines if len(line) > 80)
    assert "node1 (checked against baseline)" in lines and "node2 (checked against baseline)" in lines
    block = lines[lines.index("node1 (checked against baseline)") + 1 :]
    assert block[0].split()[:3] == ["last", "good", "warning"]
    serving = next(i for i, line in enumerate(block) if line.startswith("  serving "))
    # A long detail wraps under its own column.
    assert block[serving].split()[1] == "failed" and block[serving + 1].startswith(" " * 20)
    # What is not ok, one line each at the end (as before the blocks existed).
    assert any(line.startswith("node1: serving: failed: nothing listens") for line in lines)


def test_the_overview_says_what_was_checked_against_and_what_last_passed(run):
    _, out, _ = run()
    header, row = [line.split() for line in out.splitlines() if line.startswith(("host ", "node1 "))][:2]
    assert header[:6] == ["host", "checked", "against", "last", "passed", "gate"]
    assert row[:4] == ["node1", "baseline", "none", "failed"]


def test_the_full_table_is_behind_wide_and_always_in_the_json(run):
    _, narrow, written = run()
    _, wide, _ = run("--wide")
    header = wide.splitlines()[0].split("  ")
    assert [cell.strip() for cell in header if cell.strip()] == list(summary.COLUMNS)
    assert max(map(len, wide.splitlines())) > 80 and not narrow.startswith("host  checked against  last good")
    report = json.loads(written)
    assert [r["host"] for r in report] == ["node1", "node2"]
    assert list(report[0]["table"]) == list(summary.COLUMNS)
    assert report[0]["table"]["serving"] == "failed" and report[0]["last_passed_gate"] == "none"
    assert {"name", "state", "detail", "data"} <= set(report[0]["checks"][0])


def test_nothing_printed_or_written_carries_a_secret(run):
    for args in ((), ("--wide",)):
        _, out, written = run(*args)
        assert SECRET not in out and SECRET not in written
        assert f"HF_TOKEN={MASK}" in out


def test_a_detail_that_carries_a_secret_is_redacted_when_printed_however_it_wraps():
    """The printed report redacts again (a check that forgot to): before wrapping, so a value
    or a NAME=value cut across two lines is masked too."""
    report = {
        "host": "node1",
        "profile": "p",
        "last_passed_gate": "p",
        "checks": [
            {"name": "hook", "state": "failed", "detail": "word " * 9 + f"HF_TOKEN=x {SECRET}", "data": {}}
        ],
    }
    router = {"host": "r1", "router": "http://10.0.0.9:8000", "checks": report["checks"]}
    secrets = Redactor(names=["HF_TOKEN"], values=[SECRET])
    for wide in (False, True):
        text = "\n".join(summary.report_lines([report], [router], 60, wide, secrets))
        assert SECRET not in text and "HF_TOKEN=x" not in text and "HF_TOKEN=***" in text


def test_a_router_is_a_block_with_its_url_and_its_checks():
    checks = [
        {"name": "router packages", "state": "ok", "detail": "sglang-router==0.2.1", "data": {}},
        {
            "name": "router workers",
            "state": "failed",
            "detail": "worker http://10.0.0.11:30001 " * 4,
            "data": {},
        },
    ]
    reports = [{"host": "r1", "router": "http://127.0.0.1:8000", "checks": checks}]
    lines = router_lines(reports, 60, False, Redactor())
    assert lines[0] == "r1 (router at http://127.0.0.1:8000)"
    assert lines[1].split() == ["router", "packages", "ok", "sglang-router==0.2.1"]
    assert not _too_wide(lines, 60) and max(map(len, lines[:4])) <= 60
    assert "r1: router workers: failed: worker http://10.0.0.11:30001" in "\n".join(lines)
    wide = router_lines(reports, 60, True, Redactor())
    assert wide[0].split() == ["router", "url", *"router packages router unit router workers".split()]
    assert wide[1].split() == ["r1", "http://127.0.0.1:8000", "ok", "-", "failed"]
