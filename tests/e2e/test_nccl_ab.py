"""`make nccl-ab` on a sandbox node (no GPU, the stand-in engine without torch): it must say it
cannot measure there, exit with its defined status and write no numbers."""

import json
import subprocess

import pytest

from sglang_deploy.node import nccl_ab

from .sandbox import REPO_ROOT, deploy

pytestmark = pytest.mark.e2e


def test_nccl_ab_on_a_node_without_gpu_says_so_and_measures_nothing(tmp_path):
    run = deploy({"node1": "sandbox"}, limit="node1")
    assert run.returncode == 0, run.output[-3000:]
    done = subprocess.run(
        ["make", "-s", "nccl-ab", "LIMIT=node1", f"NCCL_AB_ARGS=--reports {tmp_path}"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = done.stdout + done.stderr
    print(out)
    assert "Error 15" in out  # the module's no-GPU status, passed on by make
    assert (
        "node1: no-gpu: no GPU: nvidia-smi not found or failed; torch is not importable by "
        "/opt/sglang/venv/bin/python" in out
    )
    report = json.loads((tmp_path / "node1" / "latest.json").read_text())
    assert report["status"] == nccl_ab.NO_GPU
    assert "rows" not in report["details"] and "verdicts" not in report["details"]
    # The server was not touched: no --stop-server, and the no-GPU answer comes first.
    assert "STOPPING" not in out
