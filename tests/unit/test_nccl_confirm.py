"""NCCL confirmation on real NCCL 2.28.9 lines (H200, one rank) and a two-rank journal."""

from pathlib import Path

from sglang_deploy.verify import nccl_confirm as nc

CAPTURED = Path(__file__).parent / "captured"

TUNED = {
    "NCCL_PROTO": "LL",
    "NCCL_ALGO": "Ring",
    "NCCL_P2P_LEVEL": "SYS",
    "NCCL_MAX_NCHANNELS": "16",
    "NCCL_BUFFSIZE": "16777216",
    "NCCL_NTHREADS": "512",
}


def captured_lines(name):
    """A captured file's lines, without the '# ' provenance header."""
    return [line for line in (CAPTURED / name).read_text().splitlines() if not line.startswith("# ")]


def states(report, rank=0):
    return {v.var: v.state for v in report.ranks[rank].vars}


def test_parse_strips_exactly_one_period_from_integers_only():
    assert nc.clean_value("16.") == "16"
    assert nc.clean_value("16777216.") == "16777216"
    assert nc.clean_value("SYS") == "SYS"
    assert nc.clean_value("16..") == "16.."
    assert nc.clean_value("Simple.") == "Simple."
    assert nc.clean_value("-2.") == "-2"


def test_real_one_rank_lines_from_the_reference():
    lines = captured_lines("nccl_2.28.9_one_rank.log")
    [rank] = nc.parse(lines)
    assert (rank.host, rank.pid, rank.devices) == ("vm", 446, ["0"])
    assert rank.values == {
        "NCCL_P2P_LEVEL": ["SYS"],
        "NCCL_MAX_NCHANNELS": ["16"],
        "NCCL_BUFFSIZE": ["16777216"],
        "NCCL_NTHREADS": ["512"],
    }
    report = nc.confirm(lines, TUNED, ranks_expected=1)
    assert report.ok, report.lines()
    assert report.single_rank
    assert states(report) == {
        "NCCL_PROTO": "not logged (needs ≥2 ranks)",
        "NCCL_ALGO": "not logged (needs ≥2 ranks)",
        "NCCL_P2P_LEVEL": "confirmed",
        "NCCL_MAX_NCHANNELS": "confirmed",
        "NCCL_BUFFSIZE": "confirmed",
        "NCCL_NTHREADS": "confirmed",
    }
    assert report.lines()[0] == "NCCL confirmation: 1 rank (expected 1), ok"
    assert "    NCCL_PROTO: not logged (needs ≥2 ranks)" in report.lines()


def test_real_full_run_infers_one_rank_from_the_init_line():
    """The whole NCCL_DEBUG=INFO output of a one-rank all-reduce (captured on an H200)."""
    lines = captured_lines("nccl_2.28.9_h200_one_rank_full.log")
    [rank] = nc.parse(lines)
    assert rank.nranks == 1 and rank.pid == 548
    report = nc.confirm(lines, TUNED)  # no ranks_expected: 'nranks 1' from ncclCommInitRankConfig
    assert report.ok and report.single_rank
    # the same run with a wrong expectation fails on that variable only
    report = nc.confirm(lines, dict(TUNED, NCCL_BUFFSIZE="4194304"))
    assert not report.ok
    assert report.failures == ["vm:548 [0] NCCL_BUFFSIZE: wrong value (seen 16777216, expected 4194304)"]


def test_one_rank_without_any_nccl_line_for_a_required_variable():
    lines = captured_lines("nccl_2.28.9_one_rank.log")
    report = nc.confirm(lines, {"NCCL_P2P_LEVEL": "SYS", "NCCL_LL128_NTHREADS": "640"}, ranks_expected=1)
    assert not report.ok
    assert states(report)["NCCL_LL128_NTHREADS"] == "not logged"
    assert "NCCL_LL128_NTHREADS is never logged by any rank" in report.problems


JOURNAL = """\
Nov 29 10:00:01 node1 sglang[440]: [2026-11-29 10:00:01] server_args=ServerArgs(model_path='/models/x', tp_size=2)
Nov 29 10:00:09 node1 sglang[446]: node1:446:446 [0] NCCL INFO NCCL version 2.28.9+cuda12.9
Nov 29 10:00:09 node1 sglang[446]: node1:446:446 [0] NCCL INFO NCCL_P2P_LEVEL set by environment to SYS
Nov 29 10:00:09 node1 sglang[447]: node1:447:447 [1] NCCL INFO NCCL_P2P_LEVEL set by environment to SYS
Nov 29 10:00:09 node1 sglang[446]: node1:446:446 [0] NCCL INFO NCCL_MAX_NCHANNELS set by environment to 16.
Nov 29 10:00:09 node1 sglang[447]: node1:447:447 [1] NCCL INFO NCCL_MAX_NCHANNELS set by environment to 16.
Nov 29 10:00:09 node1 sglang[446]: node1:446:446 [0] NCCL INFO NCCL_BUFFSIZE set by environment to 16777216.
Nov 29 10:00:09 node1 sglang[447]: node1:447:447 [1] NCCL INFO NCCL_BUFFSIZE set by environment to 4194304.
Nov 29 10:00:09 node1 sglang[446]: node1:446:446 [0] NCCL INFO NCCL_NTHREADS set by environment to 512.
Nov 29 10:00:10 node1 sglang[446]: node1:446:446 [0] NCCL INFO ncclCommInitRankConfig comm 0x55d1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x1 - Init START
Nov 29 10:00:10 node1 sglang[447]: node1:447:447 [1] NCCL INFO ncclCommInitRankConfig comm 0x55d2 rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId 2000 commId 0x1 - Init START
Nov 29 10:00:10 node1 sglang[446]: [2026-11-29 10:00:10 TP0] node1:446:446 [0] NCCL INFO NCCL_PROTO set by environment to LL
Nov 29 10:00:10 node1 sglang[447]: [2026-11-29 10:00:10 TP1] node1:447:447 [1] NCCL INFO NCCL_PROTO set by environment to LL
Nov 29 10:00:10 node1 sglang[446]: node1:446:446 [0] NCCL INFO NCCL_ALGO set by environment to Ring
Nov 29 10:00:10 node1 sglang[447]: node1:447:447 [1] NCCL INFO NCCL_ALGO set by environment to Tree
Nov 29 10:00:11 node1 sglang[446]: node1:446:446 [0] NCCL INFO ncclCommInitRankConfig comm 0x55d1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x1 - Init COMPLETE
"""


def test_two_rank_journal_wrong_values_and_a_missing_variable():
    report = nc.confirm(JOURNAL.splitlines(), TUNED, ranks_expected=2)
    assert not report.ok and not report.single_rank
    assert [r.rank.label for r in report.ranks] == ["node1:446 [0]", "node1:447 [1]"]
    assert report.ranks[0].ok
    assert set(states(report, 0).values()) == {"confirmed"}  # PROTO/ALGO are logged with 2 ranks
    assert states(report, 1) == {
        "NCCL_PROTO": "confirmed",
        "NCCL_ALGO": "wrong value",
        "NCCL_P2P_LEVEL": "confirmed",
        "NCCL_MAX_NCHANNELS": "confirmed",
        "NCCL_BUFFSIZE": "wrong value",
        "NCCL_NTHREADS": "not logged",
    }
    assert report.failures == [
        "node1:447 [1] NCCL_ALGO: wrong value (seen Tree, expected Ring)",
        "node1:447 [1] NCCL_BUFFSIZE: wrong value (seen 4194304, expected 16777216)",
        "node1:447 [1] NCCL_NTHREADS: not logged",
    ]
    assert report.problems == []
    lines = report.lines()
    assert lines[0] == "NCCL confirmation: 2 ranks (expected 2), FAILED"
    assert "  node1:447 [1]: 3/6 confirmed, FAILED" in lines
    assert "    NCCL_NTHREADS: not logged  <- failure" in lines


def test_as_dict():
    d = nc.confirm(JOURNAL.splitlines(), TUNED, ranks_expected=2).as_dict()
    assert d["ok"] is False and d["ranks_expected"] == 2 and d["single_rank"] is False
    rank1 = d["ranks"][1]
    assert (rank1["host"], rank1["pid"], rank1["devices"], rank1["nranks"], rank1["ok"]) == (
        "node1",
        447,
        ["1"],
        2,
        False,
    )
    assert rank1["vars"]["NCCL_BUFFSIZE"] == {
        "expected": "16777216",
        "state": "wrong value",
        "seen": ["4194304"],
        "failure": True,
    }


def test_missing_rank_and_infers_two_ranks_without_ranks_expected():
    only_rank0 = [line for line in JOURNAL.splitlines() if "sglang[447]" not in line]
    report = nc.confirm(only_rank0, TUNED, ranks_expected=2)
    assert report.problems == ["1 rank logged NCCL lines, expected 2"]
    assert not report.ok
    # without ranks_expected the communicator size comes from 'nranks 2': PROTO/ALGO are required
    report = nc.confirm(only_rank0, TUNED)
    assert report.ok and not report.single_rank


def test_a_variable_never_logged_fails_and_unknown_ones_are_not_required():
    expected = dict(TUNED, NCCL_LL_BUFFSIZE="65536", NCCL_DEBUG="INFO", CUDA_DEVICE_MAX_CONNECTIONS="1")
    report = nc.confirm(JOURNAL.splitlines(), expected, ranks_expected=2)
    assert "NCCL_LL_BUFFSIZE is never logged by any rank" in report.problems
    assert states(report, 0)["NCCL_LL_BUFFSIZE"] == "not logged"
    assert states(report, 0)["NCCL_DEBUG"] == "not logged (NCCL is not known to log it)"
    assert not any(
        v.failure for v in report.ranks[0].vars if v.var in ("NCCL_DEBUG", "CUDA_DEVICE_MAX_CONNECTIONS")
    )
    # a variable outside nccl_vars.LOGGED becomes required once any rank logs it
    lines = JOURNAL.splitlines() + [
        "Nov 29 10:00:12 node1 sglang[446]: node1:446:446 [0] NCCL INFO NCCL_CUMEM_ENABLE set by environment to 0."
    ]
    report = nc.confirm(lines, {"NCCL_CUMEM_ENABLE": "0"}, ranks_expected=2)
    assert states(report, 0) == {"NCCL_CUMEM_ENABLE": "confirmed"}
    assert states(report, 1) == {"NCCL_CUMEM_ENABLE": "not logged"} and not report.ok
    # ... and also_required makes one required up front
    report = nc.confirm(
        JOURNAL.splitlines(), {"NCCL_CUMEM_ENABLE": "0"}, 2, also_required=["NCCL_CUMEM_ENABLE"]
    )
    assert "NCCL_CUMEM_ENABLE is never logged by any rank" in report.problems


def test_no_nccl_lines_at_all():
    report = nc.confirm(["Nov 29 10:00:01 node1 sglang[440]: loading weights"], TUNED)
    assert not report.ok and report.ranks == []
    assert report.problems == ["no NCCL log line found (is NCCL_DEBUG=INFO set for the workers?)"]
    assert nc.confirm([], {"NCCL_DEBUG": "INFO"}).ok  # nothing required, nothing to confirm


def test_integer_values_compare_as_integers():
    lines = ["h:1:1 [0] NCCL INFO NCCL_BUFFSIZE set by environment to 16777216."]
    assert nc.confirm(lines, {"NCCL_BUFFSIZE": "0x1000000"}, ranks_expected=1).ok
    assert not nc.confirm(lines, {"NCCL_BUFFSIZE": "16777217"}, ranks_expected=1).ok


def test_timestamps_that_look_like_host_pid_tid_are_not_ranks():
    lines = [
        "Nov 29 10:00:01 [0] something else",
        "2026-11-29T10:00:01 node-1.example:12:13 [3] NCCL INFO NCCL_P2P_LEVEL set by environment to PXB",
    ]
    [rank] = nc.parse(lines)
    assert (rank.host, rank.pid, rank.devices, rank.values) == (
        "node-1.example",
        12,
        ["3"],
        {"NCCL_P2P_LEVEL": ["PXB"]},
    )
