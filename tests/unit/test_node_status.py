"""Exit statuses shared by the on-node scripts and the controller."""
from sglang_deploy.node import status


def test_status_values_are_distinct_and_described(capsys):
    codes = [status.READY, status.UNEXPECTED, status.USAGE, status.FAILED_START, status.TIMEOUT, status.HUNG,
             status.STOP_TIMEOUT, status.WORKER_ENV_MISMATCH, status.NO_WORKERS, status.LOCKED,
             status.NO_LAST_GOOD, status.PREFLIGHT_FAILED,
             status.DRIFT, status.NOT_INSTALLED, status.NOT_INSTALLED_CONFIG, status.NO_GPU,
             status.GPUS_BUSY, status.MEASUREMENT_FAILED]
    assert len(set(codes)) == len(codes) and status.READY == 0 and status.USAGE == 2
    assert set(codes) == set(status.DESCRIPTIONS)
    assert status.name(status.HUNG) == "HUNG" and status.name(77) == "EXIT_77"
    assert status.main([]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len(codes)


def test_describe_a_code():
    assert status.describe(status.TIMEOUT) == "4 TIMEOUT: the server was not ready within the timeout"


def test_cause_line_of_script_output():
    gate_out = [
        "[   0.1s] gating sglang.service: main pid 110, http://127.0.0.1:30000, served name 'kimi', timeout 1200s",
        "[   0.6s] phase: loading weights",
        "[   2.0s] failed: cuda-oom: CUDA out of memory: torch.OutOfMemoryError: CUDA out of memory. (unit "
        "activating/auto-restart, main process exited with status 1)",
        "--- last 2 journal lines of this start ---",
        "torch.OutOfMemoryError: CUDA out of memory.",
        "sglang.service: Failed with result 'exit-code'.",
        "---",
    ]
    assert status.cause_line(gate_out).startswith("[   2.0s] failed: cuda-oom: ")
    restart_out = ["[   0.0s] stopping sglang.service: active/running, main pid 1, 3 processes",
                   "[ 120.0s] stop timeout: still there: port 30000 listening (pid 77 nginx)"]
    assert "stop timeout" in status.cause_line(restart_out)
    workers_out = ["pid 5 sglang::scheduler_TP0: 1/2 variables ok", "pid 5 sglang::scheduler_TP0: NCCL_ALGO is missing"]
    assert status.cause_line(workers_out).endswith("NCCL_ALGO is missing")
    assert status.cause_line(["", "Traceback (most recent call last):", "OSError: boom", ""]) == "OSError: boom"
    assert status.cause_line([]) == ""
