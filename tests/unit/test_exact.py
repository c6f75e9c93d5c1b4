"""A venv holds exactly its lock (node/exact.py), run by a real venv's interpreter over fake
installed distributions; preflight's refusal; `make verify`'s "exact lock" check."""

import json
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from sglang_deploy.node import exact, preflight
from sglang_deploy.node.lib import status
from sglang_deploy.plan.commands.unit import NodeScripts
from sglang_deploy.plan.host_plan import plan_for
from sglang_deploy.plan.locks import node_lock_path
from sglang_deploy.verify import checks, lock_checks
from sglang_deploy.verify.verdict import FAILED, OK
from tests.unit.test_checks import HOST_DATA, File, Node, Result

EXACT = Path(exact.__file__)
PY = "%d.%d" % sys.version_info[:2]
LOCK = f"""# pins: fastapi==0.165.0
# python: {PY}
anyio==4.16.0 \\
    --hash=sha256:{"a" * 64}
fastapi==0.165.0 \\
    --hash=sha256:{"b" * 64}
    # via -r engine-packages.in
Typing_Extensions==4.16.0 \\
    --hash=sha256:{"c" * 64}
"""


@pytest.fixture(scope="module")
def fake_venv(tmp_path_factory):
    """A venv without pip, whose site-packages the test fills with .dist-info directories."""
    root = tmp_path_factory.mktemp("venv")
    venv.create(root, with_pip=False)
    return root


def install(root, *dists):
    site = Path(sysconfig.get_path("purelib", vars={"base": str(root), "platbase": str(root)}))
    for old in site.glob("*.dist-info"):
        for f in old.iterdir():
            f.unlink()
        old.rmdir()
    for name, version in dists:
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def run(root, tmp_path, lock=LOCK):
    (tmp_path / "lock.txt").write_text(lock)
    done = subprocess.run(
        [f"{root}/bin/python", str(EXACT), "--lock", str(tmp_path / "lock.txt")],
        capture_output=True,
        text=True,
    )
    return done.returncode, json.loads(done.stdout.splitlines()[-1]), done.stdout


def test_the_lock_exactly(fake_venv, tmp_path):
    install(fake_venv, ("anyio", "4.16.0"), ("fastapi", "0.165.0"), ("typing-extensions", "4.16.0"))
    rc, found, out = run(fake_venv, tmp_path)
    assert rc == status.READY and found["extra"] == found["missing"] == found["different"] == []
    assert "3 distributions, exactly the lock's" in out


def test_an_extra_a_missing_and_a_different_distribution_are_named(fake_venv, tmp_path):
    install(fake_venv, ("anyio", "4.15.0"), ("fastapi", "0.165.0"), ("requests", "2.34.2"))
    rc, found, out = run(fake_venv, tmp_path)
    assert rc == status.NOT_INSTALLED  # missing wins
    assert found["extra"] == ["requests==2.34.2"]
    assert found["missing"] == ["Typing_Extensions==4.16.0"]
    assert found["different"] == [{"name": "anyio", "locked": "4.16.0", "installed": "4.15.0"}]
    assert "extra requests==2.34.2 (not in the lock)" in found["cause"]
    assert "anyio 4.15.0 installed, 4.16.0 locked" in out


def test_a_hand_installed_extra_is_drift(fake_venv, tmp_path):
    install(
        fake_venv,
        ("anyio", "4.16.0"),
        ("fastapi", "0.165.0"),
        ("typing-extensions", "4.16.0"),
        ("pip", "25.0"),
    )
    rc, found, _ = run(fake_venv, tmp_path)
    assert rc == status.DRIFT and found["extra"] == ["pip==25.0"]


def test_a_lock_for_another_python_is_refused_naming_both(fake_venv, tmp_path):
    install(fake_venv, ("anyio", "4.16.0"), ("fastapi", "0.165.0"), ("typing-extensions", "4.16.0"))
    rc, found, _ = run(fake_venv, tmp_path, LOCK.replace(f"# python: {PY}", "# python: 3.8"))
    assert rc == status.DRIFT
    assert f"the lock is for Python 3.8, this venv runs {PY}" in found["cause"]


def test_preflight_refuses_a_venv_that_is_not_its_lock(monkeypatch, tmp_path):
    (tmp_path / "L.txt").write_text(LOCK)
    present = {"anyio": "4.16.0", "fastapi": "0.165.0", "typing-extensions": "4.16.0", "rich": "14.0"}
    dists = {k: type("D", (), {"version": v})() for k, v in present.items()}
    monkeypatch.setattr(exact.installed, "installed_distributions", lambda: dists)
    verdict, text = preflight.check_lock(str(tmp_path / "L.txt"))
    assert verdict == "failed" and "extra rich==14.0" in text and "L.txt" in text and "make repair" in text
    del dists["rich"]
    assert preflight.check_lock(str(tmp_path / "L.txt"))[0] == "ok"
    assert preflight.check_lock(None) is None


def test_verify_names_the_extra_distribution():
    plan = plan_for(HOST_DATA)
    lock = node_lock_path(plan.scripts.directory, plan.profile.engine)
    assert lock.startswith("/opt/d/locks/sglang-0.5.23-")
    report = {"status": status.DRIFT, "cause": "extra rich==14.0 (not in the lock)", "locked": 16}
    node = Node(files={lock: File(lock)}, outputs={"exact.py": Result(12, json.dumps(report) + "\n")})
    found = lock_checks.exact_lock(node, plan)
    assert found.state == FAILED and "extra rich==14.0" in found.detail and "make repair" in found.detail
    report = {"status": status.READY, "cause": None, "locked": 16}
    node = Node(files={lock: File(lock)}, outputs={"exact.py": Result(0, json.dumps(report) + "\n")})
    assert lock_checks.exact_lock(node, plan).state == OK
    assert "exact lock" in [entry.name for entry in checks.REGISTRY]


def test_drift_and_the_manifest_cover_every_locked_distribution():
    """A locked engine's drift check (preflight, verify, repair) and its manifest name every
    distribution of the lock, not a sample; an unlocked one its engine.drift_check."""
    plan = plan_for({**HOST_DATA, "profile": "sandbox", "repair": True})
    locked = sorted(e.name for e in plan.locked.lock.entries.values())
    assert len(locked) > 10 and "fastapi" in locked and "pydantic-core" in locked
    assert plan.scripts.drift_names == locked and plan.repair[1] == locked
    assert set(locked) <= set(plan.scripts.manifest_names)
    for command in (plan.scripts.drift(), plan.scripts.manifest(), plan.scripts.preflight()):
        assert all(f" {name} " in command + " " for name in locked), command
    unlocked = NodeScripts("/opt/d/node", "sglang.service", plan.profile, {}, "/l", None, "/run/d")
    assert unlocked.drift_names == plan.profile.engine.drift_check == ["sglang"]
