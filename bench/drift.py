"""How fast drift.py verifies a large installed distribution: single thread vs thread pool.

    python bench/drift.py                                # largest distribution of this interpreter
    python bench/drift.py --python /opt/sglang/venv/bin/python --dist torch
    python bench/drift.py --torch-venv /tmp/torch-venv   # makes that venv (pip install torch==2.13.0) once
    python bench/drift.py --python /opt/torch/.venv/bin/python --all   # every distribution of a venv

drift.py runs as on a node: a subprocess of the target interpreter. The figures are its own
"seconds" (interpreter start-up excluded), best of --repeat runs after one warm-up run, so the
files are in the page cache: this measures hashing and file-system calls, not the disk.
Prints a table and the ratio; asserts nothing.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DRIFT = REPO / "sglang_deploy" / "node" / "drift.py"

# Run by the target interpreter: hashed RECORD entries and their total size per distribution.
SIZES = r"""
import importlib.metadata as md, json
out = []
for d in md.distributions():
    files = [f for f in (d.files or ()) if f.hash is not None]
    out.append({"name": d.metadata["Name"], "version": d.version, "files": len(files),
                "bytes": sum(f.size or 0 for f in files)})
print(json.dumps(out))
"""


def torch_venv(path):
    python = Path(path) / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    probe = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; m.version('torch')"], capture_output=True
    )
    if probe.returncode != 0:
        subprocess.run([str(python), "-m", "pip", "install", "-q", "torch==2.13.0"], check=True)
    return str(python)


def distributions(python):
    out = subprocess.run([python, "-c", SIZES], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def run_drift(python, dist, workers):
    """(seconds, {files_checked, drifted}) of one drift.py run; dist None: --all."""
    target = ["--all"] if dist is None else [dist]
    proc = subprocess.run(
        [python, str(DRIFT), "--json", "--workers", str(workers)] + target, capture_output=True, text=True
    )
    if proc.returncode not in (0, 3):
        raise SystemExit("drift.py failed (%d): %s" % (proc.returncode, proc.stderr.strip()))
    report = json.loads(proc.stdout)
    reports = report["distributions"].values()
    return report["seconds"], {
        "files_checked": sum(r["files_checked"] for r in reports),
        "drifted": sorted(
            n for n, r in report["distributions"].items() if r["modified"] or r["missing"] or r["unexpected"]
        ),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", help="interpreter whose distributions are checked (default: this one)")
    parser.add_argument(
        "--torch-venv", metavar="DIR", help="make/use a venv with torch==2.13.0 and bench torch"
    )
    parser.add_argument("--dist", help="distribution to check (default: the largest by bytes)")
    parser.add_argument("--all", action="store_true", help="every distribution of the interpreter at once")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1), help="thread-pool size")
    args = parser.parse_args(argv)

    python = args.python or sys.executable
    if args.torch_venv:
        python = torch_venv(args.torch_venv)
        args.dist = args.dist or "torch"
    dists = sorted(distributions(python), key=lambda d: d["bytes"], reverse=True)
    if args.all:
        name, label = None, "all %d distributions" % len(dists)
        mb = sum(d["bytes"] for d in dists) / 1e6
    else:
        info = next((d for d in dists if args.dist is None or d["name"].lower() == args.dist.lower()), None)
        if info is None:
            raise SystemExit("%s is not installed for %s" % (args.dist, python))
        name, label = info["name"], "%s %s" % (info["name"], info["version"])
        mb = info["bytes"] / 1e6

    print(
        "interpreter %s, %d CPUs, drift.py best of %d after a warm-up run"
        % (python, os.cpu_count() or 1, args.repeat)
    )
    header = "%-24s %8s %9s %8s %9s %10s %8s" % (
        "distribution",
        "files",
        "MB",
        "workers",
        "seconds",
        "files/s",
        "MB/s",
    )
    print(header)
    print("-" * len(header))
    best = {}
    for workers in (1, args.workers):
        _seconds, report = run_drift(python, name, workers)  # warm-up: page cache, imports
        times = [run_drift(python, name, workers)[0] for _ in range(max(1, args.repeat))]
        best[workers] = min(times)
        files = report["files_checked"]
        t = best[workers]
        print(
            "%-24s %8d %9.1f %8d %9.3f %10.0f %8.0f"
            % (label, files, mb, workers, t, files / t if t else 0, mb / t if t else 0)
        )
        if len(times) > 1:
            print("%-24s %8s %9s %8s %9s  median %.3fs" % ("", "", "", "", "", statistics.median(times)))
    if args.workers != 1 and best[args.workers]:
        print(
            "thread pool (%d workers) vs single thread: %.2fx" % (args.workers, best[1] / best[args.workers])
        )
    print(
        "result: %s" % ("drift found in %s" % ", ".join(report["drifted"]) if report["drifted"] else "clean")
    )


if __name__ == "__main__":
    main()
