"""The hardware passport on sandbox nodes: the deploy keeps it on the node and the controller,
a re-run changes nothing (the passport file included), `make verify` shows it, and a node whose
copy says its GPU trained to x8 is flagged. Sandbox nodes have no GPU: the passport says
"not checked: nvidia-smi not found", still holds what the node has (IOMMU, kernel log), and
verify passes on that, saying the GPUs were not checked."""

import json
import subprocess

import pytest

from sglang_deploy.report import passports

from .sandbox import REPO_ROOT, deploy, ssh, verify

pytestmark = pytest.mark.e2e

PASSPORT = "/var/lib/sglang-deploy/passport.json"
SANDBOX = {"node1": str(REPO_ROOT / "profiles" / "sandbox.yml")}


@pytest.fixture(scope="module")
def deployed():
    run = deploy(SANDBOX, limit="node1")
    assert run.returncode == 0, run.output[-5000:]
    return run


def test_the_deploy_keeps_the_passport_on_the_node_and_the_controller(deployed):
    on_node = json.loads(ssh("node1", f"cat {PASSPORT}"))
    assert on_node["gpus"] == {"not_checked": "nvidia-smi not found"}
    assert "sysfs" in on_node["iommu"] and "xid" in on_node
    copy = passports.read_all()["node1"]
    assert copy["hostname"] == on_node["hostname"] and copy["gpus"] == on_node["gpus"]
    assert "Hardware passport" in deployed.output


def test_a_re_run_changes_nothing_not_even_the_passport_file(deployed):
    before = ssh("node1", f"stat -c %Y {PASSPORT}")
    run = deploy(SANDBOX, limit="node1")
    assert run.returncode == 0 and run.changed == 0, run.output[-5000:]
    assert ssh("node1", f"stat -c %Y {PASSPORT}") == before


def test_make_verify_shows_the_passport(deployed):
    done = subprocess.run(
        ["make", "-s", "verify", "LIMIT=node1"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert "hardware passport" in done.stdout, done.stdout[-3000:]
    reports = json.loads((REPO_ROOT / "reports/verify.json").read_text())
    check = next(
        c
        for r in reports
        if r.get("host") == "node1"
        for c in r["checks"]
        if c["name"] == "hardware passport"
    )
    # A sandbox node passes on what its passport holds; the detail says its GPUs were not checked.
    assert check["state"] == "ok", check
    assert "GPUs not checked: nvidia-smi not found" in check["detail"], check


def test_a_missing_passport_fails_verify(deployed):
    ssh("node1", f"mv {PASSPORT} {PASSPORT}.aside")
    try:
        found = verify(SANDBOX)
        assert found.returncode != 0
        assert f"no passport at {PASSPORT}" in found.stdout + found.stderr
    finally:
        ssh("node1", f"mv {PASSPORT}.aside {PASSPORT}")
