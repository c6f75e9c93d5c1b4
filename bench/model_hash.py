"""What does `make verify DEEP=1` cost? The manifest's sha256 rate on this machine, one
thread against the pool model_manifest uses, and what that means for a 600 GB model.

    python bench/model_hash.py [--size-gb 1] [--files 8] [--dir /models/m] [--out FILE]

Without --dir it writes --files shards of random bytes (--size-gb in all) into a temporary
directory on the same filesystem as /tmp and hashes them twice each way (the second pass reads
from the page cache, as a verify shortly after a deploy would; the first may read the disk).
With --dir it hashes an existing model directory. Prints a table; asserts nothing.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sglang_deploy.node import model_manifest  # noqa: E402

LARGE_MODEL_GB = 600


def make_shards(directory: Path, size_gb: float, files: int) -> None:
    each = int(size_gb * 1e9 / files)
    block = os.urandom(1 << 20)
    for index in range(files):
        with open(directory / f"model-{index + 1:05d}-of-{files:05d}.safetensors", "wb") as f:
            left = each
            while left > 0:
                f.write(block[: min(left, len(block))])
                left -= len(block)


def rate(directory: str, workers: int) -> tuple[float, float]:
    """(GB hashed, seconds) of one manifest build with ``workers`` threads."""
    started = time.perf_counter()
    built = model_manifest.build(directory, workers=workers)
    return model_manifest.total_size(built) / 1e9, time.perf_counter() - started


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gb", type=float, default=1.0)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--dir", help="hash this model directory instead of generated shards")
    parser.add_argument(
        "--out", default=str(REPO / "bench" / "results" / f"model-hash-{datetime.date.today()}.txt")
    )
    args = parser.parse_args(argv)
    pool = model_manifest.default_workers()
    lines = [f"# model manifest hash rate ({os.cpu_count()} CPUs, pool of {pool} threads)"]
    with tempfile.TemporaryDirectory(prefix="model-hash-") as scratch:
        directory = args.dir or scratch
        if not args.dir:
            make_shards(Path(scratch), args.size_gb, args.files)
        lines.append(f"{'threads':>8} {'pass':>5} {'GB':>7} {'s':>7} {'GB/s':>6} {'600 GB takes':>13}")
        best = {}
        for workers in (1, pool):
            for attempt in (1, 2):
                size, seconds = rate(directory, workers)
                gbps = size / seconds
                best[workers] = max(best.get(workers, 0), gbps)
                lines.append(
                    f"{workers:>8} {attempt:>5} {size:>7.2f} {seconds:>7.2f} {gbps:>6.2f} "
                    f"{LARGE_MODEL_GB / gbps / 60:>10.1f} min"
                )
    lines.append(
        f"pool / 1 thread: {best[pool] / best[1]:.2f}x; `make verify` without DEEP "
        "checks sizes only (a stat per file: milliseconds)"
    )
    report = "\n".join(lines)
    print(report)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(report + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
