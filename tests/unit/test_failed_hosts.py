"""reports/failed-hosts.txt (report/failed_hosts.py): written at a run's end with the hosts that
did not deploy, cleared by a run in which they did, and taken by `make deploy RETRY=1` /
`LIMIT=@file` (the Makefile's LIMIT_ARGS)."""

import subprocess
from pathlib import Path

import pytest

from sglang_deploy.report import failed_hosts, outcome
from sglang_deploy.report.outcome import Outcome

MAKEFILE = Path(__file__).resolve().parents[2] / "Makefile"


def run(*states):
    return [Outcome(f"node{i}", state) for i, state in enumerate(states, 1)]


def test_the_states_to_re_run_are_the_reports_own():
    assert set(failed_hosts.RETRY_STATES) == {outcome.FAILED, outcome.UNREACHABLE, outcome.NOT_RUN}


def test_a_run_that_leaves_failed_or_unreachable_hosts_writes_them(tmp_path):
    path = tmp_path / "reports" / "failed-hosts.txt"
    line = outcome.retry_line(
        run(outcome.DEPLOYED, outcome.FAILED, outcome.UNREACHABLE, outcome.UNCHANGED, outcome.NOT_RUN),
        True,
        path,
    )
    assert path.read_text() == "node2\nnode3\nnode5\n"
    assert "to re-run 3 host(s) that did not deploy (node2, node3, node5): make deploy RETRY=1" in line


def test_a_run_with_none_clears_the_file(tmp_path):
    path = tmp_path / "failed-hosts.txt"
    outcome.retry_line(run(outcome.FAILED, outcome.FAILED), True, path)
    assert outcome.retry_line(run(outcome.DEPLOYED, outcome.UNCHANGED), True, path) is None
    assert path.read_text() == ""


def test_a_limited_run_keeps_the_others_entries(tmp_path):
    path = tmp_path / "failed-hosts.txt"
    path.write_text("node1\nnode9\n")
    assert failed_hosts.update(
        [Outcome("node1", outcome.DEPLOYED), Outcome("node2", outcome.FAILED)], path
    ) == [
        "node9",
        "node2",
    ]


def test_an_entry_of_another_inventory_goes(tmp_path):
    """A host the run's inventory does not have (another sandbox's, one since removed) is no
    host to re-run."""
    path = tmp_path / "failed-hosts.txt"
    path.write_text("node5\nnode3\nghost\n")
    done = [Outcome("node1", outcome.DEPLOYED), Outcome("node2", outcome.UNCHANGED)]
    assert failed_hosts.update(done, path, inventory={"node1", "node2", "node3"}) == ["node3"]
    assert path.read_text() == "node3\n"
    assert outcome.retry_line(done, True, path, inventory={"node1", "node2"}) is None


def test_a_dry_run_leaves_the_file_alone(tmp_path):
    path = tmp_path / "failed-hosts.txt"
    path.write_text("node1\n")
    assert outcome.retry_line(run(outcome.WOULD_CHANGE), False, path) is None
    assert path.read_text() == "node1\n"


def make_expands(tmp_path, *args):
    """What the Makefile's LIMIT_ARGS become (evaluated only: nothing runs)."""
    show = 'show: ; @$(LIMIT_CHECK)echo "$(LIMIT_ARGS)"'
    return subprocess.run(
        ["make", "-s", "-f", str(MAKEFILE), "--eval", show, "show", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )


@pytest.mark.skipif(subprocess.run(["which", "make"], capture_output=True).returncode, reason="no make")
def test_make_takes_the_hosts_from_the_file(tmp_path):
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "failed-hosts.txt").write_text("node2\n\n# a comment\nnode3\n")
    assert make_expands(tmp_path, "RETRY=1").stdout.strip() == "--limit node2 --limit node3"
    assert (
        make_expands(tmp_path, "LIMIT=@reports/failed-hosts.txt").stdout.strip()
        == "--limit node2 --limit node3"
    )
    assert make_expands(tmp_path, "LIMIT=node1,node4").stdout.strip() == "--limit node1 --limit node4"


@pytest.mark.skipif(subprocess.run(["which", "make"], capture_output=True).returncode, reason="no make")
def test_make_refuses_an_empty_list_rather_than_every_host(tmp_path):
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "failed-hosts.txt").write_text("")
    done = make_expands(tmp_path, "RETRY=1")
    assert done.returncode != 0 and "nothing to re-run" in done.stderr and "--limit" not in done.stdout
