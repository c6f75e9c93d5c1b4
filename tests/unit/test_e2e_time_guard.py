"""The end-to-end suite's time guard (tests/e2e/conftest.py), on a throwaway suite: a test over
the ceiling fails saying so, unless its marker says why it may take longer."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SUITE = """
import time
import pytest

def test_quick():
    pass

def test_slow():
    time.sleep(0.6)

@pytest.mark.over_ceiling(reason="converges three nodes")
def test_slow_and_says_why():
    time.sleep(0.6)

@pytest.mark.over_ceiling
def test_slow_and_says_nothing():
    time.sleep(0.6)
"""


def test_a_test_over_the_ceiling_fails_unless_it_says_why(tmp_path):
    shutil.copy(REPO / "tests" / "e2e" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_suite.py").write_text(SUITE)
    env = {**os.environ, "SGLANG_DEPLOY_E2E_CEILING_S": "0.3", "SGLANG_DEPLOY_E2E_PHASE": "guard"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout
    failed = sorted(
        line.split("::")[1].split()[0] for line in done.stdout.splitlines() if line.startswith("FAILED")
    )
    assert failed == ["test_slow", "test_slow_and_says_nothing"], done.stdout
    assert "over the end-to-end ceiling of 0 s" in done.stdout
    durations = json.loads((tmp_path / "reports" / "e2e-durations" / "guard.json").read_text())
    assert set(durations) == {
        f"test_suite.py::{name}"
        for name in ("test_quick", "test_slow", "test_slow_and_says_why", "test_slow_and_says_nothing")
    }
