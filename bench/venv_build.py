"""Venv build from one lock and its wheelhouse: pip vs uv, median of 3 each.

    python3 bench/venv_build.py PROFILE [--runs 3] [--python python3] [--out bench/results/]

Run where the venvs are built (a bare node: copy the lock, the wheelhouse and this file), or
locally for a comparison on this machine. Both install exactly the lock: hashes required, no
dependency resolution, no index. The venv itself (`python -m venv --without-pip`) is timed too.
"""

import argparse
import json
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sglang_deploy.plan.locks import lock_path  # noqa: E402
from sglang_deploy.plan.wheelhouse import lock_wheels_dir  # noqa: E402
from sglang_deploy.profile.schema import load_profile  # noqa: E402


def build(installer, python, lock, wheels, scratch):
    venv = Path(scratch) / installer
    started = time.monotonic()
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True)
    if installer == "pip":  # the controller's pip, run against the new venv's interpreter
        command = [sys.executable, "-m", "pip", "--python", str(venv / "bin/python"), "install", "--quiet"]
        command += [
            "--require-hashes",
            "--no-deps",
            "--no-index",
            "--find-links",
            str(wheels),
            "-r",
            str(lock),
        ]
    else:
        command = [
            sys.executable,
            "-m",
            "uv",
            "pip",
            "install",
            "--quiet",
            "--python",
            str(venv / "bin/python"),
        ]
        command += ["--require-hashes", "--no-deps", "--no-config", "--no-cache", "--no-index"]
        command += ["--find-links", str(wheels), "-r", str(lock)]
    subprocess.run(command, check=True)
    return time.monotonic() - started


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--python", default="python3")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args(argv)
    engine = load_profile(args.profile).engine
    lock, wheels = lock_path(engine), lock_wheels_dir(engine)
    times = {"pip": [], "uv": []}
    for _ in range(args.runs):
        for installer in times:
            with tempfile.TemporaryDirectory() as scratch:
                times[installer].append(round(build(installer, args.python, lock, wheels, scratch), 3))
    medians = {k: statistics.median(v) for k, v in times.items()}
    report = {
        "profile": args.profile,
        "lock": lock.name,
        "distributions": sum(1 for _ in wheels.glob("*.whl")) - 1,  # less uv's own wheel
        "machine": f"{socket.gethostname()} ({platform.machine()}, {platform.platform()})",
        "python": subprocess.run([args.python, "--version"], capture_output=True, text=True).stdout.strip(),
        "seconds": times,
        "median_s": medians,
        "uv_speedup": round(medians["pip"] / medians["uv"], 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"venv_build-{args.profile}-{socket.gethostname()}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
