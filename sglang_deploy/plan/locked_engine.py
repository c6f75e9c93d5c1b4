"""What a host's deploy needs to install its engine from a lock (locks/, plan/locks.py): the
lock, its wheels in the controller's wheelhouse (plan/wheelhouse.py) and where both go on the
node. A profile whose pin set has no lock installs as before (pip resolves; the lint warns)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sglang_deploy.errors import DeployError
from sglang_deploy.plan.locks import Lock, load_lock, lock_path
from sglang_deploy.plan.venv_names import locked_venv_name
from sglang_deploy.plan.wheelhouse import (
    UV_PIN,
    WHEELHOUSE,
    check_wheels,
    fetch_command,
    lock_wheels_dir,
    missing_message,
    wheel_for,
)


@dataclass
class LockedEngine:
    profile_name: str
    engine: object  # the profile's engine section
    lock: Lock
    local_lock: Path
    remote_lock: str  # where the lock lies on the node
    deploy_dir: str
    wheelhouse: Path = WHEELHOUSE  # the controller's, one directory per lock

    @property
    def install_from(self) -> str:
        return self.engine.install_from  # "wheelhouse" (the node needs no index) or "index"

    @property
    def remote_wheelhouse(self) -> str | None:
        """The node's directory of the lock's wheels (none: installed from an index)."""
        if self.install_from == "index":
            return None
        return f"{self.deploy_dir}/wheelhouse/{self.local_lock.stem}"

    @property
    def uv_venv(self) -> str:
        return f"{self.deploy_dir}/uv-venv"  # the small venv that holds uv on the node

    @property
    def uv(self) -> str:
        return f"{self.uv_venv}/bin/uv"

    uv_pin = UV_PIN

    def venv_name(self, packages, python_version: str) -> str:
        """The venv's name: the engine's pin, then a hash of what the lock installs."""
        return locked_venv_name(packages, self.lock.digest, python_version)

    def wheels(self) -> list[Path]:
        """The local wheels the node gets: the lock's and uv's (none from an index). DeployError
        when the wheelhouse lacks one or holds one whose sha256 the lock does not accept (naming
        each, and the command that fetches them): raised while the deploy is planned, so before
        any host is touched."""
        if self.install_from == "index":
            return []
        directory = lock_wheels_dir(self.engine, self.wheelhouse)
        missing = [f"{e.name}=={e.version}" for e in self.lock.entries.values()]
        accepted, refused = {}, []
        if directory.is_dir():
            accepted, missing, refused = check_wheels(self.lock, directory)
        if refused:
            raise DeployError(
                f"{self.profile_name}: wheels refused, nothing installed: " + "; ".join(refused)
            )
        uv = wheel_for(directory, "uv", UV_PIN.partition("==")[2]) if directory.is_dir() else []
        if not uv:
            missing.append(UV_PIN)
        if missing:
            raise DeployError(
                f"{self.profile_name}: " + missing_message(missing, self.profile_name, directory)
            )
        return [*accepted.values(), uv[0]]


def locked_engine(profile, deploy_dir: str, wheelhouse: Path = WHEELHOUSE) -> LockedEngine | None:
    """The profile's lock and what goes with it, or None when its pin set has no lock."""
    path = lock_path(profile.engine)
    if not path.is_file():
        return None
    return LockedEngine(
        profile_name=profile.name,
        engine=profile.engine,
        lock=load_lock(path),
        local_lock=path,
        remote_lock=f"{deploy_dir}/locks/{path.name}",
        deploy_dir=deploy_dir,
        wheelhouse=wheelhouse,
    )


__all__ = ["LockedEngine", "fetch_command", "locked_engine"]
