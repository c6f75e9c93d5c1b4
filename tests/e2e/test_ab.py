"""`make ab PROFILES=sandbox,sandbox-eagle3 HOST=node1` on a converged node: the stand-in's
baseline (80 tok/s) ranks first, its lead over EAGLE-3 2 steps (~59 tok/s, accept length ~2)
beyond the spread; the node ends serving its own profile from the same files, in rotation
(behind no router here: out and back are no-ops), and reports/ab/ holds the result."""

import json
import os
import subprocess
import time
import urllib.request

import pytest

from .sandbox import REPO_ROOT, deploy, nodes, ssh, unit_start, wipe

pytestmark = pytest.mark.e2e

FILES = "/etc/systemd/system/sglang.service /etc/sglang/sglang.env"


@pytest.fixture(scope="module")
def converged():
    wipe("node1")
    run = deploy({"node1": "sandbox"}, limit="node1")
    assert run.returncode == 0, run.output[-5000:]
    return run


def test_make_ab_ranks_the_baseline_first_and_the_node_ends_on_its_own_profile(converged):
    before = ssh("node1", f"sha256sum {FILES}")
    reports = REPO_ROOT / "reports" / "ab"
    earlier = set(reports.glob("node1-*.json")) if reports.is_dir() else set()
    started = time.monotonic()
    done = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "ab",
            "PROFILES=sandbox,sandbox-eagle3",
            "HOST=node1",
            "AB_ARGS=--repeats 3 --max-tokens 24,64",
        ],
        cwd=REPO_ROOT,
        env={**os.environ, "SGLANG_DEPLOY_SANDBOX_PROFILES": "node1=sandbox"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    seconds = time.monotonic() - started
    output = done.stdout + done.stderr
    print(output[-4000:])
    assert done.returncode == 0, output[-5000:]
    (report,) = set(reports.glob("node1-*.json")) - earlier
    found = json.loads(report.read_text())
    rows = {row["profile"]: row for row in found["trials"]}
    assert list(rows) == ["sandbox", "sandbox-eagle3"]
    assert found["verdict"]["winner"] == "sandbox" and found["verdict"]["beyond"], found["verdict"]
    assert "verdict: sandbox leads sandbox-eagle3 by" in output and "beyond the spread" in output
    assert rows["sandbox-eagle3"]["speculation"]["accept_length"] > 1.5
    for row in rows.values():
        assert row["bench"]["requests"] == 3 * 2 * 2  # two prompts (the profile names none) at two lengths
        assert row["bench"]["ttft_p95_ms"] >= row["bench"]["ttft_p50_ms"] > 0
    home = found["home"]
    assert home["serving"] and home["in_rotation"] and not home["restarted"], home
    # Its own files, its own server, gated and answering.
    assert ssh("node1", f"sha256sum {FILES}") == before
    assert "speculative-algorithm" not in ssh("node1", "cat /etc/systemd/system/sglang.service")
    assert unit_start("node1")[0] != "0"
    port = nodes()[1]["node1"]["server_port"]
    assert urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=5).status == 200
    timing = found["timing"]
    print(f"make ab: {seconds:.0f} s; {timing}")
    assert "wall time:" in output
