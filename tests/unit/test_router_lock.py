"""The gateway installed from its lock, as the engine is (plan/locks.py, plan/wheelhouse.py,
plan/locked_engine.py, operations/engine.py locked_venv): a committed lock per supported gateway
pin, a pin set without one refused at plan time naming the command that makes it, the venv
named after what the lock installs, built with hashes required and no index, and a wheel whose
sha256 the lock does not accept refused before any host is touched."""

import hashlib
import io
import json

import pytest
from test_checks import File, Node, Result
from test_operations import run  # noqa: F401 (fixture)

from sglang_deploy import operations
from sglang_deploy.errors import DeployError
from sglang_deploy.facts.engine_venvs import VenvLock
from sglang_deploy.facts.serving import FileDigests
from sglang_deploy.node.lib import status
from sglang_deploy.node.venvs import MARKER
from sglang_deploy.plan import lock_make, locks, router_flags, wheelhouse
from sglang_deploy.plan.fleet import router_host
from sglang_deploy.plan.fleet_hosts import router_plan
from sglang_deploy.plan.hosts import deploy_defaults
from sglang_deploy.plan.locked_engine import locked_router
from sglang_deploy.verify.router_checks import packages as router_packages_check

DEFAULTS = deploy_defaults()
SCRIPTS = "/opt/sglang-deploy/node"


def router_data(**overrides):
    return {**DEFAULTS, "ssh_hostname": "10.0.0.5", "ssh_port": 22, "role": "router", **overrides}


def fleet(**router):
    node = {**DEFAULTS, "ssh_hostname": "10.0.0.11", "profile": "sandbox"}
    return [("n1", node), ("r1", router_data(**router))]


def sha(data):
    return hashlib.sha256(data).hexdigest()


# -- the committed locks ---------------------------------------------------------------------


@pytest.mark.parametrize("options", sorted(router_flags.OPTIONS_DIR.glob("*.json")), ids=lambda p: p.stem)
def test_every_supported_gateway_version_has_its_lock_for_the_default_router_hosts(options):
    data = json.loads(options.read_text())
    pin = f"{data['distribution']}=={data['version']}"
    defaults = locks.default_router_pins()
    pins = locks.router_pins([pin], defaults.platform, defaults.python_version)
    assert locks.router_lock_problems(pins) == []
    lock = locks.load_lock(locks.lock_path(pins))
    assert lock.header["gateway"] == data["distribution"] and lock.pins == [pin]
    assert (lock.header["platform"], lock.header["python"]) == ("x86_64-manylinux_2_34", "3.11")
    assert lock.entries[data["distribution"]].version == data["version"]
    assert lock.header["update"] == f"make lock ROUTER_PIN={pin}"


def test_the_default_gateway_lock_is_smgs_closure_with_every_hash():
    lock = locks.load_lock(locks.lock_path(locks.default_router_pins()))
    assert locks.lock_path(locks.default_router_pins()).name.startswith("smg-1.13.0-")
    assert {"smg", "grpcio", "protobuf", "setproctitle"} <= set(lock.entries)
    assert all(entry.hashes for entry in lock.entries.values())


# -- found or missing ------------------------------------------------------------------------


def test_a_router_pin_set_with_its_lock_gets_a_venv_named_after_the_lock():
    settings = router_host("r1", router_data())
    locked = settings.locked
    assert locked.local_lock == locks.lock_path(locks.default_router_pins())
    assert locked.remote_lock == f"/opt/sglang-deploy/locks/{locked.local_lock.name}"
    assert locked.remote_wheelhouse == f"/opt/sglang-deploy/wheelhouse/{locked.local_lock.stem}"
    assert settings.venv == "/opt/sglang-router/venvs/" + locked.venv_name(["smg==1.13.0"], "3.11")
    # Another lock's content is another venv (and so another unit: a restart), never the same.
    assert settings.venv != "/opt/sglang-router/venvs/" + locked.venv_name(["smg==1.13.0"], "3.12")
    assert router_host("r1", router_data(router_venvs_dir="/srv/r")).venv.startswith("/srv/r/smg-1.13.0-")


def test_a_router_pin_set_without_a_lock_stops_the_plan_naming_the_command_that_makes_it():
    with pytest.raises(DeployError) as raised:
        router_plan("r1", fleet(router_python_version="3.12"))
    message = str(raised.value)
    assert message.startswith(
        "r1: router_packages smg==1.13.0 (x86_64-manylinux_2_34, Python 3.12) have no lock"
    )
    assert "`make lock ROUTER_PIN=smg==1.13.0 ROUTER_PYTHON_VERSION=3.12` makes it" in message
    # A node's plan reads every router's settings: its deploy stops just the same.
    from sglang_deploy.plan.fleet_hosts import rotation_for

    hosts = fleet(router_platform="aarch64-manylinux_2_34")
    with pytest.raises(DeployError, match="ROUTER_PLATFORM=aarch64-manylinux_2_34` makes it"):
        rotation_for("n1", hosts[0][1], hosts, 30000)


def test_lock_problems_for_a_missing_and_an_edited_router_lock(tmp_path):
    pins = locks.router_pins(["smg==1.13.0"], "x86_64-manylinux_2_34", "3.11")
    (missing,) = locks.router_lock_problems(pins, tmp_path)
    assert "have no lock" in missing and "`make lock ROUTER_PIN=smg==1.13.0` makes it" in missing
    edited = locks.lock_path(pins).read_text().replace("smg==1.13.0 \\", "smg==1.12.0 \\")
    locks.lock_path(pins, tmp_path).write_text(edited)
    (problem,) = locks.router_lock_problems(pins, tmp_path)
    assert (
        "does not hold smg==1.13.0" in problem and "`make lock ROUTER_PIN=smg==1.13.0` updates it" in problem
    )


def test_the_gateway_pin_comes_first_whatever_the_order():
    pins = locks.router_pins(["aiohttp==3.14.5", "SMG==1.13.0"], "x86_64-manylinux_2_34", "3.11")
    assert pins.packages == ("SMG==1.13.0", "aiohttp==3.14.5") and pins.gateway == "smg"
    # Named after the gateway, its digest that of the pin set however it is spelled or ordered.
    same = locks.router_pins(["smg==1.13.0", "aiohttp==3.14.5"], "x86_64-manylinux_2_34", "3.11")
    assert locks.lock_name(pins).startswith("smg-1.13.0-") and locks.lock_name(pins) == locks.lock_name(same)


def test_a_host_whose_python_is_not_the_locks_stops_naming_the_lock_to_make():
    locked = router_plan("r1", fleet()).locked
    assert (
        locked.python_problem("python3", "3.11.2") is None and locked.python_problem("python3", None) is None
    )
    problem = locked.python_problem("python3", "3.12.3")
    assert "python3 (router_python) is Python 3.12.3 here" in problem and "is for Python 3.11" in problem
    assert 'router_python_version: "3.12"' in problem
    assert "`make lock ROUTER_PIN=smg==1.13.0 ROUTER_PYTHON_VERSION=3.12`" in problem


# -- `make lock` and `make router-wheels` ----------------------------------------------------


def test_make_router_lock_writes_the_gateway_header_and_keeps_older_locks(tmp_path):
    body = f"smg==1.13.0 \\\n    --hash=sha256:{'a' * 64}\n"
    pins = locks.router_pins(["smg==1.13.0"], "x86_64-manylinux_2_34", "3.11")
    seen = []
    out = io.StringIO()
    path = lock_make.make_router_lock(
        pins, tmp_path, compile_=lambda e, **kw: seen.append(kw) or body, out=out
    )
    lock = locks.load_lock(path)
    assert lock.header["gateway"] == "smg" and lock.header["update"] == "make lock ROUTER_PIN=smg==1.13.0"
    assert "profiles" not in lock.header and "router venv" in path.read_text().splitlines()[0]
    assert seen[0]["source"] == "router-packages.in" and "added smg 1.13.0" in out.getvalue()
    assert locks.router_locks(tmp_path) == [pins]
    # Another version: a new lock, the changes said since the gateway's last; the old one stays.
    newer = locks.router_pins(["smg==1.14.0"], "x86_64-manylinux_2_34", "3.11")
    out = io.StringIO()
    again = lock_make.make_router_lock(
        newer, tmp_path, compile_=lambda e, **kw: body.replace("1.13.0", "1.14.0"), out=out
    )
    assert again != path and locks.load_lock(path).header["gateway"] == "smg"
    assert "smg 1.13.0 -> 1.14.0" in out.getvalue() and f"since {path}" in out.getvalue()


def test_make_lock_without_arguments_locks_every_profile_and_every_gateway(monkeypatch):
    profiles, routers = [], []
    monkeypatch.setattr(lock_make, "make_lock", lambda profile, sharing, **kw: profiles.append(profile.name))
    monkeypatch.setattr(lock_make, "make_router_lock", lambda pins, **kw: routers.append(pins.packages))
    assert lock_make.main(["lock"]) == 0
    assert "baseline" in profiles and any(name.startswith("sandbox") for name in profiles)
    assert sorted(routers) == [("smg==1.13.0",)]
    profiles.clear(), routers.clear()
    assert lock_make.main(["lock", "--router", "smg==1.13.0", "--router-python-version", "3.12"]) == 0
    assert profiles == [] and routers == [("smg==1.13.0",)]
    profiles.clear(), routers.clear()
    assert lock_make.main(["lock", "sandbox"]) == 0 and routers == [] and profiles == ["sandbox"]


def test_router_wheels_refuses_a_pin_set_without_a_lock_naming_the_command(tmp_path, capsys):
    assert (
        wheelhouse.main(["--router", "smg==1.13.0", "--router-python-version", "3.9", "--dir", str(tmp_path)])
        == 1
    )
    assert "`make lock ROUTER_PIN=smg==1.13.0 ROUTER_PYTHON_VERSION=3.9` makes it" in capsys.readouterr().err


def test_router_wheels_refuses_a_download_whose_hash_differs(tmp_path):
    pins = locks.default_router_pins()
    lock = locks.load_lock(locks.lock_path(pins))

    def corrupt(lock_, wanted, directory, engine):
        for pin in wanted:
            name, _, version = pin.partition("==")
            (directory / f"{name.replace('-', '_')}-{version}-py3-none-any.whl").write_bytes(b"not it")

    with pytest.raises(DeployError) as refused:
        wheelhouse.build_router(pins, tmp_path, download=corrupt, out=io.StringIO(), cache=tmp_path / "cache")
    message = str(refused.value)
    assert f"smg-1.13.0-py3-none-any.whl: sha256 {sha(b'not it')} is not one the lock accepts" in message
    assert f"lacks {len(lock.entries)} locked wheels" in message
    assert "`make router-wheels ROUTER_PIN=smg==1.13.0` fetches them" in message
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").iterdir())


# -- the controller's wheels, checked before any host is touched -----------------------------


@pytest.fixture
def router_wheelhouse(tmp_path):
    """The default gateway lock's wheelhouse: a file per locked distribution, each with the
    bytes the lock is made to accept here (its hashes replaced), and a uv wheel."""
    pins = locks.default_router_pins()
    lock = locks.load_lock(locks.lock_path(pins))
    directory = wheelhouse.lock_wheels_dir(pins, tmp_path)
    directory.mkdir(parents=True)
    entries = {}
    for key, entry in lock.entries.items():
        data = f"{entry.name} {entry.version}".encode()
        (directory / f"{entry.name.replace('-', '_')}-{entry.version}-py3-none-any.whl").write_bytes(data)
        entries[key] = locks.Locked(entry.name, entry.version, frozenset({sha(data)}))
    uv = wheelhouse.UV_PIN.partition("==")[2]
    (directory / f"uv-{uv}-py3-none-manylinux_2_17_x86_64.whl").write_bytes(b"uv")
    locked = locked_router(pins, "/opt/sd", wheelhouse=tmp_path)
    locked.lock = locks.Lock(lock.header, entries, lock.body)
    return locked, directory


def test_the_router_host_gets_exactly_the_locked_wheels_and_uv(router_wheelhouse):
    locked, directory = router_wheelhouse
    names = sorted(p.name for p in locked.wheels())
    assert len(names) == len(locked.lock.entries) + 1 and any(n.startswith("smg-1.13.0-") for n in names)


def test_a_router_wheel_whose_hash_differs_is_refused_before_any_host_is_touched(router_wheelhouse):
    locked, directory = router_wheelhouse
    smg = next(directory.glob("smg-1.13.0-*.whl"))
    smg.write_bytes(b"a re-uploaded file")
    with pytest.raises(DeployError) as raised:
        locked.wheels()
    message = str(raised.value)
    assert message.startswith("router_packages: wheels refused, nothing installed: ")
    assert smg.name in message and sha(b"a re-uploaded file") in message
    smg.unlink()
    with pytest.raises(
        DeployError,
        match=r"lacks 1 locked wheels \(smg==1\.13\.0\).*`make router-wheels ROUTER_PIN=smg==1\.13\.0`",
    ):
        locked.wheels()


def test_without_a_wheelhouse_the_deploy_names_the_command_that_fills_it(tmp_path):
    locked = locked_router(locks.default_router_pins(), "/opt/sd", wheelhouse=tmp_path)
    with pytest.raises(DeployError, match="`make router-wheels ROUTER_PIN=smg==1.13.0` fetches them"):
        locked.wheels()


# -- on the router host ----------------------------------------------------------------------

V = "/opt/sglang-router/venvs/smg-1.13.0-0123456789ab"
LOCK = "/opt/sd/locks/smg-1.13.0-x.txt"
UV = "/opt/sd/uv-venv/bin/uv"


def built(exact):
    """A finished router venv (its marker there) whose exact.py answer is ``exact``."""
    return {FileDigests: lambda paths: {p: {"sha256": "0" * 64} for p in paths}, VenvLock: exact}


def test_the_router_venv_is_built_from_its_lock_with_hashes_required_and_no_index(run):  # noqa: F811
    commands, noops = run(
        operations.locked_venv, {FileDigests: {}}, V, "python3", LOCK, UV, SCRIPTS, wheels_dir="/opt/sd/wh/L"
    )
    assert commands[0] == f"rm -rf {V} && mkdir -p /opt/sglang-router/venvs"
    assert commands[1] == f"python3 -m venv --copies --without-pip {V}"
    assert commands[3] == (
        f"UV_NO_INSTALLER_METADATA=1 {UV} pip install --python={V}/bin/python --require-hashes --no-deps --no-config "
        f"--cache-dir {V}/.uv-cache --no-index --find-links /opt/sd/wh/L -r {LOCK} && rm -rf {V}/.uv-cache"
    )
    assert commands[4] == f"python3 {SCRIPTS}/venvs.py mark --venv {V} --lock {LOCK}" and noops == []
    assert not any("pip install --no-input" in c for c in commands)  # pip never resolves
    # From an index (router_install_from: index): the hashes are still required.
    commands, _ = run(operations.locked_venv, {FileDigests: {}}, V, "python3", LOCK, UV, SCRIPTS)
    assert "--require-hashes --no-deps" in commands[3] and "--no-index" not in commands[3]


def test_a_router_venv_that_is_its_lock_changes_nothing_and_one_that_drifted_is_synced(run):  # noqa: F811
    exact = {"status": status.READY, "locked": 7}
    commands, noops = run(
        operations.locked_venv, built(exact), V, "python3", LOCK, UV, SCRIPTS, wheels_dir="/w"
    )
    assert commands == [] and noops == [f"{V} holds exactly smg-1.13.0-x.txt (7 distributions)"]
    drifted = {"status": status.DRIFT, "locked": 7, "extra": ["pip==25.0"]}
    commands, _ = run(
        operations.locked_venv, built(drifted), V, "python3", LOCK, UV, SCRIPTS, wheels_dir="/w"
    )
    assert commands == [
        f"UV_NO_INSTALLER_METADATA=1 {UV} pip sync --python={V}/bin/python --require-hashes --no-config "
        f"--cache-dir {V}/.uv-cache --no-index --find-links /w {LOCK} && rm -rf {V}/.uv-cache"
    ]


def test_the_venv_fact_asks_exact_py_only_of_a_finished_build_with_its_lock():
    command = VenvLock().command(venv=V, scripts_dir=SCRIPTS, lock=LOCK)
    assert command.startswith(f"! test -f {V}/{MARKER} || ! test -f {LOCK} || ")
    assert f"{V}/bin/python {SCRIPTS}/exact.py --lock {LOCK}" in command


def test_verify_checks_the_router_venv_is_exactly_its_lock():
    plan = router_plan("r1", fleet())
    venv, lock = plan.router.venv, plan.locked.remote_lock
    files = {f"{venv}/bin/python": File(f"{venv}/bin/python"), lock: File(lock)}
    ok = json.dumps({"status": 0, "locked": 7, "cause": None})
    found = router_packages_check(Node(files=files, outputs={"exact.py": Result(0, ok)}), plan, SCRIPTS)
    assert found.state == "ok" and found.detail == "smg==1.13.0: 7 distributions, exactly the lock's"
    extra = json.dumps({"status": status.DRIFT, "locked": 7, "cause": "extra pip==25.0 (not in the lock)"})
    found = router_packages_check(Node(files=files, outputs={"exact.py": Result(14, extra)}), plan, SCRIPTS)
    assert found.state == "failed" and "extra pip==25.0" in found.detail
    found = router_packages_check(Node(files={}), plan, SCRIPTS)
    assert found.state == "failed" and found.detail == f"no venv at {venv}"
