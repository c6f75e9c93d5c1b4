"""plan/locked_engine.py: a locked profile's wheels from the controller's wheelhouse, checked
before any host is touched; the venv named after what the lock installs."""

import shutil

import pytest
from pyinfra.context import ctx_host

from sglang_deploy import steps
from sglang_deploy.cli import DeployStopped
from sglang_deploy.errors import DeployError
from sglang_deploy.facts.engine_venvs import PythonVersion
from sglang_deploy.plan.host_plan import plan_for
from sglang_deploy.plan.hosts import deploy_defaults
from sglang_deploy.plan.locked_engine import locked_engine
from sglang_deploy.plan.wheelhouse import UV_PIN, lock_wheels_dir, sha256
from sglang_deploy.profile.schema import load_profile

UV_WHEEL = f"uv-{UV_PIN.partition('==')[2]}-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"


@pytest.fixture
def sandbox(tmp_path, sandbox_wheelhouse):
    """The sandbox profile's locked engine with a wheelhouse of its own: the wheels the lock
    holds (the stand-in and its closure) and a uv wheel."""
    profile = load_profile("sandbox")
    found = locked_engine(profile, "/opt/sd", wheelhouse=tmp_path)
    directory = lock_wheels_dir(profile.engine, tmp_path)
    shutil.copytree(sandbox_wheelhouse, directory, ignore=shutil.ignore_patterns("uv-*"))
    (directory / UV_WHEEL).write_bytes(b"uv")
    standin = next(directory.glob("sglang-0.5.23+sandbox-*.whl")).name
    return found, directory, standin


def test_the_node_gets_the_locked_wheels_and_uv(sandbox):
    found, directory, standin = sandbox
    wheels = [p.name for p in found.wheels()]
    assert wheels[-1] == UV_WHEEL and standin in wheels
    # Every distribution of the closure, one wheel each: the stand-in is not alone in it.
    assert len(wheels) == len(found.lock.entries) + 1 and len(found.lock.entries) > 10
    assert {"fastapi", "pydantic-core", "uvicorn", "orjson"} <= set(found.lock.entries)
    assert found.remote_wheelhouse == f"/opt/sd/wheelhouse/{found.local_lock.stem}"
    assert found.remote_lock == f"/opt/sd/locks/{found.local_lock.name}"


def test_a_wheel_missing_from_the_wheelhouse_is_named_with_the_command_that_fetches_it(sandbox):
    found, directory, standin = sandbox
    (directory / standin).unlink()
    with pytest.raises(DeployError) as raised:
        found.wheels()
    assert "lacks 1 locked wheels (sglang==0.5.23+sandbox)" in str(raised.value)
    assert "`make wheelhouse PROFILE=sandbox` fetches them" in str(raised.value)


def test_a_wheel_whose_hash_differs_from_the_lock_is_refused_and_named(sandbox):
    found, directory, standin = sandbox
    (directory / standin).write_bytes(b"a re-uploaded file")
    with pytest.raises(DeployError) as raised:
        found.wheels()
    message = str(raised.value)
    assert "wheels refused, nothing installed" in message and standin in message
    assert sha256(directory / standin) in message


def test_installed_from_an_index_the_node_gets_no_wheels(tmp_path):
    profile = load_profile("sandbox", overrides={"engine": {"install_from": "index"}})
    found = locked_engine(profile, "/opt/sd", wheelhouse=tmp_path)
    assert found.wheels() == [] and found.remote_wheelhouse is None


def test_the_venv_is_named_after_what_the_lock_installs_whatever_the_pin_order(sandbox):
    found, _, _ = sandbox
    name = found.venv_name(["sglang==0.5.23+sandbox"], "3.11.2")
    assert name.startswith("sglang-0.5.23+sandbox-") and name == found.venv_name(
        ["sglang==0.5.23+sandbox"], "3.11.2"
    )
    assert name != found.venv_name(["sglang==0.5.23+sandbox"], "3.11.4")  # another interpreter


def test_a_profile_whose_pins_were_never_locked_installs_as_before():
    profile = load_profile("sandbox", overrides={"engine": {"packages": ["sglang==0.5.24+sandbox"]}})
    assert locked_engine(profile, "/opt/sd") is None


def test_a_node_python_other_than_the_locks_is_named_with_the_lock_to_make():
    found = locked_engine(load_profile("baseline"), "/opt/sd")
    assert found.python_problem("python3", "3.12.3") is None and found.python_problem("python3", None) is None
    problem = found.python_problem("python3", "3.10.12")  # Ubuntu 22.04's, against a 3.12 lock
    assert problem == (
        f"python3 (engine.python) is Python 3.10.12 here, the lock {found.local_lock.name} (baseline) "
        'is for Python 3.12: set engine.python_version: "3.10" and `make lock PROFILE=baseline`'
    )


class PlanningHost:
    """A node as pyinfra's planning sees it: facts only (its python3 is ``python``)."""

    name = "node1"

    def __init__(self, python):
        self.python, self.asked = python, []

    def get_fact(self, fact, **kwargs):
        self.asked.append(fact)
        return self.python if fact is PythonVersion else None


def test_the_engine_step_stops_on_another_python_before_anything_is_uploaded(monkeypatch, capsys):
    plan = plan_for({**deploy_defaults(), "profile": "baseline", "ssh_hostname": "node1"}, operator_env={})
    uploads = []
    monkeypatch.setattr(steps.venvs.sglang, "wheelhouse", lambda **kwargs: uploads.append(kwargs))
    monkeypatch.setattr(steps.venvs.sglang, "binary_file", lambda **kwargs: uploads.append(kwargs))
    with ctx_host.use(PlanningHost("3.10.12")), pytest.raises(DeployStopped):
        steps.engine(plan)
    said = capsys.readouterr().err
    assert uploads == []
    assert "sglang-deploy: node1: python3 (engine.python) is Python 3.10.12 here" in said
    assert "is for Python 3.12" in said and "`make lock PROFILE=baseline`" in said
