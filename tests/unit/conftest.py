"""Shared fixtures for the unit tests."""

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def in_repo(monkeypatch):
    """Run from the repository root, so error messages name files as `profiles/x.yml`."""
    monkeypatch.chdir(REPO_ROOT)
    return REPO_ROOT
