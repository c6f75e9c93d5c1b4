"""The engine's venv (a locked one from the wheelhouse, with uv) and its pruning and manifest,
and the locked venv's sources the router's venv shares."""

from pyinfra import host

from sglang_deploy import operations as sglang
from sglang_deploy.cli import exit_on_deploy_error
from sglang_deploy.errors import DeployError
from sglang_deploy.facts.engine_venvs import PythonVersion


def lock_python_checked(locked, python):
    """A host whose ``python`` (the interpreter that builds the venv) is another X.Y than
    ``locked``'s lock was made for stops here, while the run is planned: before any upload, and
    not when uv fails on the host once the whole wheelhouse is there. The engine's and the
    router's alike."""
    with exit_on_deploy_error(host.name):
        problem = locked.python_problem(python, host.get_fact(PythonVersion, python=python))
        if problem:
            raise DeployError(problem)


def locked_wheels_and_uv(locked, wheels, what, deploy_dir, python, **wheelhouse_args):
    """A locked venv's sources on the host, for the engine and the router alike: its lock, the
    wheels the host lacks (``wheels``) and uv, from the wheelhouse."""
    sglang.wheelhouse(
        name=f"{what} wheelhouse ({locked.local_lock.name})",
        wheels=wheels,
        remote_dir=locked.remote_wheelhouse or f"{deploy_dir}/wheelhouse",
        lock=locked.local_lock,
        remote_lock=locked.remote_lock,
        **wheelhouse_args,
    )
    sglang.tool_venv(
        name="uv", venv=locked.uv_venv, python=python, packages=[locked.uv_pin],
        wheels_dir=locked.remote_wheelhouse,
    )  # fmt: skip


def engine(plan):
    """This pin set's venv, built beside the live one (which keeps serving); the unit's link is
    staged to point at it at the restart. A locked engine (locks/) gets the lock and the wheels
    the node lacks from the controller's wheelhouse, and uv builds the venv with exactly the
    lock, hashes required, no index; an unlocked one, the profile's find-links wheels and pip."""
    locked = plan.locked
    if locked is not None:
        lock_python_checked(locked, plan.profile.engine.python)
        with exit_on_deploy_error(host.name):
            wheels = locked.wheels()
        locked_wheels_and_uv(
            locked,
            wheels,
            "Engine",
            plan.settings.sglang_deploy_dir,
            "python3",
            scripts_dir=plan.scripts.directory,
        )
    for wheel in plan.wheels:
        sglang.binary_file(name=f"Wheel {wheel.name}", src=str(wheel), dest=f"{plan.wheels_dir}/{wheel.name}")
    fanout_cleanup(plan)
    return sglang.engine(
        name="Engine venv and pinned packages",
        venv=plan.venv,
        link=plan.profile.engine.venv,
        python=plan.profile.engine.python,
        packages=plan.profile.engine.packages,
        scripts_dir=plan.scripts.directory,
        wheels_dir=locked.remote_wheelhouse if locked else plan.wheels_dir,
        repair=plan.repair,
        lock=locked.remote_lock if locked else None,
        uv=locked.uv if locked else None,
    )


def fanout_cleanup(plan):
    """What a fan-out (models, wheelhouse) left when its run died: our keys in the login user's
    authorized_keys, key directories; nothing when none is left (operations/fanout_keys.py)."""
    sglang.fanout_cleanup(
        name="Fan-out keys removed",
        scripts_dir=plan.scripts.directory,
        run_dir=plan.settings.run_dir,
        user=str(host.data.get("ssh_user") or "root"),
    )


def old_venvs_pruned(plan):
    """The newest `venvs_keep` engine venvs stay, and the live and last known good ones; the
    wheelhouses no venv left was built from go with them."""
    sglang.old_venvs_pruned(
        name="Old engine venvs",
        venvs_dir=plan.venvs_dir,
        link=plan.profile.engine.venv,
        keep=plan.settings.venvs_keep,
        wanted=plan.venv,
        scripts_dir=plan.scripts.directory,
        last_good_dir=plan.scripts.last_good_dir,
        deploy_dir=plan.settings.sglang_deploy_dir,
        lock=plan.locked.remote_lock if plan.locked else None,
    )


def engine_manifest(plan):
    """A record on the controller of what the engine holds, to diff nodes or dates."""
    sglang.manifest_recorded(name="Engine manifest", scripts=plan.scripts, profile=plan.profile)
