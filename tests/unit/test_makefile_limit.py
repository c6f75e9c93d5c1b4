"""Every Makefile target that runs the deploy honours LIMIT (dry runs of make: nothing runs)."""

import shutil
import subprocess

import pytest

from sglang_deploy.plan.hosts import REPO_ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def deploy_lines(target, *args):
    """The lines of `make -n target` that run deploy.py (prerequisites not remade)."""
    done = subprocess.run(
        ["make", "-n", "-o", "wheels", "WHEELHOUSE_PROFILES=", target, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if "deploy.py" in line]


@pytest.mark.parametrize("target", ["deploy", "plan", "repair"])
def test_every_deploy_target_runs_only_the_limited_hosts(target):
    lines = deploy_lines(target, "LIMIT=node2,node3")
    assert lines and all(" --limit node2 --limit node3" in line for line in lines), lines


@pytest.mark.parametrize("target", ["deploy", "plan", "repair"])
def test_without_limit_every_host(target):
    lines = deploy_lines(target)
    assert lines and not any("--limit" in line for line in lines), lines


def test_repair_refuses_an_empty_retry_list(tmp_path):
    empty = tmp_path / "failed-hosts.txt"
    empty.write_text("")
    done = subprocess.run(
        ["make", "-n", "-o", "wheels", "WHEELHOUSE_PROFILES=", "repair", f"LIMIT=@{empty}"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0 and "nothing to re-run" in done.stderr
