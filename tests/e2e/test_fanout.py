"""Fan-out on three sandbox nodes: the model staged node to node in a tree (node1 and node2
from the controller, node3 from node1), every copy verified; a parent whose own copy fails
its check is nobody's source and its child copies from the sibling; a parent killed
mid-transfer is replaced and the child's copy resumes from another; nothing half-staged is
ever read or swapped in, and no key is left on any node.

Needs `make sandbox NODES=3`."""

import json
import shutil
import subprocess
import sys
import time

import pytest

from sglang_deploy.node import model_manifest
from sglang_deploy.node.lib import result

from .sandbox import (  # noqa: F401 (a fixture)
    REPO_ROOT,
    deploy,
    profile_dir,
    ssh,
    start_deploy,
    wait_for_output,
    write_profile,
)

pytestmark = pytest.mark.e2e

NODES = ("node1", "node2", "node3")
MODEL = "/models/fanout-e2e"
EXTRA = "extra.bin"
CHECK = f"python3 /opt/sglang-deploy/node/model_manifest.py check --dir {MODEL} --deep"


@pytest.fixture(scope="module")
def model(tmp_path_factory, profile_dir):
    subprocess.run([sys.executable, "sandbox/models/make_shard.py"], cwd=REPO_ROOT, check=True)
    directory = tmp_path_factory.mktemp("fanout") / "model"
    shutil.copytree(REPO_ROOT / "sandbox/models/tiny-standin", directory)
    with open(directory / EXTRA, "wb") as f:  # large enough to be caught mid-copy
        for index in range(64):
            f.write(bytes([index]) * (1 << 20))
    profile = write_profile(
        profile_dir,
        "fanout",
        f"""
        extends: {{profiles}}/sandbox.yml
        model:
          path: {MODEL}
          source: {{{{controller: {directory}}}}}
    """,
    )
    return {
        "dir": directory,
        "profile": profile,
        "digest": model_manifest.digest(model_manifest.build(str(directory))),
    }


def wipe_model():
    for node in NODES:
        ssh(node, f"rm -rf {MODEL} {MODEL}.sglang-deploy-staging {MODEL}.sglang-deploy-old")


def live_digest(node):
    text = ssh(node, f"cat {MODEL}/{model_manifest.MANIFEST_NAME} 2>/dev/null || true")
    return model_manifest.digest(json.loads(text)) if text.strip() else None


def deep_check(node):
    return result.parse(ssh(node, CHECK, check=False).splitlines())


def fanout_keys(node):
    """Our authorized_keys lines (the login user's and root's) and key directories on a node."""
    lines = ssh(node, "cat /root/.ssh/authorized_keys /home/*/.ssh/authorized_keys 2>/dev/null || true")
    dirs = ssh(node, "ls -d /run/sglang-deploy/fanout-* 2>/dev/null || true").split()
    return [line for line in lines.splitlines() if "sglang-deploy-fanout:" in line], dirs


def run(model, *data):
    args = []
    for item in ("fanout=on", *data):
        args += ["--data", item]
    return deploy(dict.fromkeys(NODES, model["profile"]), args=tuple(args))


def assert_clean():
    for node in NODES:
        assert fanout_keys(node) == ([], []), node


def test_the_model_goes_node_to_node_and_every_copy_is_verified(model):
    wipe_model()
    staged = run(model)
    assert staged.returncode == 0, staged.output[-5000:]
    assert "level 1: node1 <- controller, node2 <- controller" in staged.output, staged.output[-5000:]
    assert "level 2: node3 <- node1" in staged.output
    assert "copying from node1" in staged.output
    for node in NODES:
        assert live_digest(node) == model["digest"], node
        assert deep_check(node)["result"] == "READY", node
        assert ssh(node, f"ls -d {MODEL}.sglang-deploy-staging 2>/dev/null || true").strip() == ""
    assert_clean()
    again = run(model)  # everything holds it: nothing copied, no key handed out
    assert again.returncode == 0 and again.changed == 0, again.output[-5000:]
    assert "level " not in again.output
    assert_clean()


def test_a_parent_whose_copy_fails_its_check_serves_nobody_its_child_gets_another_source(model):
    wipe_model()
    # node1's staging already holds extra.bin at its size but other bytes (a disk that went
    # bad, a copy by hand): the controller sends nothing for it, and the check refuses it.
    ssh(
        "node1",
        f"mkdir -p {MODEL}.sglang-deploy-staging && "
        f"head -c {64 << 20} /dev/zero > {MODEL}.sglang-deploy-staging/{EXTRA}",
    )
    staged = run(model)
    assert "level 2: node3 <- node1" in staged.output, staged.output[-5000:]
    assert "node1 cannot serve" in staged.output, staged.output[-5000:]
    # node3 never read node1's copy: not the refused one, nor the one node1's retry verified.
    assert not [
        line for line in staged.output.splitlines() if "node3" in line and "copying from node1" in line
    ]
    # node1 retried from another source (the bad file removed first): every node verified.
    assert staged.returncode == 0, staged.output[-5000:]
    for node in NODES:
        assert live_digest(node) == model["digest"] and deep_check(node)["result"] == "READY", node
    assert_clean()


def test_a_parent_killed_mid_transfer_is_replaced_and_the_child_resumes_from_another(model):
    wipe_model()
    # node to node at 2 MB/s: node3's 64 MB take about 30 s, long enough to cut.
    process = start_deploy(
        dict.fromkeys(NODES, model["profile"]),
        args=("--data", "fanout=on", "--data", "fanout_bwlimit_kib=2048"),
    )
    try:
        seen = wait_for_output(process, "copying from node1", timeout=300)
        time.sleep(5)  # node3's rsync is reading from node1 now
        # Only verified copies are served: node1 holds this run's key, node3 (half-staged) none.
        # (a run killed earlier may have left its grant too: the next run's cleanup removes it)
        assert len(fanout_keys("node1")[0]) >= 1 and fanout_keys("node3")[0] == []
        assert live_digest("node3") is None
        # node1's side of the copy dies (as its sshd or the node would).
        # ([r]: this command's own shell carries the pattern in its command line too)
        ssh("node1", "pkill -9 -f '[r]sync --server --sender'")
        rest, _ = process.communicate(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    output = seen + (rest or "")
    assert process.returncode == 0, output[-5000:]
    assert "copies from node2 instead" in output, output[-5000:]
    for node in NODES:
        assert live_digest(node) == model["digest"] and deep_check(node)["result"] == "READY", node
    assert_clean()
