"""The wheelhouse: every wheel of a lock, downloaded once on the controller and checked against
the lock's sha256s, for the deploy to upload to nodes that need no route to an index.

    python -m sglang_deploy.plan.wheelhouse PROFILE [--dir build/wheelhouse]   # make wheelhouse

One directory per lock (``build/wheelhouse/<lock name>/``): a lock's hashes accept every file of
a version, for every platform, so only the wheels pip chose for this lock's platform go there.

Resumable: a wheel already there whose sha256 the lock accepts is kept; the others come from
the profile's find-links (the sandbox's stand-in), the controller's wheel cache (wheel_cache.py:
what an earlier run downloaded, outside the checkout) or the index, one distribution at a time
(`pip download --no-deps --require-hashes` for the lock's platform and Python: pip checks the
hash before it keeps the file), and what was downloaded joins the cache. A file the lock does
not accept is refused and named; a find-links wheel of a locked version that the lock does not
accept means the lock is stale (the wheel was rebuilt): named, with the command that re-locks.
The pinned uv wheel (requirements.txt) joins the engine's wheels: the nodes build venvs with it.
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
from sglang_deploy.plan.locks import INDEX_URL, REPO, Lock, load_lock, lock_path, update_command
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


def missing_message(missing, profile_name, directory) -> str:
    return (
        f"the wheelhouse {directory} lacks {len(missing)} locked wheels ({', '.join(missing[:10])}"
        f"{', ...' if len(missing) > 10 else ''}): `{fetch_command(profile_name)}` fetches them"
    )


def lock_wheels_dir(engine, root: Path = WHEELHOUSE) -> Path:
    return Path(root) / lock_path(engine).stem


def build(profile, root: Path = WHEELHOUSE, download=None, out=None, cache: Path | None = None) -> dict:
    """Fill ``profile``'s lock's directory under ``root`` with its locked wheels; {canonical
    name: path}. DeployError naming every wheel refused or not found."""
    out = out or sys.stdout
    cache = wheel_cache.CACHE if cache is None else cache
    engine = profile.engine
    directory = lock_wheels_dir(engine, root)
    lock = load_lock(lock_path(engine))
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
        raise DeployError(f"stale lock: {'; '.join(stale)}: `{update_command(profile.name)}` re-locks it")
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
        problems = refused + ([missing_message(missing, profile.name, directory)] if missing else [])
        raise DeployError("; ".join(problems))
    print(f"{directory}: all {len(accepted)} wheels of {lock_path(engine).name} match the lock", file=out)
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
    directory: Path = WHEELHOUSE,
    platform: str = "x86_64-manylinux_2_34",
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
    parser.add_argument("profile")
    parser.add_argument("--dir", type=Path, default=WHEELHOUSE)
    args = parser.parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())
