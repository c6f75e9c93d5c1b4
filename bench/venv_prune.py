#!/usr/bin/env python3
"""Disk a pruned engine venv gives back: uv with one shared cache (as the deploy installed
until now) vs the deploy's command today (an install's own cache, removed after), and the
wheelhouse of a lock no venv is left of.

    python3 bench/venv_prune.py [--mb 600] [--wheels 6] [--no-mount] [--out PATH]

A closure of --wheels fake distributions, --mb MB in all (incompressible bytes, built here as
wheels: no network), is locked with its sha256s and installed into a fresh `python -m venv
--copies --without-pip` exactly as the deploy installs a lock (hashes required, no deps, the
wheelhouse alone), once per arm; then the venv is pruned (rm -rf, as old_venvs_pruned does)
and, in the deploy's arm, the wheelhouse too (venvs.py: the venv was registered with its lock
when marked; wheelhouses_to_remove says it goes once no venv of it is left and it is a day
old). The arms:

    shared cache   uv's cache at one place for every build (root's ~/.cache/uv on a node): uv
                   hard-links the venv's files from it, so removing the venv frees nothing
    own cache      operations/engine.py locked_install: --cache-dir inside the venv, removed
                   once the install succeeded

Disk figures are the filesystem's own (statvfs) on a tmpfs mounted for the run (nothing else
writes there; --no-mount: a temporary directory, where other writers add noise), beside the
bytes left in the cache and the wheelhouse. uv is this Python's (`python3 -m uv`, the uv
package the controller locks with), at the version the deploy pins on nodes where it matches.

Output to stdout and bench/results/venv-prune-<date>.txt (--out).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from common import Report  # noqa: E402

from sglang_deploy.node import venvs  # noqa: E402
from sglang_deploy.operations.engine import UV_REPRODUCIBLE, locked_install  # noqa: E402
from sglang_deploy.plan.venv_names import WHEELHOUSE_RECENT_S, wheelhouses_to_remove  # noqa: E402

MB = 1 << 20
FILES_PER_WHEEL = 4  # a few large files each, as torch's and nvidia-*'s shared libraries are


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def fake_wheel(directory, name, size):
    """A wheel of distribution ``name`` 1.0 holding ``size`` incompressible bytes (stored, not
    deflated: building it stays quick); its path."""
    path = Path(directory) / f"{name}-1.0-py3-none-any.whl"
    info = f"{name}-1.0.dist-info"
    members = {
        f"{name}/__init__.py": b"",
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    members[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode()
    for n in range(FILES_PER_WHEEL):
        members[f"{name}/lib{n}.so"] = os.urandom(size // FILES_PER_WHEEL)
    record = [_record_line(member, data) for member, data in members.items()] + [f"{info}/RECORD,,"]
    members[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as wheel:
        for member, data in members.items():
            wheel.writestr(member, data)
    return path


def closure(directory, total, count):
    """The wheelhouse (``count`` wheels, ``total`` bytes) and its lock, as `make lock` writes one."""
    wheels = Path(directory) / "wheelhouse" / "bench-lock"
    wheels.mkdir(parents=True)
    lock = Path(directory) / "locks" / "bench-lock.txt"
    lock.parent.mkdir(parents=True)
    lines = []
    for n in range(count):
        wheel = fake_wheel(wheels, f"benchfake{n}", total // count)
        lines.append(
            f"benchfake{n}==1.0 \\\n    --hash=sha256:{hashlib.sha256(wheel.read_bytes()).hexdigest()}"
        )
    lock.write_text("\n".join(lines) + "\n")
    return wheels, lock


def used(path):
    stat = os.statvfs(path)
    return (stat.f_blocks - stat.f_bfree) * stat.f_frsize


def tree_bytes(path):
    """Bytes of the files under ``path`` (each file once, links not followed)."""
    seen, found = set(), 0
    for root, _, files in os.walk(path):
        for name in files:
            info = os.lstat(os.path.join(root, name))
            if (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                found += info.st_size
    return found


def uv_command():
    return f"{sys.executable} -m uv"


def shared_cache_install(venv, lock, wheels):
    """The command as the deploy ran it before: uv's cache wherever UV_CACHE_DIR says (root's
    ~/.cache/uv on a node), never removed."""
    return (
        f"{UV_REPRODUCIBLE} {uv_command()} pip install --python={venv}/bin/python --require-hashes "
        f"--no-deps --no-config --no-index --find-links {wheels} -r {lock}"
    )


def arm(name, scratch, wheels, lock, command_for):
    """Build, measure, prune; the figures (bytes) of one arm."""
    cache = scratch / "root-cache-uv"  # what UV_CACHE_DIR / ~/.cache/uv is on a node
    cache.mkdir()
    venv = scratch / "venvs" / f"bench-{name.replace(' ', '-')}"
    venv.parent.mkdir(exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", "--copies", "--without-pip", str(venv)], check=True)
    before = used(scratch)
    env = {**os.environ, "UV_CACHE_DIR": str(cache)}
    started = time.monotonic()
    done = subprocess.run(
        command_for(venv, lock, wheels), shell=True, env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        sys.exit(f"{name}: the install failed: {done.stderr.strip()}")
    took = time.monotonic() - started
    with contextlib.redirect_stdout(io.StringIO()):  # its result line
        venvs.mark(str(venv), str(lock))  # as the deploy's build ends
    built = used(scratch)
    installed = tree_bytes(venv)
    shutil.rmtree(venv)  # old_venvs_pruned
    pruned = used(scratch)
    figures = {
        "installed": installed,
        "build": built - before,
        "freed": built - pruned,
        "cache": tree_bytes(cache),
        "seconds": took,
    }
    # The lock's wheelhouse: kept by the deploy until now; today it goes once no venv of it is
    # left (and it is older than a day: aged here, as a later deploy finds it).
    house = venvs.wheelhouses(str(scratch))
    old = time.time() - WHEELHOUSE_RECENT_S - 60
    os.utime(lock, (old, old))
    os.utime(wheels, (old, old))
    stale = wheelhouses_to_remove(venvs.wheelhouses(str(scratch)), [str(venv)], keep=None)
    figures["wheelhouse"] = house[0]["bytes"]
    figures["wheelhouse_freed"] = 0
    if name == "own cache" and stale == ["bench-lock"]:
        at = used(scratch)
        shutil.rmtree(wheels)
        figures["wheelhouse_freed"] = at - used(scratch)
        figures["wheelhouse"] = 0
    shutil.rmtree(cache)
    return figures


def mount_scratch(size_mb):
    """A tmpfs of its own (the filesystem's figures are then the run's alone), or None."""
    where = Path(tempfile.mkdtemp(prefix="venv-prune-"))
    if os.geteuid() != 0:
        return where, False
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(where)], capture_output=True
    )
    return where, done.returncode == 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=600, help="the closure's size (wheels), MB")
    parser.add_argument("--wheels", type=int, default=6)
    parser.add_argument("--no-mount", action="store_true", help="a temporary directory, not a tmpfs")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    out = Report()
    scratch, mounted = (
        (Path(tempfile.mkdtemp(prefix="venv-prune-")), False)
        if args.no_mount
        else mount_scratch(4 * args.mb + 256)
    )
    try:
        rows, figures = [], {}
        for name, command_for in (
            ("shared cache", shared_cache_install),
            (
                "own cache",
                lambda venv, lock, wheels: locked_install(str(venv), str(lock), str(wheels), uv_command()),
            ),
        ):
            for leftover in ("wheelhouse", "locks"):
                shutil.rmtree(scratch / leftover, ignore_errors=True)
            wheels, lock = closure(scratch, args.mb * MB, args.wheels)
            figures[name] = f = arm(name, scratch, wheels, lock, command_for)
            rows.append(
                [
                    name,
                    f"{f['installed'] / MB:.0f}",
                    f"{f['build'] / MB:.0f}",
                    f"{f['freed'] / MB:.0f}",
                    f"{f['cache'] / MB:.0f}",
                    f"{f['wheelhouse_freed'] / MB:.0f}",
                    f"{f['wheelhouse'] / MB:.0f}",
                    f"{f['seconds']:.1f}",
                ]
            )
        uv = subprocess.run(
            [sys.executable, "-m", "uv", "--version"], capture_output=True, text=True
        ).stdout.strip()
        out(
            f"Disk a pruned engine venv gives back: a closure of {args.wheels} wheels, {args.mb} MB "
            f"({time.strftime('%Y-%m-%d %H:%M')})"
        )
        out(
            f"{os.uname().nodename}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, {uv}; "
            + (
                "a tmpfs of its own (statvfs figures are the run's alone)"
                if mounted
                else f"{scratch} (shared: other writers add noise)"
            )
        )
        out()
        out.table(
            [
                "arm",
                "installed MB",
                "build took MB",
                "prune freed MB",
                "left in uv cache MB",
                "wheelhouse freed MB",
                "wheelhouse left MB",
                "install s",
            ],
            rows,
        )
        out()
        out("ratios (goal: a prune gives back what the build took):")
        for name, f in figures.items():
            ratio = f["freed"] / f["build"] if f["build"] else float("nan")
            out(f"  {name}: prune freed / build took = {ratio:.2f}")
        shared, own = figures["shared cache"], figures["own cache"]
        held = lambda f: f["cache"] + f["wheelhouse"]  # noqa: E731
        out(
            f"  left on disk after the prune (uv cache + wheelhouse): shared cache {held(shared) / MB:.0f} MB, "
            f"own cache {held(own) / MB:.0f} MB"
        )
        path = args.out or REPO / "bench" / "results" / f"venv-prune-{time.strftime('%Y-%m-%d')}.txt"
        out.save(path)
        print(f"saved to {path}")
    finally:
        if mounted:
            subprocess.run(["umount", str(scratch)], check=False)
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
