"""The engine: one venv per pin set, built beside the live one, and the switch to it staged
for the restart cycle; repaired on request. SGLang's gateway on a router host gets a venv of
its own built from its lock (locked_venv); other tools (the Hub client, uv) plain venvs."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from pyinfra import host
from pyinfra.api import operation

from sglang_deploy.facts.engine_venvs import EngineVenvs, VenvLock
from sglang_deploy.facts.serving import EngineDrift, FileDigests, InstalledDistributions, InterpreterStartup
from sglang_deploy.node.lib import status
from sglang_deploy.node.lib.installed import canonical
from sglang_deploy.node.venvs import MARKER, PENDING
from sglang_deploy.operations.files import pth_directory
from sglang_deploy.plan.commands import venvs_mark_command

if TYPE_CHECKING:
    from collections.abc import Sequence

# uv writes uv_cache.json (the time its cache unpacked the wheel) into each dist-info and lists
# it in RECORD: two nodes built from one lock would differ in every RECORD, and the manifest
# diff of a fleet would never be 0. Without installer metadata a venv is the same bytes anywhere.
UV_REPRODUCIBLE = "UV_NO_INSTALLER_METADATA=1"
# uv hard-links a venv's files from its cache: with one cache for every build (root's
# ~/.cache/uv, never cleaned) a pruned venv freed nothing, its blocks stayed there. Each install
# has a cache of its own inside the venv (its filesystem: the links are made, not copied),
# removed once the install succeeded; one a failed install leaves goes with its venv.
UV_CACHE = ".uv-cache"


def locked_install(venv, lock, wheels_dir=None, uv="python3 -m uv", reinstall=()):
    """The command installing exactly ``lock`` into ``venv``: every sha256 required, no
    dependency resolution; from ``wheels_dir`` alone (no index) when given; no installer
    metadata (UV_REPRODUCIBLE); ``reinstall``: distributions installed again. ``uv``: how the
    node runs uv (uv_tool's venv); the lock decides, so pip's resolver is never asked."""
    again = "".join(f" --reinstall-package {shlex.quote(name)}" for name in reinstall)
    target = _uv_target(venv, wheels_dir, "--no-deps")
    return _cache_removed(venv, f"{UV_REPRODUCIBLE} {uv} pip install {target} -r {shlex.quote(lock)}{again}")


def locked_sync(venv, lock, wheels_dir=None, uv="python3 -m uv"):
    """The command making ``venv`` exactly ``lock`` again: extra distributions removed, missing
    ones installed, hashes required; as ``locked_install``, from ``wheels_dir`` alone when given."""
    return _cache_removed(
        venv, f"{UV_REPRODUCIBLE} {uv} pip sync {_uv_target(venv, wheels_dir)} {shlex.quote(lock)}"
    )


def _cache_removed(venv, command):
    return f"{command} && rm -rf {shlex.quote(f'{venv}/{UV_CACHE}')}"


def _uv_target(venv, wheels_dir, *flags):
    """uv's arguments for the venv's interpreter, hashes required (and ``flags``), no
    configuration read, the install's own cache (UV_CACHE), and the wheelhouse alone (no index)
    when given."""
    offline = f" --no-index --find-links {shlex.quote(wheels_dir)}" if wheels_dir else ""
    cache = shlex.quote(f"{venv}/{UV_CACHE}")
    return (
        " ".join([f"--python={shlex.quote(venv)}/bin/python", "--require-hashes", *flags, "--no-config"])
        + f" --cache-dir {cache}"
        + offline
    )


def uv_tool(tool_venv, python, uv_wheel):
    """Commands making ``tool_venv`` hold the uv wheel (pip, offline: its one use), and how to
    run that uv."""
    quoted = shlex.quote(tool_venv)
    commands = [
        f"test -x {quoted}/bin/uv || {{ rm -rf {quoted} && {shlex.quote(python)} -m venv {quoted} && "
        f"{quoted}/bin/pip install --quiet --no-index --no-deps {shlex.quote(uv_wheel)}; }}"
    ]
    return commands, f"{quoted}/bin/uv"


@operation()
def engine(
    venv: str,
    link: str,
    python: str,
    packages: Sequence[str],
    scripts_dir: str,
    wheels_dir: str | None = None,
    repair: tuple[str, Sequence[str]] | None = None,
    lock: str | None = None,
    uv: str | None = None,
):
    """
    Build the engine venv of a pin set beside the live one, and stage its link.

    ``venv`` holds exactly the pinned ``packages`` (built unless a finished build is there);
    ``link`` (what the unit runs through) is staged to point at it from the next restart: nothing
    the running server uses is touched.

    + venv: the venv of this pin set (``venvs_dir/<name>``, sglang_deploy.plan.venv_names)
    + link: the stable path the unit runs through (the profile's ``engine.venv``)
    + python: interpreter that creates it
    + packages: exact pins, ``name==version``
    + scripts_dir: where our on-node scripts are (venvs.py marks a finished build)
    + wheels_dir: remote directory of uploaded wheels; when given pip installs from it alone
    + repair: ``(scripts_dir, distributions)``: force-reinstall those of the distributions
      whose installed files drifted from their RECORD
    + lock: the lock file on the node: the venv is built without pip and holds exactly it
      (``locked_install``; ``wheels_dir`` then is the lock's wheelhouse)
    + uv: the node's uv command (``uv_tool``), which installs the lock

    **Examples:**

    .. code:: python

        sglang.engine(
            name="Engine venv and pinned packages",
            venv=plan.venv,
            link=plan.profile.engine.venv,
            python=plan.profile.engine.python,
            packages=plan.profile.engine.packages,
            scripts_dir=plan.scripts.directory,
        )
    """
    venvs_dir, name = venv.rsplit("/", 1)
    found = host.get_fact(
        EngineVenvs, scripts_dir=scripts_dir, venvs_dir=venvs_dir, link=link, last_good_dir=None
    ) or {"venvs": [], "live": None, "pending": None}
    built = any(v["name"] == name and v["built_at"] is not None for v in found["venvs"])
    pip = f"{shlex.quote(venv)}/bin/pip install --no-input --disable-pip-version-check " + (
        f"--no-index --find-links {shlex.quote(wheels_dir)} " if wheels_dir else ""
    )
    changed = False
    if not built and lock:
        yield from _build(
            venv,
            python,
            locked_install(venv, lock, wheels_dir, uv),
            [],
            scripts_dir,
            with_pip=False,
            lock=lock,
        )
        changed = True
    elif not built:
        yield from _build(venv, python, pip, packages, scripts_dir)
        changed = True
    elif lock:
        changed = yield from _keep_locked(venv, lock, wheels_dir, uv, repair)
    else:
        changed = yield from _keep_exact(venv, pip, packages, repair)
    if found["live"] is None:
        # A first deploy: no server runs from the link, which the unit file (verified before
        # it is installed) must find.
        yield f"ln -sfn {shlex.quote(venv)} {shlex.quote(link)}"
        changed = True
    elif found["live"] != name:
        # Pointed at by the restart cycle, between preflight and restart, and only there.
        yield f"ln -sfn {shlex.quote(venv)} {shlex.quote(link + PENDING)}"
        changed = True
    elif found["pending"] is not None:
        yield f"rm -f {shlex.quote(link + PENDING)}"
        changed = True
    if not changed:
        host.noop(f"{link} -> {venv} holds {', '.join(packages)}")


@operation()
def tool_venv(venv: str, python: str, packages: Sequence[str], wheels_dir: str | None = None):
    """
    A venv of its own for a tool the recipe runs, holding exactly its pins.

    The tool: the Hugging Face Hub client, SGLang's router. The venv is created when missing, the
    differing pins reinstalled; nothing when it holds them.

    + venv: where it lives
    + python: interpreter that creates it
    + packages: exact pins, ``name==version``
    + wheels_dir: remote directory of uploaded wheels; when given pip installs from it alone

    **Examples:**

    .. code:: python

        sglang.tool_venv(
            name="Hugging Face Hub client venv",
            venv=plan.hf_venv,
            python="python3",
            packages=[plan.settings.huggingface_hub_pin],
        )
    """
    quoted = shlex.quote(venv)
    pip = f"{quoted}/bin/pip install --no-input --disable-pip-version-check " + (
        f"--no-index --find-links {shlex.quote(wheels_dir)} " if wheels_dir else ""
    )
    if host.get_fact(InstalledDistributions, venv=venv) is None:
        yield f"rm -rf {quoted} && mkdir -p {shlex.quote(venv.rsplit('/', 1)[0])}"
        yield f"{shlex.quote(python)} -m venv {quoted}"
        yield pip + " ".join(shlex.quote(pin) for pin in packages)
        return
    if not (yield from _keep_exact(venv, pip, packages, None)):
        host.noop(f"{venv} holds {', '.join(packages)}")


@operation()
def locked_venv(venv: str, python: str, lock: str, uv: str, scripts_dir: str, wheels_dir: str | None = None):
    """
    A venv of its own holding exactly a lock, built by uv.

    Such as SGLang's gateway on a router host. The venv is named after what the lock installs,
    built by uv without pip, every sha256 required, no dependency resolution, from ``wheels_dir``
    alone (no index) when given. A finished build that no longer is its lock (exact.py: a distribution extra,
    missing or at another version) is synced to it; nothing when it is.

    + venv: where it lives (its name says which lock: plan/fleet.py router_venv)
    + python: interpreter that creates it
    + lock: the lock file on the host
    + uv: the host's uv command (``uv_tool``'s venv)
    + scripts_dir: where our on-node scripts are (exact.py checks it, venvs.py marks it built)
    + wheels_dir: the host's wheelhouse of the lock; None: the locked wheels from the index

    **Examples:**

    .. code:: python

        sglang.locked_venv(
            name="Router venv (exactly its lock)",
            venv=router.venv,
            python="python3",
            lock=locked.remote_lock,
            uv=locked.uv,
            scripts_dir=scripts_dir,
        )
    """
    marker = f"{venv}/{MARKER}"
    if marker not in host.get_fact(FileDigests, paths=[marker]):
        yield from _build(
            venv,
            python,
            locked_install(venv, lock, wheels_dir, uv),
            [],
            scripts_dir,
            with_pip=False,
            lock=lock,
        )
        return
    report = host.get_fact(VenvLock, venv=venv, scripts_dir=scripts_dir, lock=lock)
    if report is not None and report["status"] == status.READY:
        host.noop(f"{venv} holds exactly {lock.rsplit('/', 1)[-1]} ({report['locked']} distributions)")
        return
    # Another distribution in it, one missing, another version, or no answer: made the lock again.
    yield locked_sync(venv, lock, wheels_dir, uv)


def _build(venv, python, pip, packages, scripts_dir, with_pip=True, lock=None):
    """A fresh venv: an unfinished build's leftovers go first. The interpreter is a copy
    (--copies), so /proc/<pid>/exe of a server names the venv it started from. A locked
    venv has no pip: it would be a distribution the lock does not hold; it names its lock
    (its wheelhouse stays while the venv does: venvs.py)."""
    quoted = shlex.quote(venv)
    yield f"rm -rf {quoted} && mkdir -p {shlex.quote(venv.rsplit('/', 1)[0])}"
    yield f"{shlex.quote(python)} -m venv --copies {'' if with_pip else '--without-pip '}{quoted}"
    # One copy of the interpreter is enough: its other names point at it.
    yield (
        f"cd {quoted}/bin && for name in python3 python3.*; do "
        f'test -f "$name" && ln -sf python "$name"; done; true'
    )
    yield pip + " ".join(shlex.quote(pin) for pin in packages)
    yield venvs_mark_command(scripts_dir, venv, lock)


def _keep_exact(venv, pip, packages, repair):
    """A finished venv holds its pins (its name says which); drift is repaired on request."""
    installed = host.get_fact(InstalledDistributions, venv=venv) or {}
    differing = [pin for pin in packages if _pin_differs(pin, installed)]
    if differing:
        yield pip + " ".join(shlex.quote(pin) for pin in differing)
    drifted, strays = _drift(venv, *repair) if repair and not differing else ([], [])
    if drifted:
        yield pip + "--force-reinstall --no-deps " + " ".join(shlex.quote(pin) for pin in drifted)
    if strays:
        # Files no RECORD lists survive a reinstall: remove them.
        site = pth_directory(host.get_fact(InterpreterStartup, python=f"{venv}/bin/python"))
        yield f"cd {shlex.quote(site)} && rm -f -- " + " ".join(shlex.quote(p) for p in strays)
    return bool(differing or drifted or strays)


def _keep_locked(venv, lock, wheels_dir, uv, repair):
    """A finished locked venv is its lock (preflight and verify check it: exact.py); under
    repair it is synced to the lock (an extra distribution removed, a missing one installed)
    and the distributions whose files drifted are reinstalled from their locked wheels."""
    if not repair:
        return False
    yield locked_sync(venv, lock, wheels_dir, uv)
    drifted, strays = _drift(venv, *repair)
    if drifted:
        yield locked_install(
            venv, lock, wheels_dir, uv, reinstall=[pin.partition("==")[0] for pin in drifted]
        )
    if strays:
        site = pth_directory(host.get_fact(InterpreterStartup, python=f"{venv}/bin/python"))
        yield f"cd {shlex.quote(site)} && rm -f -- " + " ".join(shlex.quote(p) for p in strays)
    return True


def _drift(venv, scripts_dir, distributions):
    """(``name==installed version`` of each distribution whose RECORD'd files drifted, the
    unexpected files found among them, relative to site-packages)."""
    report = host.get_fact(EngineDrift, venv=venv, scripts_dir=scripts_dir, distributions=distributions) or {
        "distributions": {}
    }
    found = report["distributions"].items()
    pins = [f"{name}=={r['version']}" for name, r in found if r["modified"] or r["missing"]]
    return pins, [path for _, r in found for path in r["unexpected"]]


def _pin_differs(pin, installed):
    name, _, version = pin.partition("==")
    return installed.get(canonical(name)) != version


def engine_matches(venv, packages):
    """Whether ``venv`` is a finished build holding exactly the pinned packages (a fact read)."""
    installed = host.get_fact(InstalledDistributions, venv=venv)
    marker = f"{venv}/{MARKER}"
    finished = installed is not None and marker in host.get_fact(FileDigests, paths=[marker])
    return finished and not any(_pin_differs(pin, installed) for pin in packages)
