"""Shared fixtures for the unit tests."""

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def in_repo(monkeypatch):
    """Run from the repository root, so error messages name files as `profiles/x.yml`."""
    monkeypatch.chdir(REPO_ROOT)
    return REPO_ROOT


@pytest.fixture(autouse=True)
def last_good_record(tmp_path, monkeypatch):
    """Where lastgood.save remembers its directories: a test's own file, never the repo's."""
    from sglang_deploy.node import lastgood
    record = tmp_path / "last-good-dirs.json"
    monkeypatch.setattr(lastgood, "SAVED_DIRS", str(record))
    return record
