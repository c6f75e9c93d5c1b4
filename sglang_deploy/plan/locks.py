"""Locks: every distribution of a venv's closure, pinned with its sha256, for its hosts'
platform: a profile's engine on the nodes, SGLang's gateway on the router hosts. One lock per
pin set (``engine.packages`` + ``engine.platform`` + ``engine.python_version``; a router's
``router_packages`` + ``router_platform`` + ``router_python_version``), committed under locks/.

    python -m sglang_deploy.plan.locks lock [PROFILE ...]    # `make lock [PROFILE=...]`
    python -m sglang_deploy.plan.locks lock --no-index PROFILE   # from its find-links alone
    python -m sglang_deploy.plan.locks lock --router smg==1.13.0 # `make lock ROUTER_PIN=...`

With neither a profile nor --router it locks every profile and every gateway pin set: the
router locks already in locks/ and the router_packages default.

--no-index resolves from the profile's find-links alone, offline: a profile whose wheels are
another lock's wheelhouse plus a wheel built here (the sandbox's next stand-in versions, locked
by tests/e2e at test time) gets that closure's versions, with no index asked.

uv resolves the closure (`uv pip compile --generate-hashes --python-platform ...
--python-version ...`): it resolves for a platform other than the controller's, which pip
cannot. A lock's file is named after the pin set (``<first pin>-<pins digest>.txt``), so the
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

import argparse
import hashlib
import json
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from sglang_deploy.errors import DeployError
from sglang_deploy.node.lib.installed import canonical
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
    plan/settings.py). The gateway's pin comes first, so the lock is named after it."""

    packages: tuple
    platform: str
    python_version: str
    install_from: str = "wheelhouse"  # or "index": the router host downloads the locked wheels
    find_links: tuple = ()  # none: the gateway's wheels are the index's

    @property
    def gateway(self) -> str:
        """The gateway's distribution (``smg``, ``sglang-router``)."""
        return _gateway(self.packages)[0]


def router_pins(packages, platform: str, python_version: str, install_from: str = "wheelhouse") -> RouterPins:
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
                f"{engine.python_version}) no longer match its lock {_shown(previous)} (pins "
                f"{', '.join(old.pins)}, {old.header.get('platform')}, Python {old.header.get('python')}): {fix}"
            ]
        if engine.install_from == "index":
            return []  # pip resolves it on each node: unlocked_warning says so
        return [
            f"engine.packages {', '.join(engine.packages)} ({engine.platform}, Python "
            f"{engine.python_version}) have no lock in {_shown(locks_dir)}: `{update_command(profile.name)}` "
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
            f"have no lock in {_shown(locks_dir)}: `{router_lock_command(pins)}` makes it"
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
    problems = [f"{_shown(path)} was made for {k} {made[k]}, {whose} has {wanted[k]}: {fix}"
                for k in ("pins", "platform", "python") if made[k] != wanted[k]]  # fmt: skip
    for pin in engine.packages:
        name, _, version = pin.partition("==")
        found = lock.entries.get(canonical(name))
        if found is None or found.version != version:
            problems.append(f"{_shown(path)} does not hold {pin}: {fix}")
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


def closure_changes(old: Lock | None, new: Lock) -> list[str]:
    """What moved between two locks: `added x 1.0`, `removed y 2.0`, `x 1.0 -> 1.1`, and
    `x 1.0: other files` when the version stayed and its hashes changed."""
    before = old.entries if old else {}
    lines = []
    for key in sorted(set(before) | set(new.entries)):
        was, now = before.get(key), new.entries.get(key)
        if was is None:
            lines.append(f"added {now.name} {now.version}")
        elif now is None:
            lines.append(f"removed {was.name} {was.version}")
        elif was.version != now.version:
            lines.append(f"{now.name} {was.version} -> {now.version}")
        elif was.hashes != now.hashes:
            lines.append(f"{now.name} {now.version}: other files (hashes changed)")
    return lines


def render_lock(header: dict, body: str, venv: str = "engine") -> str:
    head = [f"# sglang-deploy lock: every distribution of the {venv} venv, with its sha256."]
    head += [f"# {key}: {value}" for key, value in header.items()]
    return "\n".join(head) + "\n" + body.strip() + "\n"


def uv_compile(
    engine, uv=(sys.executable, "-m", "uv"), find_links=(), cwd=REPO, index=True, source="engine-packages.in"
) -> str:
    """uv's hashed requirements of ``engine``'s closure for its platform (no header); without
    ``index``, from ``find_links`` alone (offline). ``source``: the requirements file's name,
    which uv's ``# via -r ...`` lines name."""
    with tempfile.TemporaryDirectory() as scratch:
        # A fixed name, run from its directory: uv's `# via -r engine-packages.in` stays the same.
        (Path(scratch) / source).write_text("\n".join(engine.packages) + "\n")
        command = [*uv, "pip", "compile", "--quiet", "--no-header", "--generate-hashes"]
        command += ["--python-platform", engine.platform, "--python-version", engine.python_version]
        command += ["--index-url", INDEX_URL] if index else ["--no-index", "--offline"]
        for link in find_links:
            command += ["--find-links", str(Path(cwd) / link)]
        command.append(source)
        done = subprocess.run(command, cwd=scratch, capture_output=True, text=True)
    if done.returncode != 0:
        raise DeployError(f"uv pip compile failed: {done.stderr.strip()}")
    return done.stdout


def make_lock(
    profile, profiles_sharing, locks_dir: Path = LOCKS_DIR, compile_=uv_compile, out=None, index=True
):
    """Resolve ``profile``'s lock (without ``index``: from its find-links alone), write it and
    print what moved; the path written."""
    path = lock_path(profile.engine, locks_dir)
    previous = path if path.is_file() else previous_lock(profile.name, locks_dir)
    users = {"profiles": ", ".join(sorted(profiles_sharing))}
    written = _write_lock(
        profile.engine, users, update_command(profile.name), path, previous, compile_, out, index
    )
    if previous is not None and previous != path:
        _forget_profiles(previous, profiles_sharing)
    return written


def make_router_lock(
    pins: RouterPins, locks_dir: Path = LOCKS_DIR, compile_=uv_compile, out=None, index=True
):
    """Resolve a router pin set's lock, write it and print what moved since its last lock (this
    pin set's, else the newest of the same gateway's); the path written. Older locks stay as
    they are: other router hosts may still run them."""
    path = lock_path(pins, locks_dir)
    previous = path if path.is_file() else previous_router_lock(pins.gateway, locks_dir)
    command = router_lock_command(pins)
    return _write_lock(
        pins, {"gateway": pins.gateway}, command, path, previous, compile_, out, index, "router", INDEX_URL
    )


def _write_lock(engine, users, update, path, previous, compile_, out, index, venv="engine", note=INDEX_NOTE):
    """``engine``'s closure resolved and written to ``path`` with its header (``users``: the
    line naming who installs it; ``note``: what the index line says of it); what moved since
    ``previous`` printed."""
    out = out or sys.stdout
    old = load_lock(previous) if previous else None
    started = time.monotonic()
    body = compile_(engine, find_links=engine.find_links, index=index, source=f"{venv}-packages.in")
    seconds = time.monotonic() - started
    header = {
        "pins": ", ".join(dict.fromkeys(engine.packages)),
        "platform": engine.platform,
        "python": engine.python_version,
        **users,
        "index": (note if index else "none (the find-links alone, offline)")
        + (f"; find-links: {', '.join(engine.find_links)}" if engine.find_links else ""),
        "made by": "uv pip compile --generate-hashes --python-platform "
        f"{engine.platform} --python-version {engine.python_version}",
        "update": update,
    }
    lock = parse_lock(render_lock(header, body, venv))
    moved = closure_changes(old, lock)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_lock(header, body, venv))
    print(f"{_shown(path)}: {len(lock.entries)} distributions, resolved in {seconds:.1f} s", file=out)
    since = f" since {_shown(previous)}" if previous else ""
    print(f"  {len(moved)} changes in the closure{since}", file=out)
    for line in moved:
        print(f"  {line}", file=out)
    return path


def router_locks(locks_dir: Path = LOCKS_DIR) -> list[RouterPins]:
    """The pin set of every router lock in ``locks_dir`` (its header names a gateway)."""
    found = []
    for path in sorted(Path(locks_dir).glob("*.txt")):
        lock = load_lock(path)
        if lock.header.get("gateway"):
            found.append(router_pins(lock.pins, lock.header["platform"], lock.header["python"]))
    return found


def previous_router_lock(gateway: str, locks_dir: Path = LOCKS_DIR):
    """The newest router lock of ``gateway`` (its distribution), or None."""
    found = [
        (path.stat().st_mtime, path.name, path)
        for path in Path(locks_dir).glob("*.txt")
        if load_lock(path).header.get("gateway") == gateway
    ]
    return max(found)[2] if found else None


def default_router_pins() -> RouterPins:
    """The router pin set of the settings' defaults (plan/settings.py)."""
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


def _forget_profiles(path: Path, names) -> None:
    """The old lock stays (a rollback installs it) but no longer names these profiles."""
    lock = load_lock(path)
    kept = [p.strip() for p in lock.header.get("profiles", "").split(",") if p.strip() not in names]
    header = {k: v for k, v in lock.header.items() if k != "profiles"}
    header["profiles"] = ", ".join(p for p in kept if p) or "(none now)"
    path.write_text(render_lock(header, lock.body))


def _shown(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def main(argv=None) -> int:
    from sglang_deploy.profile.schema import default_profiles, load_profile

    parser = argparse.ArgumentParser(
        prog="python -m sglang_deploy.plan.locks", description=__doc__.split("\n")[0]
    )
    parser.add_argument("command", choices=["lock"])
    parser.add_argument("profiles", nargs="*", help="profile names or files (default: every profile)")
    parser.add_argument("--no-index", action="store_true", help="resolve from the find-links alone (offline)")
    parser.add_argument(
        "--router", metavar="PINS", help="a router pin set (a==1,b==2), one gateway among them"
    )
    parser.add_argument("--router-platform", help="its hosts' platform (default: router_platform's)")
    parser.add_argument(
        "--router-python-version", help="its hosts' Python X.Y (default: router_python_version's)"
    )
    args = parser.parse_intermixed_args(argv)
    every = [load_profile(ref) for ref in default_profiles()]
    everything = not args.profiles and args.router is None
    wanted = [load_profile(ref) for ref in args.profiles] if args.profiles else every if everything else []
    done = set()
    for profile in wanted:
        name = lock_name(profile.engine)
        if name in done:
            continue
        done.add(name)
        sharing = [p.name for p in every if lock_name(p.engine) == name] or [profile.name]
        try:
            make_lock(profile, sharing, index=not args.no_index)
        except DeployError as exc:
            print(f"{profile.name}: {exc}", file=sys.stderr)
            return 1
    try:
        if args.router is not None:
            routers = [router_pins_from_args(args.router, args.router_platform, args.router_python_version)]
        else:
            routers = [*router_locks(), default_router_pins()] if everything else []
        for pins in routers:
            if lock_name(pins) not in done:
                done.add(lock_name(pins))
                make_router_lock(pins, index=not args.no_index)
    except DeployError as exc:
        print(f"router lock: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())


def node_lock_path(scripts_dir: str, engine) -> str:
    """Where the deploy puts ``engine``'s lock on a node: beside our scripts' directory."""
    return f"{scripts_dir.rsplit('/', 1)[0]}/locks/{lock_name(engine)}"
