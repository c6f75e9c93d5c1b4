"""The wheelhouse: every wheel of a lock, downloaded once on the controller and checked against
the lock's sha256s, for the deploy to upload to nodes (and router hosts) that need no route to
an index.

    python -m sglang_deploy.plan.wheelhouse PROFILE [--dir build/wheelhouse]   # make wheelhouse
    python -m sglang_deploy.plan.wheelhouse --router [PINS]     # make router-wheels [ROUTER_PIN=...]

--router without pins fills the wheelhouse of every router lock in locks/.

One directory per lock (``build/wheelhouse/<lock name>/``): a lock's hashes accept every file of
a version, for every platform, so only the wheels pip chose for this lock's platform go there.

Resumable: a wheel already there whose sha256 the lock accepts is kept; the others come from
the profile's find-links (the sandbox's stand-in), the controller's wheel cache (wheel_cache.py:
what an earlier run downloaded, outside the checkout) or the index, one distribution at a time
(`pip download --no-deps --require-hashes` for the lock's platform and Python: pip checks the
hash before it keeps the file), and what was downloaded joins the cache. A file the lock does
not accept is refused and named; a find-links wheel of a locked version that the lock does not
accept means the lock is stale (the wheel was rebuilt): named, with the command that re-locks.
The pinned uv wheel (requirements.txt) joins the lock's wheels: the hosts build venvs with it.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

from sglang_deploy.errors import DeployError
from sglang_deploy.node.lib.installed import canonical
from sglang_deploy.plan import wheel_cache
from sglang_deploy.plan.locks import (
    INDEX_URL,
    REPO,
    Lock,
    RouterPins,
    load_lock,
    lock_path,
    router_lock_command,
    router_lock_problems,
    router_locks,
    router_make_args,
    router_pins_from_args,
    update_command,
)
from sglang_deploy.plan.venv_names import wheel_identity

WHEELHOUSE = REPO / "build" / "wheelhouse"
UV_PIN = next(
    line.strip() for line in (REPO / "requirements.txt").read_text().splitlines() if line.startswith("uv==")
)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_command(profile_name: str) -> str:
    return f"make wheelhouse PROFILE={profile_name}"


def router_fetch_command(pins: RouterPins) -> str:
    return f"make router-wheels {router_make_args(pins)}"


def pip_platforms(platform: str) -> list[str]:
    """pip's --platform tags for a uv platform: ``x86_64-manylinux_2_34`` accepts every
    manylinux wheel down to glibc 2.17 (manylinux2014) and pure wheels."""
    arch, _, tag = platform.partition("-")
    newest = int(tag.rsplit("_", 1)[1])
    return [f"manylinux_2_{minor}_{arch}" for minor in range(newest, 16, -1)] + [f"manylinux2014_{arch}"]


def wheel_for(directory: Path, name: str, version: str):
    """The wheels in ``directory`` of distribution ``name`` at ``version``."""
    return [
        path
        for path in sorted(Path(directory).glob("*.whl"))
        if wheel_identity(path.name) == (canonical(name), version.replace("_", "-"))
    ]


def check_wheels(lock: Lock, directory: Path) -> tuple[dict, list[str], list[str]]:
    """({canonical name: wheel path} accepted, locked ``name==version`` without a wheel,
    refusals: wheels of a locked version whose sha256 the lock does not accept)."""
    accepted, missing, refused = {}, [], []
    for key, entry in sorted(lock.entries.items()):
        found = wheel_for(directory, entry.name, entry.version)
        good = [path for path in found if sha256(path) in entry.hashes]
        refused += [
            f"{path.name}: sha256 {sha256(path)} is not one the lock accepts for {entry.name}=={entry.version}"
            for path in found
            if path not in good
        ]
        if good:
            accepted[key] = good[0]
        else:
            missing.append(f"{entry.name}=={entry.version}")
    return accepted, missing, refused


def missing_message(missing, fetch: str, directory) -> str:
    """``missing`` locked wheels named, with ``fetch``: the command that fetches them."""
    return (
        f"the wheelhouse {directory} lacks {len(missing)} locked wheels ({', '.join(missing[:10])}"
        f"{', ...' if len(missing) > 10 else ''}): `{fetch}` fetches them"
    )


def lock_wheels_dir(engine, root: Path = WHEELHOUSE) -> Path:
    return Path(root) / lock_path(engine).stem


def build(profile, root: Path = WHEELHOUSE, download=None, out=None, cache: Path | None = None) -> dict:
    """Fill ``profile``'s lock's directory under ``root`` with its locked wheels; {canonical
    name: path}. DeployError naming every wheel refused or not found."""
    engine = profile.engine
    return _fill(
        load_lock(lock_path(engine)),
        engine,
        lock_wheels_dir(engine, root),
        fetch_command(profile.name),
        update_command(profile.name),
        download,
        out,
        cache,
    )


def build_router(pins: RouterPins, root: Path = WHEELHOUSE, download=None, out=None, cache=None) -> dict:
    """Fill a router pin set's lock's directory under ``root`` with its locked wheels, as
    build() does for a profile's; DeployError when the pin set has no lock, naming the
    command that makes it."""
    problems = router_lock_problems(pins)
    if problems:
        raise DeployError("; ".join(problems))
    return _fill(
        load_lock(lock_path(pins)),
        pins,
        lock_wheels_dir(pins, root),
        router_fetch_command(pins),
        router_lock_command(pins),
        download,
        out,
        cache,
    )


def _fill(lock: Lock, engine, directory: Path, fetch: str, relock: str, download, out, cache) -> dict:
    """``directory`` filled with ``lock``'s wheels for ``engine``'s platform: kept, from its
    find-links or the cache, else downloaded; {canonical name: path}. ``fetch`` and ``relock``:
    the commands the errors name."""
    out = out or sys.stdout
    cache = wheel_cache.CACHE if cache is None else cache
    directory.mkdir(parents=True, exist_ok=True)
    accepted, missing, refused = check_wheels(lock, directory)
    for path in [Path(r.split(":", 1)[0]) for r in refused]:
        (directory / path).unlink()  # a refused file goes: a later run downloads the right one
    stale, cached = [], 0
    for source in [REPO / link for link in engine.find_links] + [Path(cache)]:
        for wanted in list(missing) if source.is_dir() else []:
            name, _, version = wanted.partition("==")
            found = wheel_for(source, name, version)
            good = [path for path in found if sha256(path) in lock.entries[canonical(name)].hashes]
            if good:
                wheel_cache.place(good[0], directory)
                missing.remove(wanted)
                cached += source == Path(cache)
            elif found and source != Path(cache):
                stale.append(
                    f"{found[0]}: sha256 {sha256(found[0])} is not the one the lock has for {wanted}"
                )
                missing.remove(wanted)  # rebuilt here: no index has it
    if stale:
        raise DeployError(f"stale lock: {'; '.join(stale)}: `{relock}` re-locks it")
    print(
        f"{directory}: {len(accepted)} locked wheels present, {cached} from the cache {cache}, "
        f"{len(missing)} to download",
        file=out,
    )
    before = set(directory.glob("*.whl"))
    (download or pip_download)(lock, [m for m in missing], directory, engine)
    accepted, missing, refused = check_wheels(lock, directory)
    wheel_cache.keep([p for p in accepted.values() if p not in before], cache)
    if refused or missing:
        problems = refused + ([missing_message(missing, fetch, directory)] if missing else [])
        raise DeployError("; ".join(problems))
    print(f"{directory}: all {len(accepted)} wheels of {directory.name}.txt match the lock", file=out)
    return accepted


def pip_download(lock: Lock, wanted, directory: Path, engine) -> None:
    """Each wanted ``name==version`` for the lock's platform, its hashes required."""
    if not wanted:
        return
    with tempfile.TemporaryDirectory() as scratch:
        requirements = Path(scratch) / "wanted.txt"
        lines = []
        for pin in wanted:
            entry = lock.entries[canonical(pin.partition("==")[0])]
            lines.append(pin + " " + " ".join(f"--hash=sha256:{h}" for h in sorted(entry.hashes)))
        requirements.write_text("\n".join(lines) + "\n")
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes"]
        command += ["--only-binary=:all:", "--index-url", INDEX_URL, "-d", str(directory)]
        command += ["--python-version", engine.python_version, "--implementation", "cp"]
        for tag in pip_platforms(engine.platform):
            command += ["--platform", tag]
        done = subprocess.run([*command, "-r", str(requirements)], capture_output=True, text=True)
        if done.returncode != 0:
            raise DeployError(f"pip download failed: {done.stderr.strip()[-2000:]}")


def uv_wheel(
    directory: Path,
    platform: str,
    sources=(),
    cache: Path | None = None,
) -> Path:
    """The pinned uv wheel for the nodes' platform in ``directory``: from ``sources`` (the
    profile's find-links) or the cache when there, else downloaded once (and cached)."""
    cache = wheel_cache.CACHE if cache is None else cache
    version = UV_PIN.partition("==")[2]
    found = wheel_for(directory, "uv", version)
    for source in [*sources, cache]:
        if not found and Path(source).is_dir() and wheel_for(source, "uv", version):
            found = [wheel_cache.place(wheel_for(source, "uv", version)[0], directory)]
    if not found:
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
        command += ["--index-url", INDEX_URL, "-d", str(directory), UV_PIN]
        for tag in pip_platforms(platform):
            command += ["--platform", tag]
        subprocess.run(command, check=True)
        found = wheel_for(directory, "uv", version)
        wheel_cache.keep(found, cache)
    return found[0]


def main(argv=None) -> int:
    from sglang_deploy.profile.schema import load_profile

    parser = argparse.ArgumentParser(prog="python -m sglang_deploy.plan.wheelhouse")
    parser.add_argument("profile", nargs="?")
    parser.add_argument("--dir", type=Path, default=WHEELHOUSE)
    parser.add_argument(
        "--router",
        nargs="?",
        const="",
        metavar="PINS",
        help="a router pin set's wheels (none: every router lock's)",
    )
    parser.add_argument("--router-platform", help="its hosts' platform (default: router_platform's)")
    parser.add_argument(
        "--router-python-version", help="its hosts' Python X.Y (default: router_python_version's)"
    )
    args = parser.parse_args(argv)
    if (args.profile is None) == (args.router is None):
        parser.error("a PROFILE or --router [PINS]")
    if args.router is not None:
        return _router_main(args)
    profile = load_profile(args.profile)
    try:
        build(profile, args.dir)
        uv = uv_wheel(
            lock_wheels_dir(profile.engine, args.dir),
            profile.engine.platform,
            sources=[REPO / link for link in profile.engine.find_links],
        )
        print(f"uv for the nodes: {uv.name}")
    except DeployError as exc:
        print(f"{profile.name}: {exc}", file=sys.stderr)
        return 1
    return 0


def _router_main(args) -> int:
    try:
        if args.router:
            every = [router_pins_from_args(args.router, args.router_platform, args.router_python_version)]
        else:
            every = router_locks()
        for pins in every:
            build_router(pins, args.dir)
            uv = uv_wheel(lock_wheels_dir(pins, args.dir), pins.platform)
            print(f"uv for the router hosts: {uv.name}")
    except DeployError as exc:
        print(f"router wheels: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
