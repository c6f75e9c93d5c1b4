"""One engine venv per pin set: its name derived from what it holds, and which old ones go.

Pure functions, on the controller. A venv under ``venvs_dir`` is named after its pins, the
hashes of the find-links wheels pip may install from, and the interpreter's version, so a
change of any of them is a new venv built beside the live one (the running server's files are
never touched), and an unchanged deploy finds its venv already there. The unit runs through a
stable link (the profile's ``engine.venv``) that the restart cycle points at the new venv.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from sglang_deploy.node.lib.installed import canonical

_WHEEL_NAME = re.compile(r"(?P<name>[^-]+)-(?P<version>[^-]+)(-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl")
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9._+@-]")  # a venv path stays a plain path (VenvPath)
ENGINE_DISTRIBUTION = "sglang"  # the pin a venv is named after, wherever it is in the list


def wheel_identity(filename: str):
    """(canonical distribution name, version) from a wheel's file name (PEP 427), or None."""
    match = _WHEEL_NAME.fullmatch(filename)
    if not match:
        return None
    return canonical(match["name"]), match["version"].replace("_", "-")


def installable_wheels(packages, wheels):
    """The wheels of ``wheels`` ({file name: sha256}) pip may install for ``packages``: each
    pinned distribution's wheel at its pinned version, and every wheel of a distribution not
    pinned (a dependency). A pinned distribution's wheel at another version cannot be installed:
    building it beside the pinned one changes nothing of this venv."""
    pins = {canonical(pin.partition("==")[0]): pin.partition("==")[2] for pin in packages}
    chosen = {}
    for filename, digest in sorted(wheels.items()):
        identity = wheel_identity(filename)
        if identity is None or identity[0] not in pins or pins[identity[0]] == identity[1]:
            chosen[filename] = digest
    return chosen


def _pin(pin: str) -> tuple[str, str]:
    """(canonical distribution name without extras, version) of ``name[extras]==version``."""
    name, _, version = pin.partition("==")
    return canonical(name.partition("[")[0]), version


def venv_name(packages, wheels, python_version: str) -> str:
    """The venv's directory name: the engine's pin, readable (the first in canonical order when
    the engine is not pinned), then a short hash of everything it holds (the pins, the
    installable wheels' sha256s, the interpreter's version), e.g.
    ``sglang-0.5.24+sandbox-3f9a0c1d2e4b``. Neither part depends on the pins' order or
    spelling: reordering ``engine.packages`` is no reason to build another venv."""
    identity = {
        "packages": sorted(canonical(p.partition("==")[0]) + "==" + p.partition("==")[2] for p in packages),
        "wheels": installable_wheels(packages, wheels),
        "python": python_version,
    }
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:12]
    return f"{readable_pin(packages)}-{digest}"


def locked_venv_name(packages, lock_digest: str, python_version: str) -> str:
    """A venv built from a lock: the engine's pin, readable (as venv_name), then a short hash of
    the lock's content digest (every name, version and sha256 it installs) and the interpreter's
    version."""
    digest = hashlib.sha256(f"{lock_digest} {python_version}".encode()).hexdigest()[:12]
    return f"{readable_pin(packages)}-{digest}"


def readable_pin(packages) -> str:
    """The readable part of a venv's name: the engine's pin (the first in canonical order when
    the engine is not pinned), wherever it is in the list and however it is spelled."""
    pins = sorted(_pin(p) for p in packages)
    name, version = next((pin for pin in pins if pin[0] == ENGINE_DISTRIBUTION), pins[0])
    return _NAME_UNSAFE.sub("_", f"{name}-{version}")


def wheel_digests(paths) -> dict:
    """{file name: sha256} of local wheel files."""
    return {Path(p).name: hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in paths}


def venvs_to_remove(venvs, keep: int, protected) -> list:
    """Which venvs go: ``venvs`` is [{"name", "built_at" (None: an unfinished build)}]; the
    newest ``keep`` finished ones stay, and so does every name in ``protected`` (the live one,
    the last known good, the one this deploy wants), however old. Unfinished builds go unless
    protected. Oldest first."""
    finished = sorted(
        (v for v in venvs if v.get("built_at") is not None),
        key=lambda v: (v["built_at"], v["name"]),
        reverse=True,
    )
    kept = {v["name"] for v in finished[: max(keep, 0)]} | {p for p in protected if p}
    gone = [v for v in venvs if v["name"] not in kept]
    return [v["name"] for v in sorted(gone, key=lambda v: (v.get("built_at") or 0, v["name"]))]


WHEELHOUSE_RECENT_S = 24 * 3600  # younger: a deploy (of any service here) may be about to build from it


def wheelhouses_to_remove(wheelhouses, gone, keep):
    """Which locks' wheelhouses go (with their lock files): ``wheelhouses`` is venvs.py's list
    ([{"name", "venvs", "age_s"}]); one stays while a venv built from it stands after ``gone``
    (venv paths being removed), when it is ``keep`` (the lock this deploy installs), or when it
    arrived less than a day ago. A venv from before venvs named their lock keeps none."""
    return [
        w["name"]
        for w in wheelhouses
        if w["name"] != keep
        and not set(w.get("venvs") or ()) - set(gone)
        and (w.get("age_s") or 0) >= WHEELHOUSE_RECENT_S
    ]
