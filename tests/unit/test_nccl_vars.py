"""The one table of NCCL variables, and the lint, confirmation and health verdicts that read it."""

from pathlib import Path

import pytest

from sglang_deploy.profile import nccl_lint, nccl_vars
from sglang_deploy.profile.nccl_vars import VARIABLES
from sglang_deploy.verify import gpu_health, nccl_confirm

CAPTURED = Path(__file__).parent / "captured"
ROWS = [var for var in VARIABLES.values() if var.kind]


def sample(var):
    """A value NCCL accepts for the variable."""
    if var.kind == "integer":
        return str(max(var.minimum, 1))
    if var.kind == "p2p_level":
        return "SYS"
    return str(var.values[0])


def errors(env):
    return [f for f in nccl_lint.lint_env(env) if f.severity == "error"]


def test_every_variable_confirmation_expects_nccl_to_log_is_a_known_row():
    assert nccl_confirm.LOGGED <= nccl_vars.KNOWN
    assert nccl_confirm.NEEDS_TWO_RANKS <= nccl_confirm.LOGGED
    assert {
        "NCCL_P2P_LEVEL",
        "NCCL_MAX_NCHANNELS",
        "NCCL_BUFFSIZE",
        "NCCL_NTHREADS",
        "NCCL_PROTO",
        "NCCL_ALGO",
    } <= nccl_confirm.LOGGED


def test_what_nccl_logged_on_a_gpu_is_in_the_table_as_logged():
    lines = (CAPTURED / "nccl_2.28.9_h200_one_rank_full.log").read_text().splitlines()
    seen = {var for rank in nccl_confirm.parse(lines) for var in rank.values}
    assert seen and all(VARIABLES[name].logged and not VARIABLES[name].needs_two_ranks for name in seen)


@pytest.mark.parametrize("var", [v for v in ROWS if v.logged], ids=lambda v: v.name)
def test_confirmation_requires_every_logged_row(var):
    silent = [
        "node1:77:77 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 0 nranks 2 - Init COMPLETE",
        "node1:78:78 [1] NCCL INFO ncclCommInitRank comm 0x1 rank 1 nranks 2 - Init COMPLETE",
    ]
    report = nccl_confirm.confirm(silent, {var.name: sample(var)}, ranks_expected=2)
    assert not report.ok and f"{var.name} is never logged by any rank" in report.failures


@pytest.mark.parametrize("var", ROWS, ids=lambda v: v.name)
def test_lint_accepts_the_sample_value_and_notes_debugging_rows(var):
    findings = nccl_lint.lint_env({var.name: sample(var)}, pcie_only=False)
    assert not [f for f in findings if f.severity == "error"]
    noted = [f for f in findings if "Debugging" in f.message]
    assert [f.variable for f in noted] == ([var.name] if var.debugging else [])
    deprecated = [f.message for f in findings if f.message.startswith("deprecated")]
    assert deprecated == (
        [f"deprecated since NCCL {var.deprecated_since}: use {var.replaced_by}"]
        if var.deprecated_since
        else []
    )
    if var.replaced_by:
        assert var.replaced_by in VARIABLES


@pytest.mark.parametrize("var", ROWS, ids=lambda v: v.name)
def test_health_counts_exactly_the_pcie_tuning_rows(var):
    assert gpu_health.is_pcie_tuned({var.name: sample(var)}) == var.pcie_tuning


@pytest.mark.parametrize("value", ["0", "00", "1", "2", "3", "4", "5", "9", "010", "09", "017"])
def test_lint_and_health_agree_on_legacy_p2p_levels(value):
    level = nccl_vars.p2p_level(value)
    assert level in nccl_vars.P2P_LEGACY_LEVELS
    assert errors({"NCCL_P2P_LEVEL": value}) == []
    assert gpu_health.is_pcie_tuned({"NCCL_P2P_LEVEL": value}) == (level != "LOC")


@pytest.mark.parametrize(
    "value, level",
    [
        ("0", "LOC"),
        ("00", "LOC"),
        ("1", "PIX"),
        ("2", "PXB"),
        ("3", "PHB"),
        ("4", "SYS"),
        ("7", "SYS"),
        ("010", "SYS"),
        ("09", "LOC"),
        ("SYS", "SYS"),
        ("NVL", "NVL"),
        ("sys", None),
        ("NODE", None),
        ("4x", None),
    ],
)
def test_p2p_level_reads_like_nccl(value, level):
    """Legacy numbers go through strtol(value, NULL, 0): '010' is octal 8, '09' stops at 9."""
    assert nccl_vars.p2p_level(value) == level
    assert bool(errors({"NCCL_P2P_LEVEL": value})) == (level is None)
