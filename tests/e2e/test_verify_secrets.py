"""A deployed secret, on a real sandbox node: where its copies live and with which modes, and
that no output of `make verify` shows it, passing or failing, at any verbosity (checked against
another profile, a hand-edited env file with restarted workers, a stopped server), with the
operator's value exported and without it."""

import json
import os
import secrets
import subprocess
import time

import pytest

from .sandbox import REPO_ROOT, deploy, host_tests_argv, ssh, wipe

pytestmark = pytest.mark.e2e

NODE = "node1"
TOKEN = "hf_" + secrets.token_hex(16)
# Where the deploy keeps the env file, and the last known good copy of it (for rollback).
SECRET_COPIES = {
    "/etc/sglang/sglang.env": "/etc/sglang",
    "/var/lib/sglang-deploy/sglang/last-good/env": "/var/lib/sglang-deploy/sglang/last-good",
}
VERBOSITIES = [
    ["-q"],
    ["-v"],
    ["-vv"],
    ["-l", "--tb=long"],
    ["-vv", "-l", "--tb=long", "-rA"],
    ["-q", "-rA", "--tb=short"],
]


def shown_parts(output, size=6):
    """Every piece of the token (``size`` characters or more) that ``output`` shows."""
    return sorted(
        {TOKEN[i : i + size] for i in range(len(TOKEN) - size + 1) if TOKEN[i : i + size] in output}
    )


def operator_env(profile, token):
    env = {**os.environ, "SGLANG_DEPLOY_SANDBOX_PROFILES": f"{NODE}={profile}"}
    env.pop("HF_TOKEN", None)
    if token:
        env["HF_TOKEN"] = token
    return env


def verify_tests(profile, args, token=TOKEN):
    """`pytest tests/host` as `make verify` runs it, with extra pytest arguments."""
    done = subprocess.run(
        host_tests_argv(NODE, *args),
        cwd=REPO_ROOT,
        env=operator_env(profile, token),
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done.returncode, done.stdout + done.stderr


def make_verify(profile, token=TOKEN):
    done = subprocess.run(
        ["make", "verify", f"LIMIT={NODE}"],
        cwd=REPO_ROOT,
        env=operator_env(profile, token),
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done.returncode, done.stdout + done.stderr


def assert_no_secret_at_any_verbosity(profile, failing, token=TOKEN):
    for args in VERBOSITIES:
        returncode, output = verify_tests(profile, args, token)
        assert returncode == 1, f"{args}: expected failures\n{output[-3000:]}"
        for check in failing:
            assert f"test_check[{NODE}-{check}]" in output, f"{args}: {check} did not fail\n{output[-3000:]}"
        assert not shown_parts(output), f"{args}: shows {shown_parts(output)}"


@pytest.fixture(scope="module")
def deployed():
    wipe(NODE)
    run = deploy({NODE: "sandbox"}, limit=NODE, extra_env={"HF_TOKEN": TOKEN})
    assert run.returncode == 0, run.output[-5000:]
    assert not shown_parts(run.output)
    return run


def test_every_copy_of_the_secret_on_the_node_is_root_only(deployed):
    found = ssh(
        NODE, f"grep -rlsF {TOKEN} /etc /var /opt /run /tmp /root /home /srv /usr/local", check=False
    ).split()
    assert sorted(found) == sorted(SECRET_COPIES)
    for path, directory in SECRET_COPIES.items():
        assert ssh(NODE, f"stat -c '%a %U %G' {path}").strip() == "600 root root", path
        assert ssh(NODE, f"stat -c '%a %U' {directory}").strip() == "700 root", directory


def test_passing_verify_shows_no_secret(deployed):
    returncode, output = verify_tests("sandbox", ["-vv", "-l", "-rA"])
    assert returncode == 0, output[-3000:]
    # The last good check includes its copy of the env file being as private as the original.
    assert f"test_check[{NODE}-last-good] PASSED" in output
    assert not shown_parts(output)


def test_verify_against_another_profile_fails_without_showing_the_secret(deployed):
    assert_no_secret_at_any_verbosity("sandbox-eagle3", ["unit"])
    returncode, output = make_verify("sandbox-eagle3")
    assert returncode != 0 and not shown_parts(output), output[-3000:]
    header, row = [line.split() for line in output.splitlines() if line.startswith(("host ", f"{NODE} "))][:2]
    # The table says what verify checked against and what the node last passed its gate with.
    assert header[:6] == ["host", "checked", "against", "last", "passed", "gate"]
    assert row[:3] == [NODE, "sandbox-eagle3", "sandbox"], output[-3000:]
    report = (REPO_ROOT / "reports/verify.json").read_text()
    assert not shown_parts(report)
    assert json.loads(report)[0]["last_passed_gate"] == "sandbox"


def test_hand_edited_env_file_fails_without_showing_the_secret(deployed):
    ssh(
        NODE,
        "sed -i 's/^NCCL_P2P_LEVEL=.*/NCCL_P2P_LEVEL=\"PHB\"/' /etc/sglang/sglang.env"
        " && systemctl restart sglang.service",
    )
    deadline = time.monotonic() + 60
    while "2" != ssh(NODE, "pgrep -c -f '^sglang::scheduler'", check=False).strip():
        assert time.monotonic() < deadline, "the schedulers did not come back"
        time.sleep(1)
    failing = ["env-file", "workers-env"]
    assert_no_secret_at_any_verbosity("sandbox", failing)
    # A verify run by someone who never exported the value: masked by the secret's name.
    assert_no_secret_at_any_verbosity("sandbox", failing, token=None)
    returncode, output = make_verify("sandbox", token=None)
    assert returncode != 0 and "workers' env" in output and not shown_parts(output), output[-3000:]
    assert not shown_parts((REPO_ROOT / "reports/verify.json").read_text())


def test_stopped_server_fails_without_showing_the_secret(deployed):
    ssh(NODE, "systemctl stop sglang.service")
    assert_no_secret_at_any_verbosity("sandbox", ["serving"])
    returncode, output = make_verify("sandbox")
    assert returncode != 0 and not shown_parts(output), output[-3000:]
    assert f"{NODE}: serving: failed" in output
    assert not shown_parts((REPO_ROOT / "reports/verify.json").read_text())
