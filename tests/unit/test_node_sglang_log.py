"""SGLang log wording: phases and failure causes on realistic lines."""

import pytest

from sglang_deploy.node.lib import sglang_log

PHASE_LINES = [
    ("[2026-11-29 10:00:01 TP0] Load weight begin. avail mem=78.50 GB", "loading"),
    ("[2026-11-29 10:00:02 TP0 EP0] Load weight begin. avail mem=108.11 GB", "loading"),
    (
        "[2026-11-29 10:04:41 TP4] Capture cuda graph begin. This can take up to several minutes. avail mem=15.30 GB",
        "graphs",
    ),
    ("[2026-11-29 10:08:55] INFO:     Application startup complete.", "http"),
    (
        "[2026-11-29 10:08:55] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
        "http",
    ),
    ('[2026-11-29 10:08:56] INFO:     127.0.0.1:40532 - "GET /get_model_info HTTP/1.1" 200 OK', "warmup"),
    ("[2026-11-29 10:08:58] The server is fired up and ready to roll!", "ready"),
    ("[2026-11-29 10:00:40 TP0] Load weight end. type=DeepseekV3ForCausalLM, avail mem=21.07 GB", None),
    ("[2026-11-29 10:04:42 TP0] Capture cuda graph end. Time elapsed: 61.23 s. mem usage=1.20 GB.", None),
    (
        '[2026-11-29 10:09:00] INFO:     127.0.0.1:51234 - "GET /health HTTP/1.1" 503 Service Unavailable',
        None,
    ),
    ("Capturing batches (bs=128 avail_mem=15.21 GB):  35%|###5      | 12/34 [00:09<00:17,  1.27it/s]", None),
]


@pytest.mark.parametrize("line,phase", PHASE_LINES)
def test_phase_of(line, phase):
    assert sglang_log.phase_of(line) == phase


def test_phases_are_ordered_and_labelled():
    assert sglang_log.PHASE_KEYS == ("starting", "loading", "graphs", "http", "warmup", "ready")
    assert sglang_log.PHASE_LABELS["graphs"] == "capturing CUDA graphs"
    assert sglang_log.LONG_PHASES == {"loading", "graphs"}


def test_probe_access_lines():
    assert sglang_log.is_probe_access(
        'INFO:     127.0.0.1:51234 - "GET /health HTTP/1.1" 503 Service Unavailable'
    )
    assert sglang_log.is_probe_access('INFO:     127.0.0.1:51234 - "GET /v1/models HTTP/1.1" 200 OK')
    assert not sglang_log.is_probe_access('INFO:     127.0.0.1:40532 - "GET /get_model_info HTTP/1.1" 200 OK')
    assert not sglang_log.is_probe_access('INFO:     10.0.0.7:40532 - "POST /generate HTTP/1.1" 200 OK')


CAUSES = [
    (
        "cuda-oom",
        [
            "[2026-11-29 10:00:02 TP3] Load weight begin. avail mem=78.50 GB",
            "[2026-11-29 10:03:10 TP3] Scheduler hit an exception: Traceback (most recent call last):",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity "
            "of 94.97 GiB of which 1.12 GiB is free.",
            "[2026-11-29 10:03:10] Received sigquit from a child process. It usually means the child failed.",
            "RuntimeError: Rank 3 scheduler died during initialization (exit code: 1). If exit code is -9 (SIGKILL), "
            "a common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check.",
        ],
    ),
    (
        "nccl-error",
        [
            "[2026-11-29 10:01:00 TP1] Init torch distributed begin.",
            "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
            "ProcessGroupNCCL.cpp:3356, unhandled system error (run with NCCL_DEBUG=INFO for details), "
            "NCCL version 2.27.3",
            "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.",
        ],
    ),
    (
        "bad-argument",
        [
            "usage: launch_server.py [-h] --model-path MODEL_PATH [--tp-size TP_SIZE] [--enable-nccl-nvls]",
            "launch_server.py: error: unrecognized arguments: --speculative-num-step 3",
        ],
    ),
    (
        "bad-argument",
        [
            "launch_server.py: error: argument --tp-size/--tensor-parallel-size: invalid int value: 'eight'",
        ],
    ),
    (
        "model-missing",
        [
            "OSError: /models/Kimi-K2.5-INT4 does not appear to have a file named config.json. Checkout "
            "'https://huggingface.co//models/Kimi-K2.5-INT4/tree/None' for available files.",
        ],
    ),
    (
        "model-missing",
        [
            "OSError: Incorrect path_or_model_id: '/models/Kimi-K2.5-INT4'. Please provide either the path to a "
            "local folder or the repo_id of a model on the Hub.",
        ],
    ),
    (
        "port-in-use",
        [
            "[2026-11-29 10:08:55] INFO:     Waiting for application startup.",
            "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): address already in use",
        ],
    ),
    (
        "warmup-failed",
        [
            "[2026-11-29 10:09:59] Initialization failed. warmup error: Traceback (most recent call last):",
            "AssertionError: res=<Response [500]>, res.text='Internal Server Error'",
        ],
    ),
    (
        "host-oom",
        [
            "sglang.service: A process of this unit has been killed by the OOM killer.",
            "RuntimeError: Rank 0 scheduler died during initialization (exit code: -9). If exit code is -9 "
            "(SIGKILL), a common cause is the OS OOM killer.",
            "sglang.service: Failed with result 'oom-kill'.",
        ],
    ),
    (
        "scheduler-died",
        [
            "[2026-11-29 10:02:00 TP0] Load weight begin. avail mem=78.50 GB",
            "RuntimeError: Rank 5 scheduler died during initialization (exit code: -11). If exit code is -9 "
            "(SIGKILL), a common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check.",
        ],
    ),
    (
        "exec-failed",
        [
            "sglang.service: Failed to locate executable /opt/sglang/venv/bin/python: No such file or directory",
            "sglang.service: Failed at step EXEC spawning /opt/sglang/venv/bin/python: No such file or directory",
            "sglang.service: Main process exited, code=exited, status=203/EXEC",
        ],
    ),
    (
        "exception",
        [
            "Traceback (most recent call last):",
            '  File "/opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/server_args.py", line 812, in __post_init__',
            "ValueError: speculative_num_draft_tokens must be >= speculative_num_steps",
        ],
    ),
]


@pytest.mark.parametrize("key,lines", CAUSES, ids=[c[0] for c in CAUSES])
def test_cause_of(key, lines):
    found = sglang_log.cause_of(lines)
    assert found is not None and found[0] == key, found
    assert "\n" not in found[1] and len(found[1]) < 300


def test_scheduler_killed_by_sigkill_hints_oom_killer():
    _, text = sglang_log.cause_of(
        ["RuntimeError: Rank 0 scheduler died during initialization (exit code: -9)."]
    )
    assert "SIGKILL" in text


def test_no_cause_in_a_clean_log():
    assert sglang_log.cause_of([line for line, _ in PHASE_LINES]) is None
    assert sglang_log.cause_of([]) is None


def test_cli_on_a_file(tmp_path, capsys):
    log = tmp_path / "sglang.log"
    log.write_text("\n".join(CAUSES[0][1]) + "\n")
    assert sglang_log.main([str(log)]) == 0
    out = capsys.readouterr().out
    assert "line 1: phase: loading weights" in out and "cause: cuda-oom" in out


# Lines as SGLang 0.5.23 words them (read from the release's sources).
@pytest.mark.parametrize(
    "line, phase",
    [
        (
            "[2026-11-29 10:00:05 TP0] Capture target decode CUDA graph begin. backend=full, "
            "num_tokens_per_req=1, avail mem=60.12 GB",
            "graphs",
        ),
        (
            "[2026-11-29 10:00:05 TP0] Capture target verify CUDA graph begin. backend=full, "
            "num_tokens_per_req=4, avail mem=58.00 GB",
            "graphs",
        ),
        ('[2026-11-29 10:00:09] INFO:     127.0.0.1:40112 - "GET /model_info HTTP/1.1" 200 OK', "warmup"),
    ],
)
def test_phases_in_0_5_23_wording(line, phase):
    assert sglang_log.phase_of(line) == phase


@pytest.mark.parametrize(
    "line, cause",
    [
        (
            "sglang serve: error: ambiguous option: --cuda-graph-max-bs could match "
            "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill",
            "bad-argument",
        ),
        (
            "[2026-11-29 10:00:20] Subprocess scheduler_1 (pid=4242) crashed with exit code -9. "
            "Triggering SIGQUIT for cleanup...",
            "scheduler-died",
        ),
    ],
)
def test_causes_in_0_5_23_wording(line, cause):
    assert sglang_log.cause_of([line])[0] == cause


def test_a_dead_scheduler_is_explained_by_its_own_exception():
    lines = [
        "[2026-11-29 10:28:09 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/managers/scheduler.py", line 36',
        "safetensors_rust.SafetensorError: Error while deserializing header: MetadataIncompleteBuffer",
        "[2026-11-29 10:28:09] Received sigquit from a child process. It usually means the child failed.",
        "RuntimeError: Rank 0 scheduler died during initialization (exit code: 1). If exit code is -9 "
        "(SIGKILL), a common cause is the OS OOM killer.",
    ]
    key, text = sglang_log.cause_of(lines)
    assert key == "scheduler-died"
    assert text == (
        "a scheduler process died: safetensors_rust.SafetensorError: Error while "
        "deserializing header: MetadataIncompleteBuffer"
    )
