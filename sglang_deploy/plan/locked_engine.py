"""What a host's deploy needs to install a venv from a lock (locks/, plan/locks.py): the lock,
its wheels in the controller's wheelhouse (plan/wheelhouse.py) and where both go on the host.
A node's engine (a pin set with no lock is refused by the lint unless it installs from an index,
where pip resolves it), and a router host's gateway (always locked: plan/fleet.py refuses a pin
set without). A host whose interpreter is not the lock's Python X.Y stops at plan time
(python_problem)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from sglang_deploy.errors import DeployError
from sglang_deploy.plan.locks import (
    Lock,
    RouterPins,
    load_lock,
    lock_path,
    router_lock_command,
    update_command,
)
from sglang_deploy.plan.venv_names import locked_venv_name
from sglang_deploy.plan.wheelhouse import (
    UV_PIN,
    WHEELHOUSE,
    check_wheels,
    fetch_command,
    lock_wheels_dir,
    missing_message,
    router_fetch_command,
    wheel_for,
)


@dataclass
class LockedEngine:
    owner: str  # whose venv, in errors: the profile's name, or `router_packages`
    fetch: str  # the command that fetches its wheels into the wheelhouse
    engine: object  # the pin set: the profile's engine section, or a router's RouterPins
    lock: Lock
    local_lock: Path
    remote_lock: str  # where the lock lies on the node
    deploy_dir: str
    # The settings naming the hosts' interpreter and its X.Y, and the command that locks the pin
    # set for another X.Y (given it): what python_problem tells the operator to do.
    python_keys: tuple[str, str]
    relock: Callable[[str], str]
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
        """The venv's name: the engine's pin (of ``packages``), then a hash of what the lock
        installs and ``python_version``."""
        return locked_venv_name(packages, self.lock.digest, python_version)

    def python_problem(self, python: str, python_version: str | None) -> str | None:
        """Why ``python`` on the host (at ``python_version``, its full version; None: not
        known) cannot build this lock's venv: another X.Y than the lock was made for, which
        uv would find only once the whole wheelhouse is on the host. Names both versions, what
        to set and the `make lock` for the host's Python."""
        wanted = self.lock.header.get("python")
        found = ".".join((python_version or "").split(".")[:2])
        if not found or found == wanted:
            return None
        interpreter, version = self.python_keys
        return (
            f"{python} ({interpreter}) is Python {python_version} here, the lock {self.local_lock.name} "
            f'({self.owner}) is for Python {wanted}: set {version}: "{found}" and `{self.relock(found)}`'
        )

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
            raise DeployError(f"{self.owner}: wheels refused, nothing installed: " + "; ".join(refused))
        uv = wheel_for(directory, "uv", UV_PIN.partition("==")[2]) if directory.is_dir() else []
        if not uv:
            missing.append(UV_PIN)
        if missing:
            raise DeployError(f"{self.owner}: " + missing_message(missing, self.fetch, directory))
        return [*accepted.values(), uv[0]]


def locked_engine(profile, deploy_dir: str, wheelhouse: Path = WHEELHOUSE) -> LockedEngine | None:
    """The profile's lock and what goes with it, or None when its pin set has no lock."""
    path = lock_path(profile.engine)
    if not path.is_file():
        return None
    return LockedEngine(
        owner=profile.name,
        fetch=fetch_command(profile.name),
        engine=profile.engine,
        lock=load_lock(path),
        local_lock=path,
        remote_lock=f"{deploy_dir}/locks/{path.name}",
        deploy_dir=deploy_dir,
        python_keys=("engine.python", "engine.python_version"),
        relock=lambda _: update_command(profile.name),  # once the profile says that version
        wheelhouse=wheelhouse,
    )


def locked_router(pins: RouterPins, deploy_dir: str, wheelhouse: Path = WHEELHOUSE) -> LockedEngine:
    """A router pin set's lock and what goes with it (its lock must exist: plan/fleet.py checks
    it first). On the router host the lock, the wheelhouse and uv lie where a node's do."""
    path = lock_path(pins)
    return LockedEngine(
        owner="router_packages",
        fetch=router_fetch_command(pins),
        engine=pins,
        lock=load_lock(path),
        local_lock=path,
        remote_lock=f"{deploy_dir}/locks/{path.name}",
        deploy_dir=deploy_dir,
        python_keys=("router_python", "router_python_version"),
        relock=lambda version: router_lock_command(replace(pins, python_version=version)),
        wheelhouse=wheelhouse,
    )


__all__ = ["LockedEngine", "fetch_command", "locked_engine", "locked_router"]
