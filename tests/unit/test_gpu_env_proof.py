"""bench/gpu_env_proof.py: the whole proof run in its --simulated mode (no GPU, no NCCL: the
stand-in prints NCCL's lines from its own environment), and the verdict logic on its own."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_deploy.node.lib import status
from sglang_deploy.verify import nccl_confirm
from sglang_deploy.verify.gpu_health import ComputeApp

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "gpu_env_proof.py"
SIX = ("NCCL_PROTO", "NCCL_ALGO", "NCCL_P2P_LEVEL", "NCCL_MAX_NCHANNELS", "NCCL_BUFFSIZE", "NCCL_NTHREADS")
TUNING = {
    "NCCL_PROTO": "LL",
    "NCCL_ALGO": "Ring",
    "NCCL_P2P_LEVEL": "SYS",
    "NCCL_MAX_NCHANNELS": "16",
    "NCCL_BUFFSIZE": "16777216",
    "NCCL_NTHREADS": "512",
}


def _load():
    spec = importlib.util.spec_from_file_location("gpu_env_proof", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


proof = _load()


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    keep = tmp_path_factory.mktemp("proof")
    env = dict(os.environ, **TUNING)  # exported in the calling shell: must not matter
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--simulated", "--keep", str(keep)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=240,
    )
    print(proc.stdout)
    return proc, keep


def section(out, title):
    start = out.index("== %s" % title)
    end = out.find("\n== ", start + 1)
    return out[start : end if end > 0 else len(out)]


def test_simulated_run_passes_and_says_it_is_simulated(simulated):
    proc, _ = simulated
    out = proc.stdout
    assert proc.returncode == 0, out
    assert "mode: SIMULATED" in out.splitlines()[2]
    assert out.rstrip().splitlines()[-1].startswith("mode: SIMULATED")
    assert "result: PASS" in out
    nccl_lines = [line for line in out.splitlines() if "NCCL INFO" in line]
    assert nccl_lines and all(line.strip().startswith("[simulated]") for line in nccl_lines)


def test_positive_run_checks_every_link_of_the_chain(simulated):
    out = section(simulated[0].stdout, "positive")
    for check in (
        "env file (our renderer, read back with systemd's rules)",
        "readiness gate (gate.py --pid --log)",
        proof.WORKERS_CHECK,
        "nothing inherited from the calling shell",
        "NCCL confirmation",
        "SIGTERM stop",
    ):
        assert "[PASS] " + check in out, check
    assert "[SKIP] GPU memory held by the workers: not checked (simulated: no GPU)" in out
    assert "[SKIP] NCCL behaviour (channels <= NCCL_MAX_NCHANNELS): not checked (simulated" in out
    assert (
        "confirmed NCCL_BUFFSIZE, NCCL_MAX_NCHANNELS, NCCL_NTHREADS, NCCL_P2P_LEVEL; rank pid = scheduler pid"
        in out
    )
    assert (
        "NCCL_PROTO: not logged (needs ≥2 ranks)" in out and "NCCL_ALGO: not logged (needs ≥2 ranks)" in out
    )
    assert "set by environment to 16777216." in out


def test_negative_control_fails_for_the_missing_variables(simulated):
    out = section(simulated[0].stdout, "negative")
    assert "calling process exports: " + ", ".join("%s=%s" % kv for kv in TUNING.items()) in out
    server_env = [line for line in out.splitlines() if "server environment:" in line][0]
    assert not any(var in server_env for var in SIX)
    assert f"[FAILED AS EXPECTED] {proof.WORKERS_CHECK}: WORKER_ENV_MISMATCH" in out
    assert (
        "[FAILED AS EXPECTED] NCCL confirmation: verification failed: NCCL_BUFFSIZE, NCCL_MAX_NCHANNELS, "
        "NCCL_NTHREADS, NCCL_P2P_LEVEL not logged by NCCL" in out
    )
    assert "[PASS] nothing inherited from the calling shell" in out
    assert not any(var + " set by environment" in out for var in SIX)


def test_env_files_are_our_renderer_output(simulated):
    _, keep = simulated
    positive = (keep / "positive.env").read_text()
    negative = (keep / "negative.env").read_text()
    assert positive.startswith("# Rendered by sglang-deploy from profile sandbox.")
    assert 'NCCL_PROTO="LL"' in positive and 'NCCL_DEBUG="INFO"' in positive
    assert 'NCCL_DEBUG_SUBSYS="INIT,ENV"' in positive and "SGLANG_STANDIN_REAL_NCCL" not in positive
    assert not any(var in negative for var in SIX) and 'NCCL_DEBUG="INFO"' in negative
    assert json.loads((keep / "positive-gate.json").read_text())["status_name"] == "READY"


def test_server_environment_is_the_env_file_and_the_units_basics(monkeypatch):
    monkeypatch.setenv("CANARY_FROM_THE_SHELL", "1")
    monkeypatch.setenv("NCCL_PROTO", "Simple")
    env = proof.server_environment({"NCCL_ALGO": "Ring", "PYTHONUNBUFFERED": "0"})
    assert env == {
        "PATH": proof.SYSTEMD_PATH,
        "PYTHONPATH": str(REPO / "engine-standin"),
        "PYTHONUNBUFFERED": "0",
        "NCCL_ALGO": "Ring",
    }  # the env file wins, as in systemd
    assert proof.server_environment({}, {"LD_LIBRARY_PATH": "/x"})["LD_LIBRARY_PATH"] == "/x"


def test_pass_env_refuses_nccl_variables(capsys):
    with pytest.raises(SystemExit) as exc:
        proof.main(["--simulated", "--pass-env", "NCCL_PROTO"])
    assert exc.value.code == status.USAGE
    assert "only host-runtime variables" in capsys.readouterr().err


def test_inherited_extras():
    server = {"PATH": "/bin", "NCCL_DEBUG": "INFO"}
    worker = dict(server, NCCL_CUMEM_ENABLE="0", SGLANG_RUN_ID="x", LC_CTYPE="C.UTF-8")
    assert proof.inherited_extras(worker, server) == []
    assert proof.inherited_extras(dict(worker, HOME="/root", NCCL_PROTO="LL"), server) == [
        "HOME",
        "NCCL_PROTO",
    ]
    assert proof.inherited_extras(worker, dict(server, LANG="en_US.UTF-8")) == ["LC_CTYPE"]


def nccl_lines(pid, values, host="vm", version=True):
    head = "%s:%d:%d [0] NCCL INFO " % (host, pid, pid)
    lines = [head + "NCCL version 2.28.9+cuda13.0"] if version else []
    for var, value in values.items():
        lines.append(
            head + "%s set by environment to %s%s" % (var, value, "" if var == "NCCL_P2P_LEVEL" else ".")
        )
    return lines


ONE_RANK = {k: TUNING[k] for k in ("NCCL_P2P_LEVEL", "NCCL_MAX_NCHANNELS", "NCCL_BUFFSIZE", "NCCL_NTHREADS")}


def test_positive_nccl_verdict():
    lines = nccl_lines(77, dict(ONE_RANK, NCCL_CUMEM_ENABLE="0"))
    assert proof.check_nccl_positive(nccl_confirm.confirm(lines, TUNING, 1), [77], 1).ok
    other_pid = proof.check_nccl_positive(nccl_confirm.confirm(lines, TUNING, 1), [78], 1)
    assert not other_pid.ok and "is not a scheduler pid" in other_pid.detail
    no_nthreads = {k: v for k, v in ONE_RANK.items() if k != "NCCL_NTHREADS"}
    result = proof.check_nccl_positive(nccl_confirm.confirm(nccl_lines(77, no_nthreads), TUNING, 1), [77], 1)
    assert not result.ok and "NCCL_NTHREADS" in result.detail
    wrong = proof.check_nccl_positive(
        nccl_confirm.confirm(nccl_lines(77, dict(ONE_RANK, NCCL_BUFFSIZE="4194304")), TUNING, 1), [77], 1
    )
    assert not wrong.ok and "wrong value" in wrong.detail


def test_negative_nccl_verdict_needs_the_right_reason():
    quiet = nccl_lines(77, {"NCCL_CUMEM_ENABLE": "0", "NCCL_NVLS_ENABLE": "0"})
    good = proof.check_nccl_negative(nccl_confirm.confirm(quiet, TUNING, 1), TUNING, 1)
    assert good.ok and "not logged by NCCL" in good.detail and "NCCL_CUMEM_ENABLE" in good.detail
    leaked = proof.check_nccl_negative(
        nccl_confirm.confirm(quiet + nccl_lines(77, {"NCCL_NTHREADS": "512"}, version=False), TUNING, 1),
        TUNING,
        1,
    )
    assert not leaked.ok and "NCCL reports NCCL_NTHREADS" in leaked.detail
    silent = proof.check_nccl_negative(nccl_confirm.confirm([], TUNING, 1), TUNING, 1)
    assert not silent.ok and "0 ranks logged" in silent.detail


def worker_report(code, mismatches):
    return {
        "status": code,
        "status_name": status.name(code),
        "expected": dict(TUNING),
        "message": None,
        "workers": [
            {
                "pid": 5,
                "title": "sglang::scheduler",
                "checked": 6,
                "ok": not mismatches,
                "error": None,
                "mismatches": mismatches,
            }
        ],
    }


def test_workers_negative_verdict():
    missing = [{"var": v, "expected": TUNING[v], "actual": None} for v in SIX]
    assert proof.check_workers_negative(worker_report(status.WORKER_ENV_MISMATCH, missing), TUNING).ok
    other = missing[:-1] + [{"var": "NCCL_NTHREADS", "expected": "512", "actual": "256"}]
    assert not proof.check_workers_negative(worker_report(status.WORKER_ENV_MISMATCH, other), TUNING).ok
    assert not proof.check_workers_negative(worker_report(status.READY, []), TUNING).ok
    assert proof.check_workers_positive(worker_report(status.READY, [])).ok


def test_gpu_memory_verdicts():
    apps = [ComputeApp(5, 742), ComputeApp(9, 100)]
    assert proof.check_memory_held(apps, [5], 0, 1000).ok
    assert not proof.check_memory_held([ComputeApp(9, 100)], [5], 0, 1000).ok
    fallback = proof.check_memory_held([], [5], 100, 842)
    assert fallback.ok and "lists no compute PIDs" in fallback.detail
    assert not proof.check_memory_held([], [5], 100, 100).ok
    assert proof.check_memory_released([ComputeApp(9, 100)], [5], 0, 0, True).ok
    assert not proof.check_memory_released(apps, [5], 0, 0, True).ok
    assert proof.check_memory_released([], [5], 100, 130, False).ok
    assert not proof.check_memory_released([], [5], 100, 842, False).ok


def test_parse_memory_used():
    assert proof.parse_memory_used("0, 1234\n1, 5 MiB\n") == {0: 1234, 1: 5}
    assert proof.parse_memory_used("No devices were found\n") == {}


# What real NCCL 2.28.9 printed in the scheduler of the H200 run (bench/results/gpu-env-proof-2026-11-29.md),
# trimmed: the confirmations come in another order than the stand-in's and interleaved with other
# lines, from several threads of one process; the channel count shows NCCL acting on the variable.
H200_POSITIVE = """\
vm:480:480 [0] NCCL INFO cudaDriverVersion 13000
vm:480:480 [0] NCCL INFO NCCL version 2.28.9+cuda13.0
vm:480:480 [0] NCCL INFO ncclCommInitRankConfig comm 0x41e7a5d0 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 60 \
commId 0x54fc66a60c7836aa - Init START
vm:480:480 [0] NCCL INFO NCCL_CUMEM_ENABLE set by environment to 0.
vm:480:480 [0] NCCL INFO NCCL_P2P_LEVEL set by environment to SYS
vm:480:480 [0] NCCL INFO NCCL_NVLS_ENABLE set by environment to 0.
vm:480:480 [0] NCCL INFO comm 0x41e7a5d0 rank 0 nRanks 1 nNodes 1 localRanks 1 localRank 0 MNNVL 0
vm:480:480 [0] NCCL INFO NCCL_MAX_NCHANNELS set by environment to 16.
vm:480:480 [0] NCCL INFO Channel 00/16 : 0
vm:480:480 [0] NCCL INFO NCCL_BUFFSIZE set by environment to 16777216.
vm:480:508 [0] NCCL INFO [Proxy Service] Device 0 CPU core 2
vm:480:480 [0] NCCL INFO NCCL_NTHREADS set by environment to 512.
vm:480:480 [0] NCCL INFO 16 coll channels, 16 collnet channels, 0 nvls channels, 16 p2p channels, 16 p2p channels per peer
vm:480:480 [0] NCCL INFO ncclCommInitRankConfig comm 0x41e7a5d0 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 60 \
commId 0x54fc66a60c7836aa - Init COMPLETE
[2026-11-29 10:35:27] NCCL all_reduce check: sum=1.0, expected=1.0, world_size=1, device=cuda:0, nccl=2.28.9
""".splitlines()
H200_NEGATIVE = """\
vm:539:539 [0] NCCL INFO NCCL version 2.28.9+cuda13.0
vm:539:539 [0] NCCL INFO ncclCommInitRankConfig comm 0x416b45f0 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 60 \
commId 0xff5b20054fe42a7d - Init START
vm:539:539 [0] NCCL INFO NCCL_CUMEM_ENABLE set by environment to 0.
vm:539:539 [0] NCCL INFO NCCL_NVLS_ENABLE set by environment to 0.
vm:539:539 [0] NCCL INFO Channel 00/64 : 0
vm:539:567 [0] NCCL INFO [Proxy Service UDS] Device 0 CPU core 8
vm:539:539 [0] NCCL INFO 64 coll channels, 64 collnet channels, 0 nvls channels, 64 p2p channels, 64 p2p channels per peer
vm:539:539 [0] NCCL INFO ncclCommInitRankConfig comm 0x416b45f0 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 60 \
commId 0xff5b20054fe42a7d - Init COMPLETE
""".splitlines()


def test_real_h200_nccl_lines_positive():
    report = nccl_confirm.confirm(H200_POSITIVE, TUNING, ranks_expected=1)
    result = proof.check_nccl_positive(report, [480], 1)
    assert result.ok, result.detail
    assert report.single_rank and report.ranks[0].rank.nranks == 1
    assert proof.nccl_versions(H200_POSITIVE) == ["2.28.9+cuda13.0"]
    assert proof.coll_channels(H200_POSITIVE) == {480: 16}
    channels = proof.check_channels(proof.coll_channels(H200_POSITIVE), "16")
    assert channels.ok and not channels.skipped and "pid 480: 16 coll channels" in channels.detail
    keys = proof.key_nccl_lines(H200_POSITIVE)
    assert len(keys) == 8 and keys[-1].endswith("16 p2p channels per peer")


def test_real_h200_nccl_lines_negative():
    report = nccl_confirm.confirm(H200_NEGATIVE, TUNING, ranks_expected=1)
    assert proof.check_nccl_negative(report, TUNING, 1).ok
    assert proof.coll_channels(H200_NEGATIVE) == {539: 64}
    # without the variable NCCL chose 64 channels: the behaviour check would catch that
    assert not proof.check_channels(proof.coll_channels(H200_NEGATIVE), "16").ok


def test_channel_check_skips_without_evidence():
    assert proof.check_channels({}, "16", simulated=True).skipped
    assert "NCCL logged no" in proof.check_channels({}, "16").detail
    assert proof.check_channels({1: 64}, None).skipped


def test_tp_is_every_local_gpu_unless_given():
    assert proof.proof_tp(None, 2) == 2
    assert proof.proof_tp(None, 8) == 8
    assert proof.proof_tp(None, 0) == 1  # simulated: no GPU, one rank
    assert proof.proof_tp(1, 2) == 1
    with pytest.raises(ValueError, match="only 2 GPU"):
        proof.proof_tp(4, 2)
    with pytest.raises(ValueError):
        proof.proof_tp(0, 2)


def test_proof_profile_runs_at_the_given_tp(tmp_path):
    profile, tuning = proof.proof_profile(str(tmp_path), 30000, real_nccl=True, tp=2)
    argv = profile.argv()
    assert argv[argv.index("--tp-size") + 1] == "2"
    assert tuning == TUNING
    negative, _ = proof.proof_profile(str(tmp_path), 30001, real_nccl=True, with_tuning=False, tp=2)
    assert not set(SIX) & set(negative.env)


def _two_rank_lines(drop=None):
    """What NCCL 2.28.9 logged on 2 x H200 at TP 2: all six on each rank; PROTO/ALGO (strings)
    without a trailing period."""
    lines = []
    for pid, dev in ((1354, 0), (1355, 1)):
        head = "vm:%d:%d [%d] NCCL INFO " % (pid, pid, dev)
        lines.append(head + "NCCL version 2.28.9+cuda13.0")
        for var, value in TUNING.items():
            if (pid, var) == drop:
                continue
            string = var in ("NCCL_PROTO", "NCCL_ALGO", "NCCL_P2P_LEVEL")
            lines.append(head + "%s set by environment to %s%s" % (var, value, "" if string else "."))
    return lines


def test_two_ranks_must_confirm_all_six_on_every_rank():
    ok = proof.check_nccl_positive(nccl_confirm.confirm(_two_rank_lines(), TUNING, 2), [1354, 1355], 2)
    assert ok.ok, ok.detail
    assert (
        "2 rank(s); confirmed NCCL_ALGO, NCCL_BUFFSIZE, NCCL_MAX_NCHANNELS, NCCL_NTHREADS, NCCL_P2P_LEVEL, "
        "NCCL_PROTO" in ok.detail
    )
    # With two ranks a rank that does not log NCCL_PROTO lacks it: that fails.
    missing = proof.check_nccl_positive(
        nccl_confirm.confirm(_two_rank_lines(drop=(1355, "NCCL_PROTO")), TUNING, 2), [1354, 1355], 2
    )
    assert not missing.ok and "NCCL_PROTO" in missing.detail
    one_rank_only = proof.check_nccl_positive(
        nccl_confirm.confirm(_two_rank_lines()[:7], TUNING, 2), [1354, 1355], 2
    )
    assert not one_rank_only.ok and "1 ranks logged, expected 2" in one_rank_only.detail
