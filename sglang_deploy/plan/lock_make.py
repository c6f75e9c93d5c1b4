"""Making locks (plan/locks.py says what a lock is): uv resolves a pin set's closure for its
hosts' platform; the lock is written with its header, and what moved since the last one printed.

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
cannot.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sglang_deploy.errors import DeployError
from sglang_deploy.plan.locks import (
    INDEX_NOTE,
    INDEX_URL,
    LOCKS_DIR,
    REPO,
    Lock,
    RouterPins,
    default_router_pins,
    load_lock,
    lock_name,
    lock_path,
    parse_lock,
    previous_lock,
    repo_relative,
    router_lock_command,
    router_locks,
    router_pins_from_args,
    update_command,
)


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
    print(f"{repo_relative(path)}: {len(lock.entries)} distributions, resolved in {seconds:.1f} s", file=out)
    since = f" since {repo_relative(previous)}" if previous else ""
    print(f"  {len(moved)} changes in the closure{since}", file=out)
    for line in moved:
        print(f"  {line}", file=out)
    return path


def previous_router_lock(gateway: str, locks_dir: Path = LOCKS_DIR):
    """The newest router lock of ``gateway`` (its distribution), or None."""
    found = [
        (path.stat().st_mtime, path.name, path)
        for path in Path(locks_dir).glob("*.txt")
        if load_lock(path).header.get("gateway") == gateway
    ]
    return max(found)[2] if found else None


def _forget_profiles(path: Path, names) -> None:
    """The old lock stays (a rollback installs it) but no longer names these profiles."""
    lock = load_lock(path)
    kept = [p.strip() for p in lock.header.get("profiles", "").split(",") if p.strip() not in names]
    header = {k: v for k, v in lock.header.items() if k != "profiles"}
    header["profiles"] = ", ".join(p for p in kept if p) or "(none now)"
    path.write_text(render_lock(header, lock.body))


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
