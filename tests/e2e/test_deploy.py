"""Molecule-style scenario on two sandbox nodes, in order: converge (two profiles in one run)
→ idempotent re-run → verify → one NCCL value changed → a comment changed → a crashing start.
"""

import json

import pytest

from sglang_deploy.node.lib import env_records, status
from sglang_deploy.node.lib.installed import canonical
from sglang_deploy.plan.commands.unit import NodeScripts
from sglang_deploy.plan.hosts import deploy_defaults
from sglang_deploy.plan.locks import load_lock, lock_path
from sglang_deploy.profile.schema import load_profile
from sglang_deploy.report.manifest import diff as manifest_diff

from .sandbox import (  # noqa: F401 (a fixture)
    DEPLOYED_PATHS,
    REPO_ROOT,
    deploy,
    nodes,
    profile_dir,
    ssh,
    start_deploy,
    unit_start,
    verify,
    wait_for_output,
    wipe,
    write_profile,
)

pytestmark = pytest.mark.e2e

PROFILES = {"node1": "sandbox", "node2": "sandbox-eagle3"}


@pytest.fixture(scope="module")
def converged():
    for node in PROFILES:
        wipe(node)
    run = deploy(PROFILES)
    assert run.returncode == 0, run.output[-5000:]
    print(f"first converge of 2 nodes: {run.seconds:.1f}s")
    return run


def test_converge_two_profiles_in_one_run(converged):
    assert converged.changed > 0
    assert "speculative-algorithm" in ssh("node2", "cat /etc/systemd/system/sglang.service")
    assert "speculative-algorithm" not in ssh("node1", "cat /etc/systemd/system/sglang.service")
    recorded = json.loads((REPO_ROOT / "reports/manifests/node2/latest.json").read_text())
    assert recorded["profile"] == "sandbox-eagle3"
    # Every distribution of the lock the node runs: the stand-in and its closure.
    lock = load_lock(lock_path(load_profile("sandbox-eagle3").engine))
    recorded_names = {canonical(d["name"]): d["version"] for d in recorded["distributions"]}
    assert recorded_names == {key: entry.version for key, entry in lock.entries.items()}
    assert recorded_names["sglang"] == "0.5.23+sandbox" and "fastapi" in recorded_names
    # Both profiles run one lock, each node built its venv at its own moment: the same bytes.
    first = json.loads((REPO_ROOT / "reports/manifests/node1/latest.json").read_text())
    assert manifest_diff(first, recorded) == []


def test_rerun_changes_nothing_and_restarts_nothing(converged):
    before = {node: unit_start(node) for node in PROFILES}
    run = deploy(PROFILES)
    assert run.returncode == 0, run.output[-5000:]
    assert run.changed == 0, run.output[-5000:]
    assert {node: unit_start(node) for node in PROFILES} == before
    print(f"no-op re-run, 2 nodes: {run.seconds:.1f}s")


def test_verify_passes_after_converge(converged):
    result = verify(PROFILES)
    assert result.returncode == 0, result.stdout[-5000:]
    assert "skipped" not in result.stdout.splitlines()[-1], result.stdout[-2000:]


def test_changing_one_nccl_value_restarts_once_and_reaches_workers(converged, profile_dir):
    changed = write_profile(
        profile_dir,
        "node1",
        """
        extends: {profiles}/sandbox.yml
        env:
          NCCL_NTHREADS: 256
    """,
    )
    profiles = {**PROFILES, "node1": changed}
    before = {node: unit_start(node) for node in PROFILES}
    run = deploy(profiles)
    assert run.returncode == 0, run.output[-5000:]
    after = {node: unit_start(node) for node in PROFILES}
    assert after["node1"][0] != before["node1"][0], "node1 did not restart"
    assert after["node1"][2] == before["node1"][2], "systemd restarted it on its own"
    assert after["node2"] == before["node2"], "node2 restarted although its profile is unchanged"
    print(f"change + restart + gate, 1 of 2 nodes: {run.seconds:.1f}s")
    result = verify(profiles)
    assert result.returncode == 0, result.stdout[-5000:]
    main_pid = after["node1"][0]
    scheduler = ssh("node1", f"pgrep -P {main_pid} -f sglang::scheduler_TP0").strip()
    record = json.loads(ssh("node1", f"cat {env_records.records_dir('sglang')}/{scheduler}.json"))
    assert record["variables"]["NCCL_NTHREADS"] == "256"


def test_a_comment_only_change_restarts_nothing(converged, profile_dir):
    same = write_profile(
        profile_dir,
        "node1",
        """
        # The same profile file as before; only the comments are new.
        extends: {profiles}/sandbox.yml
        env:
          NCCL_NTHREADS: 256  # a comment
    """,
    )
    before = unit_start("node1")
    run = deploy({**PROFILES, "node1": same})
    assert run.returncode == 0, run.output[-5000:]
    assert run.changed == 0, run.output[-5000:]
    assert unit_start("node1") == before


def test_a_crashing_start_fails_the_deploy_in_seconds_with_the_journal(converged, profile_dir):
    crashing = write_profile(
        profile_dir,
        "crash",
        """
        extends: {profiles}/sandbox.yml
        env:
          SGLANG_STANDIN_FAIL: crash-load
          SGLANG_STANDIN_FAIL_AFTER_SECONDS: 1
    """,
    )
    run = deploy({"node1": crashing}, limit="node1")
    assert run.returncode != 0
    assert "[node1] readiness gate failed" in run.output, run.output[-5000:]
    assert "scheduler-died: a scheduler process died: safetensors_rust.SafetensorError" in run.output, (
        run.output[-5000:]
    )
    assert "Traceback" in run.output, "no journal excerpt in the deploy's output"
    # The last configuration that passed (the NCCL_NTHREADS=256 profile) serves again.
    assert "[node1] rolled back: serving node1 again" in run.output, run.output[-5000:]
    assert verify({**PROFILES, "node1": str(profile_dir / "node1.yml")}).returncode == 0
    # The readiness timeout is 120 s: a dead start must be reported long before that.
    assert run.seconds < 60, f"took {run.seconds:.0f}s to notice a crashed start"
    print(f"crashing start reported after {run.seconds:.1f}s (deploy wall time)")
    # Back to the good profile for whatever runs next.
    restored = deploy(PROFILES)
    assert restored.returncode == 0, restored.output[-5000:]


def test_rollback_can_be_switched_off(converged, profile_dir):
    crashing = write_profile(
        profile_dir,
        "crash-no-rollback",
        """
        extends: {profiles}/sandbox.yml
        env:
          SGLANG_STANDIN_FAIL: cuda-oom
    """,
    )
    run = deploy({"node1": crashing}, limit="node1", args=("--data", "rollback=false"))
    assert run.returncode != 0
    assert "cuda-oom" in run.output and "rollback disabled" in run.output, run.output[-5000:]
    assert deploy(PROFILES).returncode == 0


def test_a_first_deploy_has_nothing_to_roll_back_to(converged, profile_dir):
    crashing = write_profile(
        profile_dir,
        "warmup-fails",
        """
        extends: {profiles}/sandbox.yml
        env:
          SGLANG_STANDIN_FAIL: warmup-fails
    """,
    )
    wipe("node1")
    run = deploy({"node1": crashing}, limit="node1")
    assert run.returncode != 0
    assert "warmup-failed" in run.output, run.output[-5000:]
    assert "nothing to roll back to" in run.output, run.output[-5000:]
    assert deploy(PROFILES).returncode == 0


def test_a_second_deploy_waits_for_the_lock_and_a_killed_deploy_leaves_none(converged, profile_dir):
    slow = write_profile(
        profile_dir,
        "slow",
        """
        extends: {profiles}/sandbox.yml
        env:
          SGLANG_STANDIN_LOAD_SECONDS: 30
    """,
    )
    first = start_deploy({"node1": slow}, limit="node1")
    try:
        wait_for_output(first, "phase: loading weights", timeout=60)
        second = deploy(PROFILES, limit="node1", args=("--data", "deploy_lock_wait_s=2"))
        assert second.returncode != 0
        assert "deploy lock" in second.output and "held by" in second.output, second.output[-3000:]
        assert f"pid {first.pid}" in second.output, second.output[-3000:]
    finally:
        first.kill()  # mid-gate, as an operator's laptop might die
        first.wait()
    # The killed deploy's lock went with it; its restart cycle, detached from the session, goes
    # on: the next deploy waits for that, following it, not for a lock.
    third = deploy(PROFILES, limit="node1", args=("--data", "deploy_lock_wait_s=90"))
    assert third.returncode == 0, third.output[-5000:]
    assert "for the deploy lock, held by" not in third.output, third.output[-3000:]
    assert "the restart of a previous run" in third.output, third.output[-3000:]


@pytest.mark.parametrize(
    "body, reason",
    [
        (
            "model:\n  path: /models/not-staged\n  source: path\n",  # on the node by hand: not there
            "model path /models/not-staged is not a directory on this node",
        ),
    ],
)
def test_preflight_refuses_a_bad_configuration_and_the_server_keeps_serving(
    converged, profile_dir, body, reason
):
    bad = write_profile(profile_dir, "bad", "extends: {profiles}/sandbox.yml\n" + body)
    before = unit_start("node1")
    run = deploy({"node1": bad}, limit="node1")
    assert run.returncode != 0
    assert "[node1] preflight failed" in run.output and reason in run.output, run.output[-3000:]
    assert unit_start("node1") == before, "the running server was touched"
    assert health("node1") == "200"


def health(node):
    port = nodes()[1][node]["server_port"]
    return ssh(node, f"curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{port}/health")


def node_fingerprint(node):
    """Every deployed file's path, size and mtime, the deploy lock's directory included, and
    the unit's start: anything a deploy touches changes it."""
    paths = " ".join([*DEPLOYED_PATHS, deploy_defaults()["run_dir"]])
    listing = ssh(node, "find %s -printf '%%p %%s %%T@\\n' 2>/dev/null | sort | sha1sum" % paths, check=False)
    return listing, unit_start(node)


@pytest.mark.parametrize(
    "body, first_error",
    [
        (
            "env:\n  NCCL_PROTO: LL,Fast\n  NCCL_NTHREADS: 100\n",
            "error: NCCL_PROTO: unknown protocol 'Fast' (expected one of: LL, LL128, Simple)",
        ),
        (
            "server_args:\n  speculative-num-stepz: 2\n",
            "error: server_args.speculative-num-stepz: --speculative-num-stepz is not a flag of sglang "
            "0.5.23+sandbox: did you mean --speculative-num-steps?",
        ),
    ],
)
def test_a_profile_with_lint_errors_is_refused_before_any_host_is_touched(
    converged, profile_dir, body, first_error
):
    bad = write_profile(profile_dir, "linted", "extends: {profiles}/sandbox-eagle3.yml\n" + body)
    before = {node: node_fingerprint(node) for node in PROFILES}
    run = deploy({"node1": "sandbox", "node2": bad})
    assert run.returncode != 0
    # The sandbox inventory gives each node its port through profile_overrides.
    where = f"sglang-deploy: node2: {bad} with profile_overrides"
    assert f"{where}: {first_error}" in run.output, run.output[-3000:]
    assert "sglang-deploy: node2: the profile has lint errors" in run.output, run.output[-3000:]
    assert "Grand total" not in run.output, "operations ran"
    assert {node: node_fingerprint(node) for node in PROFILES} == before, "a host was touched"
    assert health("node2") == "200"


def test_lint_warnings_are_printed_once_for_hosts_sharing_a_profile(converged):
    run = deploy({"node1": "sandbox", "node2": "sandbox"}, args=("--dry",), yes=False)
    assert run.returncode == 0, run.output[-3000:]
    assert run.output.count("warning: NCCL_MAX_NCHANNELS: deprecated since NCCL 2.17") == 1, run.output[
        -3000:
    ]
    assert (
        "sglang-deploy: profiles/sandbox.yml with profile_overrides: warning: NCCL_BUFFSIZE: " in run.output
    ), run.output[-3000:]


def test_preflight_on_the_node_refuses_an_abbreviated_flag(converged):
    """The lint refuses it on the controller; the node's preflight, asking the installed
    parser (which would run it as --speculative-num-steps), refuses it too."""
    port = nodes()[1]["node2"]["server_port"]
    profile = load_profile(
        "sandbox-eagle3",
        overrides={
            "service": {"port": port},
            "server_args": {"speculative-num-steps": None, "speculative-num-step": 2},
        },
    )
    assert "--speculative-num-step" in profile.argv()
    data = deploy_defaults()
    scripts = NodeScripts(
        f"{data['sglang_deploy_dir']}/node",
        "sglang.service",
        profile,
        files={},
        last_good_dir=f"{data['state_dir']}/sglang/last-good",
        wheels_dir=None,
        run_dir=data["run_dir"],
    )
    before = node_fingerprint("node2")
    out = ssh("node2", scripts.preflight(f"{profile.engine.venv}/bin/python") + "; echo rc=$?")
    assert f"rc={status.PREFLIGHT_FAILED}" in out, out
    assert (
        "preflight failed: --speculative-num-step is not a flag of the engine (argparse "
        "would take it as an abbreviation of --speculative-num-steps): did you mean "
        "--speculative-num-steps?"
    ) in out, out
    assert node_fingerprint("node2") == before, "the server was touched"
    assert health("node2") == "200"


def test_drift_is_found_blocks_restarts_and_is_repaired(converged, profile_dir):
    patched = "sglang/srt/managers/scheduler.py"
    site = "/opt/sglang/venv/lib/python3.11/site-packages"
    ssh("node1", f"echo '# a hand edit, as in the incident' >> {site}/{patched}")
    result = verify(PROFILES)
    assert result.returncode != 0
    assert f"modified {patched}" in result.stdout, result.stdout[-3000:]
    changed = write_profile(
        profile_dir,
        "drifted",
        """
        extends: {profiles}/sandbox.yml
        env:
          NCCL_NTHREADS: 128
    """,
    )
    before = unit_start("node1")
    run = deploy({"node1": changed}, limit="node1")
    assert run.returncode != 0
    assert "preflight failed: engine drift" in run.output and patched in run.output, run.output[-3000:]
    assert unit_start("node1") == before, "a drifted engine was restarted"
    repaired = deploy(PROFILES, limit="node1", args=("--data", "repair=true"))
    assert repaired.returncode == 0, repaired.output[-5000:]
    assert verify(PROFILES).returncode == 0


def test_dry_diff_shows_changes_hides_secrets_and_changes_nothing(converged, profile_dir):
    changed = write_profile(
        profile_dir,
        "dry",
        """
        extends: {profiles}/sandbox.yml
        env:
          NCCL_NTHREADS: 64
    """,
    )
    before = unit_start("node1")
    env_before = ssh("node1", "sha1sum /etc/sglang/sglang.env")
    run = deploy(
        {"node1": changed},
        limit="node1",
        extra_env={"HF_TOKEN": "hf_do_not_print"},
        args=("--dry", "--diff"),
        yes=False,
    )
    assert run.returncode == 0, run.output[-3000:]
    assert '+NCCL_NTHREADS="64"' in run.output and 'HF_TOKEN="***"' in run.output, run.output[-3000:]
    assert "hf_do_not_print" not in run.output
    assert unit_start("node1") == before
    assert ssh("node1", "sha1sum /etc/sglang/sglang.env") == env_before


@pytest.mark.parametrize(
    "failure, cause",
    [
        ("cuda-oom", "failed: cuda-oom: CUDA out of memory"),
        ("nccl-error", "failed: nccl-error: NCCL error"),
        ("warmup-fails", "failed: warmup-failed"),
        ("scheduler-dies-after-ready", "failed: scheduler-died"),
        # The stand-in hangs while loading weights, a phase allowed to be long: the timeout says so.
        ("hang", "timeout: not ready within 10.0s; last phase: loading weights"),
        # A hang outside the long phases is called a hang, before the timeout.
        ("hang-warmup", "hung: no new journal line for 3"),
    ],
)
def test_each_injected_failure_gets_its_cause(converged, profile_dir, failure, cause):
    failing = write_profile(
        profile_dir,
        f"fail-{failure}",
        """
        extends: {profiles}/sandbox.yml
        env:
          SGLANG_STANDIN_FAIL: %s
          SGLANG_STANDIN_FAIL_AFTER_SECONDS: 1
        readiness:
          timeout_s: 10
          hang_after_s: 3
    """
        % failure,
    )
    run = deploy({"node1": failing}, limit="node1", args=("--data", "rollback=false"))
    assert run.returncode != 0
    assert "[node1] readiness gate failed: " in run.output and cause in run.output, run.output[-4000:]


def test_back_to_the_good_profiles(converged):
    run = deploy(PROFILES)
    assert run.returncode == 0, run.output[-4000:]
    assert verify(PROFILES).returncode == 0
