"""Locks: every distribution of a venv's closure, pinned with its sha256, for its hosts'
platform: a profile's engine on the nodes, SGLang's gateway on the router hosts. One lock per
pin set (``engine.packages`` + ``engine.platform`` + ``engine.python_version``; a router's
``router_packages`` + ``router_platform`` + ``router_python_version``), committed under locks/.

Reading, naming and judging locks is this module's job; resolving and writing them (`make lock`,
`python -m sglang_deploy.plan.locks lock ...`) is lock_make.py's. A lock's file is named after the pin set (``<first pin>-<pins digest>.txt``), so the
profiles sharing pins share it, and a changed pin set is a new file: the old one stays for a
rollback. Its header names what it was made from:

    # pins: sglang==0.5.23
    # platform: x86_64-manylinux_2_34
    # python: 3.12
    # profiles: baseline, eagle3-2step       (a router's lock: `# gateway: smg`)
    ...

then uv's requirements (``name==version`` and its ``--hash=sha256:...`` lines). A lock is the
pin set's content (normal_pins: sorted, each pin once, PEP 503 names): the same pins in another
order or spelling are the same lock. A profile never locked is refused by the lint unless it
installs from an index (``engine.install_from: index``: then it warns, and pip resolves on the
node); a router pin set never locked is refused: its gateway is always installed from a lock.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from sglang_deploy.errors import DeployError
from sglang_deploy.node.lib.installed import canonical
from sglang_deploy.plan.settings import default
from sglang_deploy.plan.venv_names import readable_pin

REPO = Path(__file__).resolve().parents[2]
LOCKS_DIR = REPO / "locks"
INDEX_URL = "https://pypi.org/simple"
# PyPI's own torch wheels for Linux x86_64 are CUDA builds (their nvidia-* dependencies carry
# the CUDA libraries): no CUDA-specific index is needed for SGLang 0.5.23's closure.
INDEX_NOTE = f"{INDEX_URL} (torch's CUDA wheels are PyPI's own: no CUDA index)"
_HEADER = re.compile(r"#\s*(?P<key>[a-z][a-z ]*):\s*(?P<value>.*)")
_REQ = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==(?P<version>[^\s;\\]+)")
_HASH = re.compile(r"--hash=sha256:(?P<hash>[0-9a-f]{64})")


@dataclass(frozen=True)
class Locked:
    name: str  # as the lock spells it
    version: str
    hashes: frozenset  # sha256 of every file of that version the lock accepts


@dataclass(frozen=True)
class Lock:
    header: dict  # {key: value} of the `# key: value` lines before the first requirement
    entries: dict  # {canonical name: Locked}
    body: str  # the requirements, as uv wrote them

    @property
    def pins(self) -> list[str]:
        return [p.strip() for p in self.header.get("pins", "").split(",") if p.strip()]

    @property
    def digest(self) -> str:
        """sha256 of what the lock installs (names, versions, hashes): a venv's identity."""
        wanted = sorted((k, e.version, sorted(e.hashes)) for k, e in self.entries.items())
        return hashlib.sha256(json.dumps(wanted).encode()).hexdigest()


@dataclass(frozen=True)
class RouterPins:
    """A router host's pin set, as a profile's engine section is the engine's: what its lock is
    made from (router_packages, router_platform, router_python_version, router_install_from:
    plan/settings/groups_fleet.py). The gateway's pin comes first, so the lock is named after it."""

    packages: tuple
    platform: str
    python_version: str
    # "wheelhouse" (router_install_from's default) or "index": the router host downloads the locked wheels
    install_from: str = default("router_install_from")
    find_links: tuple = ()  # none: the gateway's wheels are the index's

    @property
    def gateway(self) -> str:
        """The gateway's distribution (``smg``)."""
        return _gateway(self.packages)[0]


def router_pins(
    packages, platform: str, python_version: str, install_from: str = default("router_install_from")
) -> RouterPins:
    """The pin set of ``packages`` (exact pins, one of them a gateway), the gateway's first."""
    dist, version = _gateway(packages)
    first = next(p for p in packages if canonical(p.partition("==")[0].split("[", 1)[0]) == dist)
    rest = sorted((p for p in packages if p != first), key=canonical)
    return RouterPins((first, *rest), platform, python_version, install_from)


def _gateway(packages):
    from sglang_deploy.plan.router_flags import gateway_pin

    return gateway_pin(packages)


def parse_lock(text: str) -> Lock:
    """A lock file's header and entries; DeployError on a requirement without a hash."""
    header, entries, body, current = {}, {}, [], None
    for line in text.splitlines():
        stripped = line.strip()
        if not entries and (not stripped or stripped.startswith("#")):
            found = _HEADER.fullmatch(stripped)  # the header: comments before the first requirement
            if found:
                header[found["key"].strip()] = found["value"].strip()
            continue
        body.append(line)
        if not stripped or stripped.startswith("#"):
            continue
        requirement = _REQ.match(stripped)
        if requirement:
            current = Locked(requirement["name"], requirement["version"], frozenset())
            entries[canonical(current.name)] = current
        elif current is None:
            raise DeployError(f"lock: {stripped!r} is not name==version")
        hashes = frozenset(m["hash"] for m in _HASH.finditer(stripped))
        if hashes:
            current = Locked(current.name, current.version, current.hashes | hashes)
            entries[canonical(current.name)] = current
    unhashed = sorted(e.name for e in entries.values() if not e.hashes)
    if unhashed:
        raise DeployError(f"lock: no sha256 for {', '.join(unhashed)}")
    return Lock(header, entries, "\n".join(body).strip() + "\n")


def normal_pins(packages) -> list[str]:
    """A pin set as a lock knows it: each name PEP 503's (``Typing_Extensions`` is
    ``typing-extensions``), sorted, each pin once; the order and spelling in a profile are no
    other pin set."""
    return sorted({canonical(p.partition("==")[0]) + "==" + p.partition("==")[2] for p in packages})


def pin_set(engine) -> dict:
    """What a lock is made from: the profile's pins (normal_pins) and the platform."""
    return {
        "pins": normal_pins(engine.packages),
        "platform": engine.platform,
        "python": engine.python_version,
    }


def lock_name(engine) -> str:
    """``<pin>-<digest of the pin set>.txt``, e.g. ``sglang-0.5.23-3f9a0c1d2e4b.txt``: the
    engine's pin as a venv's name has it (a router's: its gateway's), then the digest of
    pin_set; neither depends on the pins' order, spelling or repetition."""
    digest = hashlib.sha256(json.dumps(pin_set(engine), sort_keys=True).encode()).hexdigest()[:12]
    lead = engine.packages[:1] if isinstance(engine, RouterPins) else engine.packages
    return f"{readable_pin(lead)}-{digest}.txt"


def lock_path(engine, locks_dir: Path = LOCKS_DIR) -> Path:
    return Path(locks_dir) / lock_name(engine)


def load_lock(path: Path) -> Lock:
    return parse_lock(Path(path).read_text())


def update_command(profile_name: str) -> str:
    return f"make lock PROFILE={profile_name}"


def router_make_args(pins: RouterPins) -> str:
    """make's variables naming a router pin set: ``ROUTER_PIN=...`` and, where they are not the
    settings' defaults, ``ROUTER_PYTHON_VERSION`` and ``ROUTER_PLATFORM``."""
    from sglang_deploy.plan.settings import default

    words = [f"ROUTER_PIN={shlex.quote(','.join(pins.packages))}"]
    if pins.python_version != default("router_python_version"):
        words.append(f"ROUTER_PYTHON_VERSION={shlex.quote(pins.python_version)}")
    if pins.platform != default("router_platform"):
        words.append(f"ROUTER_PLATFORM={shlex.quote(pins.platform)}")
    return " ".join(words)


def router_lock_command(pins: RouterPins) -> str:
    return f"make lock {router_make_args(pins)}"


def lock_problems(profile, locks_dir: Path = LOCKS_DIR) -> list[str]:
    """Why ``profile``'s lock does not hold its engine packages (none: it does). A pin set never
    locked is a problem too, unless the profile installs from an index (unlocked_warning)."""
    engine, path = profile.engine, lock_path(profile.engine, locks_dir)
    fix = f"`{update_command(profile.name)}` updates it"
    if not path.is_file():
        previous = previous_lock(profile.name, locks_dir)
        if previous is not None:
            old = load_lock(previous)
            return [
                f"engine.packages {', '.join(engine.packages)} ({engine.platform}, Python "
                f"{engine.python_version}) no longer match its lock {repo_relative(previous)} (pins "
                f"{', '.join(old.pins)}, {old.header.get('platform')}, Python {old.header.get('python')}): {fix}"
            ]
        if engine.install_from == "index":
            return []  # pip resolves it on each node: unlocked_warning says so
        return [
            f"engine.packages {', '.join(engine.packages)} ({engine.platform}, Python "
            f"{engine.python_version}) have no lock in {repo_relative(locks_dir)}: `{update_command(profile.name)}` "
            "makes it (or engine.install_from: index, and pip resolves them on each node, the day it is built)"
        ]
    return _mismatches(path, engine, fix)


def router_lock_problems(pins: RouterPins, locks_dir: Path = LOCKS_DIR) -> list[str]:
    """Why a router pin set cannot be installed from its lock (none: it can). Never locked is a
    problem: a gateway is installed from its lock only."""
    path = lock_path(pins, locks_dir)
    if not path.is_file():
        return [
            f"router_packages {', '.join(pins.packages)} ({pins.platform}, Python {pins.python_version}) "
            f"have no lock in {repo_relative(locks_dir)}: `{router_lock_command(pins)}` makes it"
        ]
    return _mismatches(path, pins, f"`{router_lock_command(pins)}` updates it", "router_packages")


def _mismatches(path: Path, engine, fix: str, whose: str = "the profile") -> list[str]:
    """Where the lock at ``path`` was made for another pin set than ``engine``'s (``whose``),
    or lacks one of its pins (an edited lock: its name is the pin set's digest)."""
    lock = load_lock(path)
    wanted = pin_set(engine)
    made = {
        "pins": normal_pins(lock.pins),
        "platform": lock.header.get("platform"),
        "python": lock.header.get("python"),
    }
    problems = [f"{repo_relative(path)} was made for {k} {made[k]}, {whose} has {wanted[k]}: {fix}"
                for k in ("pins", "platform", "python") if made[k] != wanted[k]]  # fmt: skip
    for pin in engine.packages:
        name, _, version = pin.partition("==")
        found = lock.entries.get(canonical(name))
        if found is None or found.version != version:
            problems.append(f"{repo_relative(path)} does not hold {pin}: {fix}")
    return problems


def unlocked_warning(profile, locks_dir: Path = LOCKS_DIR) -> str | None:
    """A profile whose pin set was never locked and installs from an index (engine.install_from)
    installs as pip resolves it on the day: say so (without it, and for a lock that named the
    profile and no longer matches, lock_problems' error)."""
    if profile.engine.install_from != "index":
        return None
    if lock_path(profile.engine, locks_dir).is_file() or previous_lock(profile.name, locks_dir):
        return None
    return (
        f"engine.packages {', '.join(profile.engine.packages)} have no lock: pip resolves their "
        f"dependencies on each node, on the day it is built; `{update_command(profile.name)}` locks them"
    )


def previous_lock(profile_name: str, locks_dir: Path = LOCKS_DIR):
    """The newest lock whose header names ``profile_name`` among its profiles, or None."""
    found = []
    for path in Path(locks_dir).glob("*.txt"):
        profiles = load_lock(path).header.get("profiles", "")
        if profile_name in [p.strip() for p in profiles.split(",")]:
            found.append((path.stat().st_mtime, path.name, path))
    return max(found)[2] if found else None


def router_locks(locks_dir: Path = LOCKS_DIR) -> list[RouterPins]:
    """The pin set of every router lock in ``locks_dir`` (its header names a gateway)."""
    found = []
    for path in sorted(Path(locks_dir).glob("*.txt")):
        lock = load_lock(path)
        if lock.header.get("gateway"):
            found.append(router_pins(lock.pins, lock.header["platform"], lock.header["python"]))
    return found


def default_router_pins() -> RouterPins:
    """The router pin set of the settings' defaults (plan/settings/)."""
    from sglang_deploy.plan.settings import default

    return router_pins(
        default("router_packages"), default("router_platform"), default("router_python_version")
    )


def router_pins_from_args(pins: str, platform: str | None, python_version: str | None) -> RouterPins:
    """A router pin set from the command line (``a==1,b==2``), the settings' defaults where
    platform or Python are not given; DeployError on a pin set without one gateway."""
    defaults = default_router_pins()
    try:
        return router_pins(
            [p.strip() for p in pins.split(",") if p.strip()],
            platform or defaults.platform,
            python_version or defaults.python_version,
        )
    except ValueError as exc:
        raise DeployError(f"--router: {exc}") from None


def repo_relative(path: Path) -> str:
    """``path`` as messages name it: relative to the repository where it is inside."""
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def node_lock_path(scripts_dir: str, engine) -> str:
    """Where the deploy puts ``engine``'s lock on a node: beside our scripts' directory."""
    return f"{scripts_dir.rsplit('/', 1)[0]}/locks/{lock_name(engine)}"


if __name__ == "__main__":  # `python -m sglang_deploy.plan.locks lock ...`: lock_make.py's
    from sglang_deploy.plan.lock_make import main

    sys.exit(main())
