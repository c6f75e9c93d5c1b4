#!/usr/bin/env python3
"""Venv build from one lock and its wheelhouse: pip vs uv, median of 3 each.

    python3 bench/venv_build.py [PROFILE]                  # on this machine (default: sandbox)
    python3 bench/venv_build.py [PROFILE] --host node1     # on a (bare) sandbox node, over SSH
    python3 bench/venv_build.py --closure baseline-py311 --resolve-only   # its lock; what is cached
    python3 bench/venv_build.py --closure baseline-py311 --download       # SGLang 0.5.23's closure

Every build installs exactly the lock into a fresh `python -m venv --copies --without-pip`
(as the deploy builds a locked venv): hashes required, no dependency resolution, no index,
the wheelhouse as the only source, no cache (pip --no-cache-dir, uv --no-cache: a node's first
build). The figure is the venv's creation plus the install. Four arms, because pip compiles
every module to .pyc by default and uv does not:

    pip                    pip's default (compiles .pyc): what an unlocked deploy's pip does
    pip --no-compile       pip without .pyc
    uv                     uv's default (no .pyc): the deploy's command (operations/engine.py)
    uv --compile-bytecode  uv with .pyc

The fair ratios are pip / uv --compile-bytecode (both compile) and pip --no-compile / uv
(neither does); pip / uv is what the deploy's switch to uv changed. The arms take turns in
each round (the order rotates), so the page cache favours none. Each arm's venv is measured
after its last build: installed size, .pyc files, distributions (the lock's count when the
build is exact).

pip is a pip wheel run from its unpacked copy by the venv's own interpreter (PYTHONPATH), so
the venv stays without pip like a locked one: by default Debian's python3-pip-whl wheel
(/usr/share/python-wheels, the pip that `python3 -m venv` puts into a node's venvs) when this
machine has it, else this Python's ensurepip wheel (--pip-wheel). uv is the binary of the
pinned uv wheel of the wheelhouse (the one the deploy installs on the nodes), unpacked.

PROFILE's lock and wheelhouse: `make wheelhouse PROFILE=<name>` first. With --host, the lock,
the wheelhouse (uv's wheel in it), the pip wheel and this file are copied into a scratch
directory on the node (tar over SSH: a bare node has no rsync), the node's python3 builds the
venvs there, and the directory is removed after. This file's `measure` command, which runs
there, uses the standard library only.

--closure baseline-py311: the baseline's pins (SGLang 0.5.23) resolved for Python 3.11 and the
baseline's platform, since the committed baseline lock is for Python 3.12, which neither the
sandbox nodes nor this machine have. The lock goes to a scratch path (made once, reused; --relock
makes it again); its wheels come from the controller's wheel cache (plan/wheel_cache.py), and
the ones it lacks are downloaded into it once with --download (several GB: torch and the
nvidia-* libraries); the bench's wheelhouse links to them. Run here only: a sandbox node shares
this machine's disk and CPUs.

Output to stdout and bench/results/venv-build-<closure>-<where>-<date>.txt (--out).
"""

import argparse
import json
import os
import platform
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARMS = ("pip", "pip --no-compile", "uv", "uv --compile-bytecode")
NODE_SCRATCH = "/var/tmp/sglang-deploy-bench-venv-build"
DEBIAN_PIP_WHEELS = Path("/usr/share/python-wheels")
CLOSURES = ("baseline-py311",)

# -- What runs where the venvs are built (standard library only: it runs on bare nodes) -----


def unpack_tools(pip_wheel, uv_wheel, directory):
    """(directory holding pip's package, the uv binary) unpacked from the two wheels."""
    pip_dir = os.path.join(directory, "pip")
    with zipfile.ZipFile(pip_wheel) as wheel:
        wheel.extractall(pip_dir)
    uv = os.path.join(directory, "uv")
    with zipfile.ZipFile(uv_wheel) as wheel:
        member = next(n for n in wheel.namelist() if n.endswith(".data/scripts/uv"))
        with wheel.open(member) as source, open(uv, "wb") as target:
            shutil.copyfileobj(source, target)
    os.chmod(uv, 0o755)
    return pip_dir, uv


def install_command(arm, venv, lock, wheels, pip_dir, uv):
    """(argv, extra environment) installing exactly ``lock`` into ``venv`` from ``wheels``."""
    python = os.path.join(venv, "bin", "python")
    offline = ["--require-hashes", "--no-deps", "--no-index", "--find-links", wheels, "-r", lock]
    if arm.startswith("pip"):
        argv = [python, "-m", "pip", "install", "--quiet", "--no-input", "--disable-pip-version-check"]
        argv += ["--no-cache-dir", *offline] + (["--no-compile"] if arm == "pip --no-compile" else [])
        return argv, {"PYTHONPATH": pip_dir, "PIP_ROOT_USER_ACTION": "ignore"}
    argv = [uv, "pip", "install", "--quiet", "--python", python, "--no-config", "--no-cache", *offline]
    # As the deploy runs it (operations/engine.py UV_REPRODUCIBLE): no install-time metadata.
    return argv + (["--compile-bytecode"] if arm == "uv --compile-bytecode" else []), {
        "UV_NO_INSTALLER_METADATA": "1"
    }


def build(arm, python, lock, wheels, pip_dir, uv, venv):
    """Seconds of one build of ``venv`` (created, then the lock installed), and of its creation."""
    shutil.rmtree(venv, ignore_errors=True)
    started = time.monotonic()
    subprocess.run([python, "-m", "venv", "--copies", "--without-pip", venv], check=True)
    created = time.monotonic()
    argv, env = install_command(arm, venv, lock, wheels, pip_dir, uv)
    subprocess.run(argv, check=True, env={**os.environ, **env})
    return time.monotonic() - started, created - started


def venv_size(venv):
    """(bytes of every file under ``venv``, links not followed; .pyc files; dist-info dirs)."""
    size = pyc = dists = 0
    for root, dirs, files in os.walk(venv):
        dists += sum(1 for d in dirs if d.endswith(".dist-info"))
        for name in files:
            size += os.lstat(os.path.join(root, name)).st_size
            pyc += name.endswith(".pyc")
    return size, pyc, dists


def measure(python, lock, wheels, pip_wheel, uv_wheel, scratch, runs, arms, log=sys.stderr):
    """Every arm ``runs`` times, taking turns; the figures as a dict (JSON-ready)."""
    os.makedirs(scratch, exist_ok=True)
    work = tempfile.mkdtemp(prefix="venv-build-", dir=scratch)
    try:
        pip_dir, uv = unpack_tools(pip_wheel, uv_wheel, work)
        figures = {arm: {"seconds": [], "venv_s": []} for arm in arms}
        for round_ in range(runs):
            turn = list(arms[round_ % len(arms) :]) + list(arms[: round_ % len(arms)])
            for arm in turn:
                venv = os.path.join(work, "venv")
                seconds, created = build(arm, python, lock, wheels, pip_dir, uv, venv)
                figures[arm]["seconds"].append(round(seconds, 3))
                figures[arm]["venv_s"].append(round(created, 3))
                if round_ == runs - 1:
                    size, pyc, dists = venv_size(venv)
                    figures[arm].update(size=size, pyc=pyc, distributions=dists)
                shutil.rmtree(venv)
                print(f"  round {round_ + 1} {arm}: {seconds:.2f} s", file=log, flush=True)
        version = subprocess.run([python, "--version"], capture_output=True, text=True)
        return {
            "machine": f"{socket.gethostname()} ({platform.machine()}, {platform.platform()})",
            "cpus": os.cpu_count(),
            "python": (version.stdout or version.stderr).strip(),
            "pip": os.path.basename(pip_wheel).split("-")[1],
            "uv": subprocess.run([uv, "--version"], capture_output=True, text=True).stdout.strip(),
            "arms": figures,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def measure_main(argv):
    parser = argparse.ArgumentParser(prog="venv_build.py measure")
    parser.add_argument("--python", default="python3")
    for name in ("--lock", "--wheels", "--pip-wheel", "--uv-wheel", "--scratch"):
        parser.add_argument(name, required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--arms", default=",".join(ARMS))
    args = parser.parse_args(argv)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    figures = measure(
        args.python, args.lock, args.wheels, args.pip_wheel, args.uv_wheel, args.scratch, args.runs, arms
    )
    print(json.dumps(figures))
    return 0


# -- The controller ---------------------------------------------------------------------------


def default_pip_wheel():
    """Debian's pip wheel (what a node's `python3 -m venv` installs), else ensurepip's."""
    found = sorted(DEBIAN_PIP_WHEELS.glob("pip-*.whl"))
    if not found:
        import ensurepip

        found = sorted((Path(ensurepip.__file__).parent / "_bundled").glob("pip-*.whl"))
    if not found:
        sys.exit("no pip wheel here (neither /usr/share/python-wheels nor ensurepip's): --pip-wheel PATH")
    return found[-1]


def profile_lock(profile_ref):
    """(label, lock path, wheelhouse directory, uv wheel) of a profile's committed lock."""
    from sglang_deploy.plan.locks import load_lock, lock_path
    from sglang_deploy.plan.wheelhouse import UV_PIN, check_wheels, fetch_command, lock_wheels_dir, wheel_for
    from sglang_deploy.profile.schema import load_profile

    profile = load_profile(profile_ref)
    lock, wheels = lock_path(profile.engine), lock_wheels_dir(profile.engine)
    if not lock.is_file():
        sys.exit(f"{profile.name}: no lock ({lock.name}): `make lock PROFILE={profile.name}`")
    _, missing, refused = check_wheels(load_lock(lock), wheels) if wheels.is_dir() else ({}, ["all"], [])
    uv = wheel_for(wheels, "uv", UV_PIN.partition("==")[2]) if wheels.is_dir() else []
    if missing or refused or not uv:
        sys.exit(f"{profile.name}: the wheelhouse {wheels} is not complete: `{fetch_command(profile.name)}`")
    return profile.name, lock, wheels, uv[0]


def bench_dir():
    from sglang_deploy.plan import wheel_cache

    return Path(wheel_cache.CACHE).parent / "bench"


def py311_engine():
    """The baseline's engine pins and platform, for Python 3.11."""
    from types import SimpleNamespace

    from sglang_deploy.profile.schema import load_profile

    engine = load_profile("baseline").engine
    return SimpleNamespace(packages=list(engine.packages), platform=engine.platform, python_version="3.11")


def py311_lock(relock, say):
    """The scratch lock of the baseline's pins for Python 3.11: made when absent (or relock)."""
    from sglang_deploy.plan import lock_make, locks

    engine = py311_engine()
    path = bench_dir() / "locks" / locks.lock_name(engine)
    if path.is_file() and not relock:
        say(
            f"lock {path} (made {time.strftime('%Y-%m-%d %H:%M', time.localtime(path.stat().st_mtime))}, reused)"
        )
        return engine, path, locks.load_lock(path)
    started = time.monotonic()
    body = lock_make.uv_compile(engine, index=True)
    header = {
        "pins": ", ".join(engine.packages),
        "platform": engine.platform,
        "python": engine.python_version,
        "profiles": "(none: bench/venv_build.py --closure baseline-py311)",
        "index": locks.INDEX_NOTE,
        "made by": "uv pip compile --generate-hashes --python-platform "
        f"{engine.platform} --python-version {engine.python_version}",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(lock_make.render_lock(header, body))
    lock = locks.load_lock(path)
    say(f"lock {path}: {len(lock.entries)} distributions, resolved in {time.monotonic() - started:.1f} s")
    return engine, path, lock


def link_cached(lock, directory, cache):
    """Link every locked wheel the cache holds (its sha256 accepted) into ``directory``; the
    locked ``name==version`` it lacks."""
    from sglang_deploy.plan.wheelhouse import sha256, wheel_for

    directory.mkdir(parents=True, exist_ok=True)
    missing = []
    for key, entry in sorted(lock.entries.items()):
        present = [p for p in wheel_for(directory, entry.name, entry.version) if p.exists()]
        if any(sha256(p) in entry.hashes for p in present):
            continue
        good = [
            p for p in wheel_for(cache, entry.name, entry.version) if sha256(p) in lock.entries[key].hashes
        ]
        if good:
            target = directory / good[0].name
            target.unlink(missing_ok=True)
            target.symlink_to(good[0])
        else:
            missing.append(f"{entry.name}=={entry.version}")
    return missing


def py311_wheelhouse(engine, lock, download, say):
    """The bench wheelhouse of the 3.11 lock (links into the wheel cache, plus uv's wheel);
    what the cache lacks is downloaded into it only with ``download``."""
    from sglang_deploy.errors import DeployError
    from sglang_deploy.plan import wheel_cache
    from sglang_deploy.plan.locks import lock_name
    from sglang_deploy.plan.wheelhouse import pip_download, uv_wheel

    cache = Path(wheel_cache.CACHE)
    directory = bench_dir() / "wheelhouse" / Path(lock_name(engine)).stem
    missing = link_cached(lock, directory, cache)
    if missing and not download:
        return directory, missing
    if missing:
        say(f"downloading {len(missing)} wheels into the cache {cache} (once) ...")
        failed = []
        # One distribution at a time, each kept in the cache as it arrives: an interrupted or
        # failed download resumes with what is missing.
        for n, pin in enumerate(missing, 1):
            with tempfile.TemporaryDirectory(prefix="venv-build-download-", dir=bench_dir()) as scratch:
                try:
                    pip_download(lock, [pin], Path(scratch), engine)
                except DeployError as exc:
                    failed.append(f"{pin}: {str(exc).splitlines()[-1]}")
                    continue
                arrived = sorted(Path(scratch).glob("*.whl"))
                wheel_cache.keep(arrived, cache)
                say(
                    f"  {n}/{len(missing)} {', '.join(f'{p.name} {p.stat().st_size / 1e6:.0f} MB' for p in arrived)}"
                )
        for line in failed:
            say(f"  not downloaded: {line}")
        missing = link_cached(lock, directory, cache)
    uv_wheel(directory, engine.platform)
    return directory, missing


def node_python_version(node):
    return node.ssh("python3 -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])'").strip()


def measure_on_node(node, lock, wheels, pip_wheel, uv_wheel, runs, arms, say):
    """Copy what the build needs into a scratch directory on ``node``, measure there, remove it."""
    scratch = NODE_SCRATCH
    with tempfile.TemporaryDirectory(prefix="venv-build-stage-") as stage:
        stage = Path(stage)
        (stage / "wheels").mkdir()
        for wheel in sorted(wheels.glob("*.whl")):
            (stage / "wheels" / wheel.name).symlink_to(wheel.resolve())
        (stage / "lock.txt").symlink_to(lock.resolve())
        (stage / pip_wheel.name).symlink_to(pip_wheel.resolve())
        (stage / "venv_build.py").symlink_to(Path(__file__).resolve())
        started = time.monotonic()
        pack = subprocess.Popen(["tar", "-C", str(stage), "-chf", "-", "."], stdout=subprocess.PIPE)
        unpack = f"rm -rf {scratch} && mkdir -p {scratch} && tar -C {scratch} -xf -"
        subprocess.run(node.ssh_argv(unpack), stdin=pack.stdout, check=True)
        pack.stdout.close()
        if pack.wait() != 0:
            sys.exit("tar of the wheelhouse failed")
        say(f"copied the lock, {len(list(wheels.glob('*.whl')))} wheels and pip to {node.name}:{scratch} "
            f"in {time.monotonic() - started:.1f} s")  # fmt: skip
    command = " ".join(
        shlex.quote(word)
        for word in [
            "python3",
            f"{scratch}/venv_build.py",
            "measure",
            "--python",
            "python3",
            "--lock",
            f"{scratch}/lock.txt",
            "--wheels",
            f"{scratch}/wheels",
            "--pip-wheel",
            f"{scratch}/{pip_wheel.name}",
            "--uv-wheel",
            f"{scratch}/wheels/{uv_wheel.name}",
            "--scratch",
            f"{scratch}/venvs",
            "--runs",
            str(runs),
            "--arms",
            ",".join(arms),
        ]  # fmt: skip
    )
    try:
        done = subprocess.run(node.ssh_argv(command), stdout=subprocess.PIPE, text=True, timeout=3600)
    finally:
        node.ssh(f"rm -rf {scratch}", check=False)
    if done.returncode != 0:
        sys.exit(f"{node.name}: the build failed (exit {done.returncode})")
    return json.loads(done.stdout.strip().splitlines()[-1])


def ratio(a, b):
    return f"{a / b:.1f}x" if a and b else "-"


def report(out, figures, arms, title, lock_entries, wheels):
    from common import fmt_s

    out(title)
    out(
        f"{figures['machine']}, {figures['cpus']} CPUs, {figures['python']}, pip {figures['pip']}, "
        f"{figures['uv']}; {lock_entries} distributions locked, wheelhouse "
        f"{sum(p.stat().st_size for p in wheels.glob('*.whl')) / 1e6:.0f} MB (uv's wheel included)"
    )
    out()
    medians = {arm: statistics.median(figures["arms"][arm]["seconds"]) for arm in arms}
    rows = []
    for arm in arms:
        f = figures["arms"][arm]
        rows.append(
            [
                arm,
                f"{medians[arm]:.2f} ({min(f['seconds']):.2f}-{max(f['seconds']):.2f})",
                " ".join(fmt_s(s) for s in f["seconds"]),
                fmt_s(statistics.median(f["venv_s"])),
                f"{f['size'] / 1e6:.0f}",
                f["pyc"],
                f"{f['distributions']}"
                + ("" if f["distributions"] == lock_entries else " (not the lock's!)"),
            ]
        )
    out.table(
        [
            "arm",
            "build s median (min-max)",
            "runs s",
            "of it venv s",
            "installed MB",
            ".pyc",
            "distributions",
        ],
        rows,
    )
    out()
    pairs = [
        ("both compile .pyc", "pip", "uv --compile-bytecode"),
        ("neither compiles .pyc", "pip --no-compile", "uv"),
        ("each one's default: what the deploy's switch from pip to uv changed", "pip", "uv"),
    ]
    out("ratios (goal: uv >= 5x):")
    for label, slow, fast in pairs:
        if slow in medians and fast in medians:
            out(f"  {slow} / {fast}: {ratio(medians[slow], medians[fast])} ({label})")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["measure"]:
        return measure_main(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "profile", nargs="?", default="sandbox", help="whose lock and wheelhouse (default: sandbox)"
    )
    parser.add_argument("--closure", choices=CLOSURES, help="a closure of its own instead of PROFILE's lock")
    parser.add_argument("--host", help="build on this node of --inventory, over SSH")
    parser.add_argument("--inventory", default="inventory/sandbox.py")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of: {', '.join(ARMS)}")
    parser.add_argument("--python", default="python3", help="the interpreter making the venvs here")
    parser.add_argument("--pip-wheel", type=Path, help="default: Debian's, else ensurepip's")
    parser.add_argument("--scratch", default=tempfile.gettempdir(), help="where the venvs are built here")
    parser.add_argument("--download", action="store_true", help="--closure: download what the cache lacks")
    parser.add_argument("--resolve-only", action="store_true", help="--closure: lock and count, no build")
    parser.add_argument("--relock", action="store_true", help="--closure: resolve its lock again")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        parser.error(f"unknown arms {unknown}: of {', '.join(ARMS)}")
    if args.closure and args.host:
        parser.error("--closure runs here only: a sandbox node shares this machine's disk and CPUs")
    sys.path.insert(0, str(REPO / "bench"))
    sys.path.insert(0, str(REPO))
    from common import Report, node_of

    from sglang_deploy.plan.locks import load_lock

    out = Report()
    pip_wheel = args.pip_wheel or default_pip_wheel()
    if args.closure:
        from sglang_deploy.errors import DeployError

        try:
            engine, lock, parsed = py311_lock(args.relock, print)
            wheels, missing = py311_wheelhouse(engine, parsed, args.download and not args.resolve_only, print)
        except DeployError as exc:
            sys.exit(f"{args.closure}: {exc}")
        print(
            f"wheelhouse {wheels}: {len(parsed.entries) - len(missing)} of {len(parsed.entries)} wheels cached"
        )
        if args.resolve_only:
            return 0
        if missing:
            print(
                f"the wheel cache lacks {len(missing)} locked wheels ({', '.join(missing[:8])}"
                f"{', ...' if len(missing) > 8 else ''}): `python3 bench/venv_build.py --closure "
                f"{args.closure} --download` downloads them once (several GB)",
                file=sys.stderr,
            )
            return 2
        from sglang_deploy.plan.wheelhouse import UV_PIN, wheel_for

        uv_wheel = wheel_for(wheels, "uv", UV_PIN.partition("==")[2])[0]
        label = args.closure
    else:
        label, lock, wheels, uv_wheel = profile_lock(args.profile)
        parsed = load_lock(lock)
    lock_python = parsed.header.get("python")
    if args.host:
        node = node_of(args.inventory, args.host)
        found = node_python_version(node)
        if found != lock_python:
            sys.exit(f"{node.name}'s python3 is {found}, the lock {lock.name} is for {lock_python}")
        figures = measure_on_node(node, lock, wheels, pip_wheel, uv_wheel, args.runs, arms, print)
        where = node.name
    else:
        found = subprocess.run(
            [args.python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        if found != lock_python:
            sys.exit(f"{args.python} is Python {found}, the lock {lock.name} is for {lock_python}: --python")
        figures = measure(
            args.python, str(lock), str(wheels), str(pip_wheel), str(uv_wheel), args.scratch, args.runs, arms
        )
        where = "local"
    title = (
        f"Venv build of {lock.name} ({label}) on {where}: pip vs uv, median of {args.runs} "
        f"({time.strftime('%Y-%m-%d %H:%M')})"
    )
    report(out, figures, arms, title, len(parsed.entries), wheels)
    path = (
        args.out or REPO / "bench" / "results" / f"venv-build-{label}-{where}-{time.strftime('%Y-%m-%d')}.txt"
    )
    out.save(path)
    print(f"saved to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
