"""Preflight's GPU check counts what SGLang 0.5.23's layout takes on the node (tp × pp × dp
replicas, this node's share of nnodes, from --base-gpu-id every --gpu-id-step) against the GPUs
CUDA_VISIBLE_DEVICES leaves it; `make verify` and the plan count with the same function."""

import json
import shlex
import socket
from types import SimpleNamespace

import pytest

from sglang_deploy.node import preflight
from sglang_deploy.node.lib import result, status
from sglang_deploy.plan.host_plan import plan_for
from sglang_deploy.plan.hosts import deploy_defaults
from sglang_deploy.verify import gpu_checks
from sglang_deploy.verify.verdict import FAILED, OK

# nvidia-smi -L on an eight-GPU node.
LIST_8 = "".join(
    f"GPU {i}: NVIDIA H200 (UUID: GPU-{i}a6b7c8d-0000-1111-2222-33334444555{i})\n" for i in range(8)
)
NODE_8 = [(i, f"GPU-{i}a6b7c8d-0000-1111-2222-33334444555{i}") for i in range(8)]  # parse_gpu_list(LIST_8)


def fake_nvidia_smi(tmp_path, listing=LIST_8, rc=0):
    """An nvidia-smi that answers -L with ``listing`` (and exits ``rc``)."""
    path = tmp_path / "nvidia-smi"
    path.write_text(f"#!/bin/sh\ncat <<'EOF'\n{listing}EOF\nexit {rc}\n")
    path.chmod(0o755)
    return str(path)


def test_nvidia_smi_list_is_read_with_uuids_and_mig_devices():
    text = LIST_8[: LIST_8.index("GPU 2")] + "  MIG 1g.18gb     Device  0: (UUID: MIG-5c1e)\n"
    assert preflight.parse_gpu_list(text) == [
        (0, "GPU-0a6b7c8d-0000-1111-2222-333344445550"),
        (1, "GPU-1a6b7c8d-0000-1111-2222-333344445551"),
        (None, "MIG-5c1e"),
    ]
    assert preflight.parse_gpu_list("No devices were found\n") == []
    assert preflight.parse_gpu_list(LIST_8) == NODE_8


@pytest.mark.parametrize(
    "argv, visible, verdict, text",
    [
        (
            ["--tp-size", "4", "--dp-size", "2", "--base-gpu-id", "2"],
            None,
            "failed",
            "tp 4 × dp 2 = 8 GPUs from GPU 2 (base-gpu-id 2) need GPUs 2..9; the node has 8 (0..7)",
        ),
        (
            ["--tp-size", "8", "--data-parallel-size", "2"],
            None,
            "failed",
            "tp 8 × dp 2 = 16 GPUs need GPUs 0..15; the node has 8 (0..7)",
        ),
        (
            ["--tp-size", "4", "--dp-size", "2"],
            None,
            "ok",
            "tp 4 × dp 2 = 8 GPUs need GPUs 0..7; the node has 8 (0..7)",
        ),
        # Attention DP runs inside the tp group: no more GPUs.
        (
            ["--tp-size", "8", "--dp-size", "8", "--enable-dp-attention"],
            None,
            "ok",
            "tp 8 = 8 GPUs need GPUs 0..7; the node has 8 (0..7)",
        ),
        (
            ["--tp-size", "8", "--attn-dp-size", "4"],
            None,
            "ok",
            "tp 8 = 8 GPUs need GPUs 0..7; the node has 8 (0..7)",
        ),
        (
            ["--tp-size", "4", "--pp-size", "2", "--base-gpu-id", "1"],
            None,
            "failed",
            "tp 4 × pp 2 = 8 GPUs from GPU 1 (base-gpu-id 1) need GPUs 1..8; the node has 8 (0..7)",
        ),
        (
            ["--tp-size", "4", "--gpu-id-step", "2"],
            None,
            "ok",
            "tp 4 = 4 GPUs spaced 2 apart (gpu-id-step 2) need GPUs 0, 2, 4, 6; the node has 8 (0..7)",
        ),
        (
            ["--tp-size", "4", "--gpu-id-step", "2", "--base-gpu-id", "1"],
            None,
            "ok",
            "tp 4 = 4 GPUs from GPU 1 (base-gpu-id 1) spaced 2 apart (gpu-id-step 2) need GPUs 1, 3, 5, 7; "
            "the node has 8 (0..7)",
        ),
        (
            ["--tp-size", "4", "--gpu-id-step", "3"],
            None,
            "failed",
            "tp 4 = 4 GPUs spaced 3 apart (gpu-id-step 3) need GPUs 0, 3, 6, 9; the node has 8 (0..7)",
        ),
        # Each node holds its share of a multi-node server.
        (
            ["--tp-size", "16", "--nnodes", "2", "--node-rank", "1"],
            None,
            "ok",
            "tp 16 / 2 nodes = 8 GPUs need GPUs 0..7; the node has 8 (0..7)",
        ),
        (
            ["--tp-size", "8", "--pp-size", "4", "--nnodes", "2"],
            None,
            "failed",
            "tp 8 × pp 4 / 2 nodes = 16 GPUs need GPUs 0..15; the node has 8 (0..7)",
        ),
        # CUDA_VISIBLE_DEVICES limits and renumbers: SGLang's GPU 0 is its first entry.
        (
            ["--tp-size", "8"],
            "4,5,6,7",
            "failed",
            "tp 8 = 8 GPUs need GPUs 0..7; CUDA_VISIBLE_DEVICES=4,5,6,7 makes 4 of the node's 8 visible, as 0..3",
        ),
        (
            ["--tp-size", "2", "--base-gpu-id", "1"],
            "6,7,GPU-0a6b",
            "ok",
            "tp 2 = 2 GPUs from GPU 1 (base-gpu-id 1) need GPUs 1..2; "
            "CUDA_VISIBLE_DEVICES=6,7,GPU-0a6b makes 3 of the node's 8 visible, as 0..2",
        ),
        (
            ["--tp-size", "2", "--base-gpu-id", "2"],
            "6,7,GPU-0a6b",
            "failed",
            "tp 2 = 2 GPUs from GPU 2 (base-gpu-id 2) need GPUs 2..3; "
            "CUDA_VISIBLE_DEVICES=6,7,GPU-0a6b makes 3 of the node's 8 visible, as 0..2",
        ),
        (
            ["--tp-size", "2"],
            "7,8",
            "failed",
            "CUDA_VISIBLE_DEVICES=7,8 names 8, which nvidia-smi does not list; the node has 8 (0..7)",
        ),
        (
            ["--tp-size", "2"],
            "GPU-ffff,1",
            "failed",
            "CUDA_VISIBLE_DEVICES=GPU-ffff,1 names GPU-ffff, which nvidia-smi does not list; the node has 8 (0..7)",
        ),
        (
            ["--tp-size", "1"],
            "",
            "failed",
            "tp 1 = 1 GPU needs GPU 0; CUDA_VISIBLE_DEVICES= makes 0 of the node's 8 visible, as none",
        ),
        # pp ranks with a gpu-id-step land on one GPU (SGLang adds pp rank × tp, not × step).
        (
            ["--tp-size", "2", "--pp-size", "2", "--gpu-id-step", "2"],
            None,
            "failed",
            "tp 2 × pp 2 = 4 GPUs spaced 2 apart (gpu-id-step 2) need GPUs 0, 2, 4; the node has 8 (0..7); "
            "GPU 2 would hold two workers (pp ranks with gpu-id-step)",
        ),
    ],
)
def test_the_layout_against_the_node(argv, visible, verdict, text):
    assert preflight.check_gpu_layout(argv, visible, NODE_8) == (verdict, text)


def test_the_last_spelling_wins_as_in_argparse():
    layout = preflight.gpu_layout(["--tp-size", "2", "--tensor-parallel-size=4", "--dp-size", "3"])
    assert (layout["tp"], layout["dp"], layout["gpus"]) == (4, 3, list(range(12)))


def test_check_gpus_reads_nvidia_smi_on_the_node(tmp_path):
    smi = fake_nvidia_smi(tmp_path)
    argv = ["--tp-size", "4", "--dp-size", "2", "--base-gpu-id", "2"]
    assert preflight.check_gpus(argv, None, smi) == (
        "failed",
        "tp 4 × dp 2 = 8 GPUs from GPU 2 (base-gpu-id 2) need GPUs 2..9; the node has 8 (0..7)",
    )
    assert preflight.check_gpus(["--tp-size", "4"], "0,1,2,3", smi)[0] == "ok"
    verdict, text = preflight.check_gpus(
        ["--tp-size", "4"], None, fake_nvidia_smi(tmp_path, "NVML gone\n", rc=9)
    )
    assert (verdict, text) == ("failed", "tp 4 = 4 GPUs need GPUs 0..3; nvidia-smi -L failed: NVML gone")
    verdict, text = preflight.check_gpus(["--tp-size", "4", "--dp-size", "2"], None, str(tmp_path / "none"))
    assert (verdict, text) == (
        "skipped",
        "no GPU: nvidia-smi not found (tp 4 × dp 2 = 8 GPUs need GPUs 0..7 on a GPU node)",
    )


def test_preflight_refuses_the_layout_before_anything_stops(tmp_path, monkeypatch, capsys):
    """The script as the node runs it: the profile env's CUDA_VISIBLE_DEVICES as a flag, the
    failure in its lines and its result's cause."""
    fake_nvidia_smi(tmp_path)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = ["--model-path", str(tmp_path), "--port", str(port), "--tp-size", "4"]
    code = preflight.main(
        ["--unit", "sglang.service", "--argv-json", json.dumps(argv), "--no-argv"]
        + ["--disk-path", str(tmp_path), "--min-free-gib", "0", "--cuda-visible-devices", "6,7"]
    )
    out = capsys.readouterr().out
    failure = (
        "tp 4 = 4 GPUs need GPUs 0..3; CUDA_VISIBLE_DEVICES=6,7 makes 2 of the node's 8 visible, as 0..1"
    )
    assert f"preflight failed: {failure}\n" in out
    found = result.parse(out.splitlines())
    assert code == found["status"] == status.PREFLIGHT_FAILED and failure in found["cause"]


def _plan(**overrides):
    data = {**deploy_defaults(), "profile": "sandbox", "profile_overrides": overrides}
    return plan_for(data, operator_env={})


def test_the_plan_counts_replicas_and_passes_cuda_visible_devices():
    plan = _plan(server_args={"dp-size": 2}, env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    assert plan.scripts.gpus_needed() == 4  # tp 2 × dp 2
    words = shlex.split(plan.scripts.preflight())
    assert words[words.index("--cuda-visible-devices") + 1] == "0,1,2,3"
    assert "--gpus-needed" not in words
    assert json.loads(words[words.index("--argv-json") + 1])[-2:] == ["--dp-size", "2"]
    assert "--cuda-visible-devices" not in _plan().scripts.preflight()


class FakeNode:
    """What the verify check asks a node over testinfra: one answer per command."""

    def __init__(self, answers):
        self.answers = answers

    def run(self, command):
        rc, stdout = self.answers.get(command, (0, ""))
        return SimpleNamespace(rc=rc, stdout=stdout, stderr="")


def _verify_gpus(plan):
    gpus = [{"index": i, "name": "NVIDIA H200", "bus_id": f"00000000:0{i}:00.0"} for i in range(8)]
    passport = {"gpus": gpus, "driver_version": "580.159.04"}
    collect = f"python3 {plan.scripts.directory}/passport.py collect"
    node = FakeNode(
        {
            collect: (0, json.dumps({"status": status.READY, "passport": passport})),
            "nvidia-smi -L": (0, LIST_8),
        }
    )
    return gpu_checks.gpus.__wrapped__(node, plan)[0]


def test_make_verify_judges_the_same_layout():
    plan = _plan(server_args={"tp-size": 8, "dp-size": 2})
    found = _verify_gpus(plan)
    assert (found.state, found.detail) == (
        FAILED,
        "8 x NVIDIA H200, driver 580.159.04; tp 8 × dp 2 = 16 GPUs need GPUs 0..15; the node has 8 (0..7)",
    )
    assert _verify_gpus(_plan(server_args={"tp-size": 8})).state == OK
