"""Model staging on a sandbox node: the stand-in model copied from the controller and served;
a no-op re-run copies nothing; a truncated shard is named by verify and refused by preflight
while the old server keeps serving, and `make repair` re-stages it; a copy that dies halfway
leaves the served model alone and the next run resumes it."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from sglang_deploy.node.lib import result

from .sandbox import (  # noqa: F401 (a fixture)
    REPO_ROOT,
    deploy,
    host_tests_argv,
    profile_dir,
    ssh,
    start_deploy,
    unit_start,
    wait_for_output,
    wipe,
    write_profile,
)

pytestmark = pytest.mark.e2e

NODE = "node1"
MODEL = "/models/tiny-standin"
SHARD = "model.safetensors"
MANIFEST = f"{MODEL}/.sglang-deploy-manifest.json"
CHECK = f"python3 /opt/sglang-deploy/node/model_manifest.py check --dir {MODEL}"


def node_manifest():
    return json.loads(ssh(NODE, f"cat {MANIFEST}"))


def serving():
    out = ssh(
        NODE,
        "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:$(systemctl show "
        "-p ExecStart sglang.service | grep -o -- '--port [0-9]*' | cut -d' ' -f2)/health",
        check=False,
    )
    return out.strip() == "200"


def copies(output):
    """How many files the run copied (one progress line per file), and rsync runs."""
    return output.count(f"model {MODEL}: file "), output.count(f"model {MODEL}: rsync of ")


@pytest.fixture(scope="module")
def staged():
    subprocess.run([sys.executable, "sandbox/models/make_shard.py"], cwd=REPO_ROOT, check=True)
    wipe(NODE)
    # Back to the directory the node image pre-creates (config files, no shard, no manifest),
    # whatever earlier deploys staged into it: staged over.
    ssh(
        NODE,
        f"rm -rf {MANIFEST} {MODEL}/{SHARD} {MODEL}.sglang-deploy-staging {MODEL}.sglang-deploy-previous",
    )
    assert ssh(NODE, f"test -f {MODEL}/config.json && echo yes").strip() == "yes"
    run = deploy({NODE: "sandbox"}, limit=NODE)
    assert run.returncode == 0, run.output[-5000:]
    return run


def test_staged_from_the_controller_and_served(staged):
    local = {
        p: os.path.getsize(REPO_ROOT / "sandbox/models/tiny-standin" / p)
        for p in ("config.json", "tokenizer_config.json", SHARD)
    }
    found = {e["path"]: e["size"] for e in node_manifest()["files"]}
    assert found == local
    size = sum(local.values())
    files, rsyncs = copies(staged.output)
    assert files + rsyncs >= 1, staged.output[-3000:]
    rate = [line for line in staged.output.splitlines() if "MB/s" in line]
    print(f"\nstaging from the controller: {size / 1e6:.1f} MB, whole deploy {staged.seconds:.1f} s; {rate}")
    assert serving()


def test_noop_rerun_copies_nothing(staged):
    started = unit_start(NODE)
    begin = time.monotonic()
    again = deploy({NODE: "sandbox"}, limit=NODE)
    took = time.monotonic() - begin
    assert again.returncode == 0 and again.changed == 0, again.output[-5000:]
    assert copies(again.output) == (0, 0), again.output[-3000:]
    assert unit_start(NODE) == started
    print(f"\nno-op re-run: {took:.1f} s, 0 files copied, 0 rsync runs")


def test_truncated_shard_named_refused_and_repaired(staged, profile_dir):
    started = unit_start(NODE)
    ssh(NODE, f"truncate -s 1000000 {MODEL}/{SHARD}")
    # make verify names it (the host tests, as `make verify` runs them).
    env = {**os.environ, "SGLANG_DEPLOY_SANDBOX_PROFILES": f"{NODE}=sandbox"}
    verify = subprocess.run(
        host_tests_argv(NODE, "-q", "-k", "model-files"),
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert verify.returncode != 0 and SHARD in verify.stdout, verify.stdout[-3000:]
    # The node-side check names it too, in its result line.
    found = result.parse(ssh(NODE, CHECK, check=False).splitlines())
    assert found["result"] == "MODEL_MISMATCH" and SHARD in found["cause"]
    # A change that needs a restart: preflight refuses it, naming the shard; nothing stops.
    changed = write_profile(
        profile_dir,
        "staging-changed",
        """
        extends: {profiles}/sandbox.yml
        env:
          SGLANG_STANDIN_WARMUP_SECONDS: 2
    """,
    )
    refused = deploy({NODE: changed}, limit=NODE)
    assert refused.returncode != 0, refused.output[-5000:]
    assert "preflight failed" in refused.output and SHARD in refused.output, refused.output[-5000:]
    assert unit_start(NODE) == started and serving()
    # make repair re-stages exactly that file.
    repaired = deploy({NODE: "sandbox"}, limit=NODE, args=("--data", "repair=true"))
    assert repaired.returncode == 0, repaired.output[-5000:]
    assert f"re-staging {SHARD}" in repaired.output, repaired.output[-5000:]
    files, rsyncs = copies(repaired.output)
    assert files <= 1 and files + rsyncs >= 1, repaired.output[-3000:]
    found = result.parse(ssh(NODE, CHECK + " --deep").splitlines())
    assert found["result"] == "READY" and found["manifest"], found
    assert serving()


def test_an_interrupted_copy_resumes_and_the_old_model_serves_meanwhile(staged, profile_dir, tmp_path):
    # A new revision of the model on the controller: two more shards, the second one large.
    newer = tmp_path / "tiny-standin-v2"
    shutil.copytree(REPO_ROOT / "sandbox/models/tiny-standin", newer)
    (newer / "extra-1.bin").write_bytes(os.urandom(4 << 20))
    (newer / "extra-2.bin").write_bytes(os.urandom(96 << 20))
    profile = write_profile(
        profile_dir,
        "staging-v2",
        f"""
        extends: {{profiles}}/sandbox.yml
        model:
          source: {{{{controller: {newer}}}}}
    """,
    )
    before = node_manifest()
    started = unit_start(NODE)
    first = start_deploy({NODE: profile}, limit=NODE)
    try:
        # Per-file uploads name the file; rsync's progress counts the files left (extra-1 is
        # copied by then either way).
        seen = wait_for_output(first, ("extra-2.bin", "to-chk=1/2"), timeout=120)
    finally:
        first.kill()  # halfway, as an operator's laptop might die
        first.wait()
    assert node_manifest() == before, "the live model changed before the copy was complete"
    assert unit_start(NODE) == started and serving()
    staged_files = ssh(NODE, f"ls -a {MODEL}.sglang-deploy-staging").split()
    rerun = deploy({NODE: profile}, limit=NODE)
    assert rerun.returncode == 0, rerun.output[-5000:]
    rate = [line for line in rerun.output.splitlines() if "MB/s" in line]
    print(
        f"\ninterrupted after: {[l for l in seen.splitlines() if 'file ' in l]}; staged then: "
        f"{staged_files}; resumed: {rate}"
    )
    if "file 1/2 extra-1.bin" in seen:  # one upload per file: the re-run starts where it died
        assert "extra-1.bin" in staged_files
        assert "extra-1.bin (" not in rerun.output and "extra-2.bin (" in rerun.output, rerun.output[-3000:]
    after = {e["path"] for e in node_manifest()["files"]}
    assert {"extra-1.bin", "extra-2.bin", SHARD} <= after
    assert ssh(NODE, f"ls -d {MODEL}.sglang-deploy-staging 2>/dev/null || true").strip() == ""
    assert serving()


def test_a_new_revision_that_fails_its_gate_rolls_back_to_the_old_weights(staged, profile_dir, tmp_path):
    """A new model revision whose start fails its gate: the staged weights are swapped in only
    by the restart cycle, after preflight; the gate fails; the rollback renames the old weights
    back (the manifest's digest is the old one) and the node serves them again."""
    from sglang_deploy.node import model_manifest

    converged = deploy({NODE: "sandbox"}, limit=NODE)
    assert converged.returncode == 0, converged.output[-5000:]
    old = model_manifest.digest(node_manifest())
    newer = tmp_path / "tiny-standin-v3"
    shutil.copytree(REPO_ROOT / "sandbox/models/tiny-standin", newer)
    (newer / "extra-3.bin").write_bytes(os.urandom(1 << 20))
    failing = write_profile(
        profile_dir,
        "staging-v3-crash",
        f"""
        extends: {{profiles}}/sandbox.yml
        model:
          source: {{{{controller: {newer}}}}}
        env:
          SGLANG_STANDIN_FAIL: cuda-oom
    """,
    )
    run = deploy({NODE: failing}, limit=NODE)
    assert run.returncode != 0, run.output[-5000:]
    assert f"model: {MODEL} swapped in" in run.output, run.output[-5000:]  # by the cycle, after preflight
    assert "rolled back: serving" in run.output, run.output[-5000:]
    assert "renamed back" in run.output, run.output[-5000:]
    assert model_manifest.digest(node_manifest()) == old, "the rollback serves the new weights"
    assert "extra-3.bin" not in ssh(NODE, f"ls {MODEL}")
    assert serving()
    # The new weights wait, staged, for a retry (nothing to copy again); no previous copy left.
    assert "extra-3.bin" in ssh(NODE, f"ls {MODEL}.sglang-deploy-staging")
    assert ssh(NODE, f"ls -d {MODEL}.sglang-deploy-previous 2>/dev/null || true").strip() == ""
    # The same revision without the fault: swapped in, recorded, the old weights gone.
    good = write_profile(
        profile_dir,
        "staging-v3",
        f"""
        extends: {{profiles}}/sandbox.yml
        model:
          source: {{{{controller: {newer}}}}}
    """,
    )
    run = deploy({NODE: good}, limit=NODE)
    assert run.returncode == 0, run.output[-5000:]
    assert copies(run.output) == (0, 0), run.output[-3000:]  # staged already: nothing copied
    assert "extra-3.bin" in {e["path"] for e in node_manifest()["files"]}
    leftovers = ssh(NODE, f"ls -d {MODEL}.sglang-deploy-* 2>/dev/null || true").strip()
    assert leftovers == "", leftovers
    shown = ssh(
        NODE, "python3 /opt/sglang-deploy/node/lastgood.py show --dir /var/lib/sglang-deploy/sglang/last-good"
    )
    recorded = result.parse(shown.splitlines())["manifest"]
    assert recorded["models"][MODEL] == model_manifest.digest(node_manifest())
    assert deploy({NODE: "sandbox"}, limit=NODE).returncode == 0
