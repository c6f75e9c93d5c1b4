"""The A/B all-reduce sweep's pure parts (env arms, statistics, verdicts, result JSON), its guard
rails, and the controller's report files; no GPU, no torch."""

import datetime
import json
import os
import runpy
import stat
import subprocess
import sys

import pytest

from sglang_deploy.node import lock as node_lock
from sglang_deploy.node import nccl_ab
from sglang_deploy.node.lib import allreduce_stats
from sglang_deploy.node.lib import result as node_result
from sglang_deploy.plan import commands
from sglang_deploy.plan.host_plan import plan_for
from sglang_deploy.plan.hosts import REPO_ROOT
from sglang_deploy.plan.render import render_env_file
from sglang_deploy.profile.schema import load_profile
from sglang_deploy.report import nccl_ab_runner as controller

SCRIPT = REPO_ROOT / "sglang_deploy" / "node" / "nccl_ab.py"
INCIDENT = {
    "NCCL_PROTO": "LL",
    "NCCL_ALGO": "Ring",
    "NCCL_P2P_LEVEL": "SYS",
    "NCCL_MAX_NCHANNELS": "16",
    "NCCL_BUFFSIZE": "16777216",
    "NCCL_NTHREADS": "512",
}
# Per-size medians (us) of the 2 x H200 capture in shared/reference (allreduce-ab-h200x2-nvlink).
CAPTURE_A = {4096: 49.0, 65536: 41.2, 262144: 39.2, 1048576: 44.1, 16777216: 75.4, 67108864: 247.1}
CAPTURE_B = {4096: 45.9, 65536: 35.6, 262144: 28.5, 1048576: 47.1, 16777216: 171.4, 67108864: 866.0}


def test_module_imports_without_torch():
    # The node script's pure parts must load where the engine has no torch (sandbox, CI).
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.modules['torch'] = None; "
            "sys.path.insert(0, %r); import nccl_ab; print(nccl_ab.DEFAULT_SIZES[0])" % str(SCRIPT.parent),
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "4096"


def test_reads_the_env_file_our_renderer_writes():
    text = render_env_file(load_profile("baseline"), {})
    assert nccl_ab.parse_env_file(text) == INCIDENT
    assert nccl_ab.parse_env_file("# c\n\nA=\"x y\"\nB='q'\nC=plain\n") == {
        "A": "x y",
        "B": "q",
        "C": "plain",
    }


def test_arms_differ_only_in_the_env_files_tuning():
    base = {"PATH": "/bin", "NCCL_VERSION": "2.28.3-1", "NCCL_PROTO": "Simple", "LD_LIBRARY_PATH": "/x"}
    env_file = dict(INCIDENT, NCCL_DEBUG="INFO", NCCL_NVLS_ENABLE="1", CUDA_VISIBLE_DEVICES="0,1")
    arms = dict(nccl_ab.arm_environments(base, env_file))
    assert list(arms) == ["a", "b"]
    a, b = arms["a"], arms["b"]
    # the calling shell's NCCL_* reach neither arm; the env file's other variables reach both
    assert not {k for k in a if k.startswith("NCCL_")} - set(nccl_ab.HELD_FIXED)
    assert a["CUDA_VISIBLE_DEVICES"] == b["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert a["LD_LIBRARY_PATH"] == "/x"
    # NVLink multicast stays off in both, even where the env file asks for it
    assert a["NCCL_NVLS_ENABLE"] == b["NCCL_NVLS_ENABLE"] == "0"
    assert a["NCCL_CUMEM_ENABLE"] == b["NCCL_CUMEM_ENABLE"] == "0"
    assert {k: v for k, v in b.items() if k not in a} == INCIDENT
    assert "NCCL_DEBUG" not in b


def test_ablation_removes_each_variable_in_turn():
    arms = dict(nccl_ab.arm_environments({}, INCIDENT, ablate=True))
    assert list(arms) == ["a", "b"] + ["b-" + k for k in INCIDENT]
    for var in INCIDENT:
        assert var not in arms["b-" + var]
        assert set(INCIDENT) - {var} <= set(arms["b-" + var])


def test_rounds_interleave_the_arms():
    assert nccl_ab.round_orders(["a", "b"], 4) == [["a", "b"], ["b", "a"], ["a", "b"], ["b", "a"]]


def test_parse_worker_output_takes_the_last_result_line():
    text = 'NCCL WARN x\n{"other": 1}\n{"times_us": {"4096": 30.5, "65536": 31}}\nbye\n'
    assert nccl_ab.parse_worker_output(text) == {"times_us": {4096: 30.5, 65536: 31.0}}
    assert nccl_ab.parse_worker_output("Traceback\n{broken") is None


def test_sizes_parse():
    assert [nccl_ab.parse_size(s) for s in ("4096", "4K", "64KB", "16M", "1MiB")] == [
        4096,
        4096,
        65536,
        16 << 20,
        1 << 20,
    ]
    assert nccl_ab.size_label(65536) == "64 KB" and nccl_ab.size_label(16 << 20) == "16 MB"


def test_bus_bandwidth_is_nccl_tests_definition():
    stats = nccl_ab.summarize({"a": [{67108864: 247.1}]}, world=2)
    assert stats["a"][67108864]["busbw_gbps"] == pytest.approx(67108864 / 247.1e-6 / 1e9)
    eight = nccl_ab.summarize({"a": [{67108864: 247.1}]}, world=8)
    assert eight["a"][67108864]["busbw_gbps"] == pytest.approx(67108864 / 247.1e-6 / 1e9 * 1.75)
    assert nccl_ab.summarize({"a": [{4096: 20.0}]}, world=1)["a"][4096]["busbw_gbps"] is None


def test_median_and_spread_over_rounds():
    stats = nccl_ab.summarize({"a": [{4096: 30.0}, {4096: 40.0}, {4096: 20.0}]}, world=2)
    assert stats["a"][4096]["us"] == 30.0
    assert stats["a"][4096]["spread"] == pytest.approx(20.0 / 30.0)


def _stats(a_rounds, b_rounds, world=2):
    return nccl_ab.summarize({"a": a_rounds, "b": b_rounds}, world)


def test_verdict_on_the_reference_capture():
    stats = _stats([CAPTURE_A], [CAPTURE_B])
    cmp = allreduce_stats.compare(stats, "b", "a")
    assert cmp[262144]["ratio"] == pytest.approx(28.5 / 39.2)
    line = allreduce_stats.verdict("NCCL_PROTO=LL", cmp)
    assert line == (
        "NCCL_PROTO=LL: +38% at 256 KB (faster), \u221271% at 64 MB (slower); "
        "faster at 4 KB, 64 KB, 256 KB; slower at 1 MB, 16 MB, 64 MB"
    )
    assert allreduce_stats.overall_cause(cmp) == "mixed"


def test_small_differences_and_noisy_rounds_are_no_effect():
    # 3% is below MIN_EFFECT; 20% is below the 40% spread between the rounds of arm a
    stats = _stats(
        [{4096: 30.0, 65536: 25.0}, {4096: 30.0, 65536: 35.0}],
        [{4096: 30.9, 65536: 36.0}, {4096: 30.9, 65536: 36.0}],
    )
    cmp = allreduce_stats.compare(stats, "b", "a")
    assert not any(c["significant"] for c in cmp.values())
    assert allreduce_stats.verdict("all", cmp) == "all: no effect beyond noise at any size (4 KB\u201364 KB)"
    assert allreduce_stats.overall_cause(cmp) == "no-effect"


def test_report_has_rows_overall_and_per_variable_verdicts():
    rounds = {
        "a": [CAPTURE_A] * 2,
        "b": [CAPTURE_B] * 2,
        "b-NCCL_PROTO": [CAPTURE_A] * 2,  # without PROTO: as fast as the defaults
        "b-NCCL_BUFFSIZE": [CAPTURE_B] * 2,
    }  # without BUFFSIZE: no change (LL ignores it)
    stats = nccl_ab.summarize(rounds, 2)
    details = nccl_ab.build_report(
        stats,
        2,
        {"NCCL_PROTO": "LL", "NCCL_BUFFSIZE": "16777216"},
        {"host": "gpu1", "rounds": 2},
        ["b-NCCL_PROTO", "b-NCCL_BUFFSIZE"],
    )
    assert [r["bytes"] for r in details["rows"]] == sorted(CAPTURE_A)
    row = details["rows"][-1]
    assert row["ratio_b_a"] == pytest.approx(866.0 / 247.1, abs=1e-3)
    assert row["a_busbw_gbps"] == pytest.approx(271.6, abs=0.1) and row["significant"]
    groups = {v["group"]: v["verdict"] for v in details["verdicts"]}
    assert groups["all"].startswith("NCCL_PROTO=LL NCCL_BUFFSIZE=16777216: +38% at 256 KB (faster)")
    assert groups["NCCL_PROTO"].startswith("NCCL_PROTO=LL: +38% at 256 KB (faster), \u221271% at 64 MB")
    assert groups["NCCL_BUFFSIZE"].startswith("NCCL_BUFFSIZE=16777216: no effect beyond noise")
    assert details["overall"] == "mixed"
    text = "\n".join(nccl_ab.table(details))
    assert "64 MB" in text and "3.50*" in text and "verdict: NCCL_BUFFSIZE=16777216: no effect" in text
    json.loads(nccl_ab.result_line(nccl_ab.MEASURED, details["overall"], details))


def _fake_python(tmp_path, stderr="ModuleNotFoundError: No module named 'torch'"):
    fake = tmp_path / "python"
    fake.write_text('#!/bin/sh\necho "%s" >&2\nexit 1\n' % stderr)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return fake


def test_no_gpu_says_so_and_measures_nothing(tmp_path):
    env_file = tmp_path / "sglang.env"
    env_file.write_text(render_env_file(load_profile("baseline"), {}))
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path)}  # no nvidia-smi on PATH
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--env-file",
            str(env_file),
            "--python",
            str(_fake_python(tmp_path)),
            "--unit",
            "sglang.service",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == nccl_ab.EXIT[nccl_ab.NO_GPU] == 15
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["status"] == "no-gpu"
    assert result["cause"].startswith("no GPU: nvidia-smi not found or failed; torch is not importable by ")
    assert "No module named 'torch'" in result["cause"]
    assert "rows" not in result["details"] and "verdicts" not in result["details"]


@pytest.fixture
def gpu_node(monkeypatch):
    """A node with 2 GPUs and an active unit; systemctl and the measurement recorded."""
    calls = []
    monkeypatch.setattr(nccl_ab, "gpu_count", lambda: 2)
    monkeypatch.setattr(
        nccl_ab, "torch_probe", lambda python, env: (2, "torch 2.11.0, CUDA 13.0, NCCL 2.28.9")
    )
    monkeypatch.setattr(nccl_ab, "unit_active", lambda unit: True)

    def run(argv, *a, **kw):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0)

    def measure(args, arms, world):
        calls.append(("measure", [name for name, _ in arms], world))
        return {"a": [CAPTURE_A], "b": [CAPTURE_B]}, None

    monkeypatch.setattr(nccl_ab.subprocess, "run", run)
    monkeypatch.setattr(nccl_ab, "measure", measure)
    return calls


def test_refuses_while_the_server_holds_the_gpus(gpu_node, capsys):
    assert nccl_ab.main(["--unit", "sglang.service", "--nprocs", "2"]) == nccl_ab.EXIT[nccl_ab.SERVER_RUNNING]
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["status"] == "server-running" and "--stop-server" in result["cause"]
    assert gpu_node == []  # nothing stopped, nothing measured


def test_stop_server_stops_it_loudly_then_measures(gpu_node, capsys, tmp_path):
    env_file = tmp_path / "sglang.env"
    env_file.write_text(render_env_file(load_profile("baseline"), {}))
    code = nccl_ab.main(
        ["--unit", "sglang.service", "--stop-server", "--nprocs", "2", "--env-file", str(env_file)]
        + ["--lock", str(tmp_path / "run" / "sglang.lock")]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert gpu_node[0] == ["systemctl", "stop", "sglang.service"]
    assert gpu_node[1] == ("measure", ["a", "b"], 2)
    assert "STOPPING sglang.service" in out and "a deploy (make deploy) will start it again" in out
    result = json.loads(out.strip().splitlines()[-1])
    assert result["status"] == "measured" and result["cause"] == "mixed"
    assert result["details"]["stopped_server"] == "sglang.service"
    assert result["details"]["tuning"] == INCIDENT


def _lock_is_free(path):
    fd = os.open(path, os.O_RDWR)
    try:
        free = node_lock.try_lock(fd)
    finally:
        os.close(fd)
    return free


def test_stop_server_holds_the_deploy_lock_from_before_the_stop_to_the_end(
    gpu_node, capsys, tmp_path, monkeypatch
):
    path = tmp_path / "run" / "sglang.lock"
    held_while = []
    real_run = nccl_ab.subprocess.run

    def run(argv, *a, **kw):
        held_while.append((argv[:2], _lock_is_free(path)))
        return real_run(argv, *a, **kw)

    monkeypatch.setattr(nccl_ab.subprocess, "run", run)
    argv = ["--unit", "sglang.service", "--stop-server", "--nprocs", "2", "--lock", str(path)]
    assert nccl_ab.main([*argv, "--lock-holder", "nccl-ab alice"]) == 0
    assert held_while == [(["systemctl", "stop"], False)]  # the stop under the lock
    assert _lock_is_free(path)  # given back at the end


def test_stop_server_stops_nothing_while_a_deploy_holds_the_lock(gpu_node, capsys, tmp_path):
    path = tmp_path / "run" / "sglang.lock"
    deploy = subprocess.Popen(
        [
            sys.executable,
            str(SCRIPT.parent / "lock.py"),
            "--path",
            str(path),
            "--wait",
            "5",
            "--holder",
            "bob",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert json.loads(deploy.stdout.readline())["event"] == "locked"
        argv = ["--unit", "sglang.service", "--stop-server", "--nprocs", "2", "--lock", str(path)]
        code = nccl_ab.main([*argv, "--lock-wait", "0.3"])
    finally:
        deploy.stdin.close()
        deploy.wait(10)
    out = capsys.readouterr().out.strip().splitlines()
    assert code == nccl_ab.EXIT[nccl_ab.LOCKED] == 9
    assert gpu_node == []  # nothing stopped, nothing measured
    busy = json.loads(out[-2])
    assert busy["event"] == "busy" and busy["holder"].startswith("bob since ")
    assert json.loads(out[-1])["status"] == "locked"


def test_a_lock_that_cannot_be_taken_stops_nothing(gpu_node, capsys, tmp_path):
    (tmp_path / "run").write_text("")  # not a directory: the lock cannot be made
    argv = ["--unit", "sglang.service", "--stop-server", "--nprocs", "2"]
    assert (
        nccl_ab.main([*argv, "--lock", str(tmp_path / "run" / "sglang.lock")]) == nccl_ab.EXIT[nccl_ab.FAILED]
    )
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["cause"].startswith("cannot take the deploy lock ") and gpu_node == []


def test_stop_server_needs_the_lock(gpu_node):
    with pytest.raises(SystemExit):
        nccl_ab.main(["--unit", "sglang.service", "--stop-server"])
    assert gpu_node == []


def test_more_ranks_than_gpus_fails(gpu_node, capsys):
    assert nccl_ab.main(["--nprocs", "4"]) == nccl_ab.EXIT[nccl_ab.FAILED]
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["status"] == "failed"


# -- controller ---------------------------------------------------------------------------------


def _plan(profile="baseline"):
    data = {
        k: v
        for k, v in runpy.run_path(str(REPO_ROOT / "group_data" / "all.py")).items()
        if not k.startswith("_")
    }
    data.update(profile=profile, ssh_hostname="gpu1")
    return plan_for(data)


def test_controller_runs_the_node_script_with_the_plans_files():
    plan = _plan()
    args = controller.node_args("gpu1", plan, ablate=True, stop_server=True, rounds=5)
    assert args[:8] == [
        "--env-file",
        plan.env_path,
        "--python",
        plan.profile.engine.venv + "/bin/python",
        "--nprocs",
        "8",
        "--unit",
        plan.unit,
    ]
    assert args[-4:] == ["--ablate", "--stop-server", "--rounds", "5"]
    # Stopping the server takes the deploy's own lock (and waits for a detached restart cycle).
    assert args[args.index("--lock") + 1] == plan.lock_path
    assert args[args.index("--cycles-dir") + 1] == commands.cycles_dir_of_lock(plan.lock_path)
    assert args[args.index("--lock-wait") + 1] == f"{plan.settings.deploy_lock_wait_s:g}"
    assert "--lock" not in controller.node_args("gpu1", plan)
    cmd = plan.scripts.nccl_ab(*args)  # from the scripts directory every deploy fills
    assert cmd.startswith(f"python3 {plan.scripts.directory}/nccl_ab.py --env-file ")
    assert cmd.endswith(" --ablate --stop-server --rounds 5")


def test_controller_writes_json_and_table(tmp_path):
    stats = nccl_ab.summarize({"a": [CAPTURE_A], "b": [CAPTURE_B]}, 2)
    details = nccl_ab.build_report(stats, 2, INCIDENT, {"host": "gpu1", "rounds": 1})
    lines = ["round 1 arm a: ...", nccl_ab.result_line(nccl_ab.MEASURED, "mixed", details), ""]
    result = node_result.parse(lines)
    result["details"]["lint"] = controller.lint_notes(INCIDENT)
    now = datetime.datetime(2026, 11, 30, 12, 0, tzinfo=datetime.timezone.utc)
    path = controller.write_reports("gpu1", result, tmp_path, now=now)
    assert path == tmp_path / "gpu1" / "2026-11-30T120000Z.json"
    assert json.loads(path.read_text()) == json.loads((tmp_path / "gpu1" / "latest.json").read_text())
    text = (tmp_path / "gpu1" / "latest.txt").read_text()
    assert "verdict: NCCL_PROTO=LL" in text
    assert "lint: warning: NCCL_BUFFSIZE: has no effect with NCCL_PROTO=LL" in text


def test_controller_reports_a_node_without_gpu(tmp_path):
    result = node_result.parse(
        ['{"status": "no-gpu", "cause": "no GPU: nvidia-smi not found", "details": {"host": "node1"}}']
    )
    controller.write_reports("node1", result, tmp_path)
    assert (tmp_path / "node1" / "latest.txt").read_text() == "node1: no-gpu: no GPU: nvidia-smi not found\n"


def test_exit_statuses_are_the_ones_status_py_defines():
    from sglang_deploy.node.lib import status

    assert nccl_ab.EXIT == {
        nccl_ab.MEASURED: status.READY,
        nccl_ab.NO_GPU: status.NO_GPU,
        nccl_ab.SERVER_RUNNING: status.GPUS_BUSY,
        nccl_ab.FAILED: status.MEASUREMENT_FAILED,
        nccl_ab.LOCKED: status.LOCKED,
    }
