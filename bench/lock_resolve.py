#!/usr/bin/env python3
"""How long `make lock` takes to resolve a profile's closure, and whether it is the committed lock.

Against the real index; median of 3, with an empty uv cache and with a warm one.

    python3 bench/lock_resolve.py [PROFILE ...] [--runs 3] [--cache cold|warm|both] [--out FILE]

Default profiles: baseline (SGLang 0.5.23's closure, PyPI) and sandbox (the stand-in from
build/wheels, its dependencies from PyPI; `make wheels` first). Each run calls what `make lock`
calls (plan/locks.py make_lock: `uv pip compile --generate-hashes` for the profile's platform
and Python) with the locks directory pointed at a scratch directory, so the committed lock is
never rewritten. Not timed: `make wheels` (a no-op when the stand-in wheel is up to date), the
interpreter's start and the profiles' loading (timed once, printed beside).

The cache arms: cold gives every run an empty uv cache of its own (UV_CACHE_DIR), as on a
fresh controller or CI; warm shares one cache, filled by one untimed resolve first, as a
second `make lock` on the same day (uv keeps PyPI's pages for their max-age). Each figure is
the median of --runs runs (min and max beside). The closure each run resolved is compared with
the committed lock (names, versions, sha256s): the differences are listed, not judged.

Output to stdout and bench/results/lock-resolve-<date>.txt (--out).
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

from common import Report, fmt_s, median  # noqa: E402

from sglang_deploy.plan import lock_make, locks  # noqa: E402
from sglang_deploy.profile.schema import default_profiles, load_profile  # noqa: E402

SHOWN_CHANGES = 15  # changes listed per lock; the count is always given


def resolve_once(profile, sharing, cache_dir):
    """(seconds, Lock) of one make_lock of ``profile`` into a scratch locks directory, uv's
    cache at ``cache_dir``."""
    before = os.environ.get("UV_CACHE_DIR")
    os.environ["UV_CACHE_DIR"] = str(cache_dir)
    try:
        with tempfile.TemporaryDirectory(prefix="lock-resolve-") as scratch:
            started = time.monotonic()
            path = lock_make.make_lock(profile, sharing, locks_dir=Path(scratch), out=io.StringIO())
            seconds = time.monotonic() - started
            return seconds, locks.load_lock(path)
    finally:
        if before is None:
            os.environ.pop("UV_CACHE_DIR", None)
        else:
            os.environ["UV_CACHE_DIR"] = before


def missing_find_links(profile):
    return [link for link in profile.engine.find_links if not (REPO / link).is_dir()]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profiles", nargs="*", default=["baseline", "sandbox"])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cache", choices=("cold", "warm", "both"), default="both")
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO / "bench" / "results" / f"lock-resolve-{time.strftime('%Y-%m-%d')}.txt",
    )
    args = parser.parse_args(argv)
    arms = ["cold", "warm"] if args.cache == "both" else [args.cache]

    loading = time.monotonic()
    every = [load_profile(ref) for ref in default_profiles()]
    wanted = [load_profile(ref) for ref in args.profiles]
    loading = time.monotonic() - loading
    for profile in wanted:
        if missing_find_links(profile):
            sys.exit(
                f"{profile.name}: find-links {', '.join(missing_find_links(profile))} missing: `make wheels`"
            )

    uv = subprocess.run(
        [sys.executable, "-m", "uv", "--version"], capture_output=True, text=True
    ).stdout.strip()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    out = Report()
    out(
        f"make lock's resolution against {locks.INDEX_URL}, median of {args.runs} ({uv}, "
        f"{platform.node()}, commit {commit.stdout.strip()}, {time.strftime('%Y-%m-%d %H:%M')})"
    )
    out(f"profiles loaded in {loading:.2f} s (every profile, as `make lock` does; not in the figures)")
    out()
    rows, details = [], []
    for profile in wanted:
        name = locks.lock_name(profile.engine)
        sharing = [p.name for p in every if locks.lock_name(p.engine) == name] or [profile.name]
        committed_path = locks.lock_path(profile.engine)
        committed = locks.load_lock(committed_path) if committed_path.is_file() else None
        times, closures = {arm: [] for arm in arms}, []
        with tempfile.TemporaryDirectory(prefix="lock-resolve-uv-cache-") as caches:
            warm_cache = Path(caches) / "warm"
            if "warm" in arms:
                resolve_once(profile, sharing, warm_cache)  # fills it; untimed
            for run in range(args.runs):
                for arm in arms:
                    cache = warm_cache if arm == "warm" else Path(caches) / f"cold-{run}"
                    seconds, lock = resolve_once(profile, sharing, cache)
                    times[arm].append(seconds)
                    closures.append(lock)
                    print(
                        f"  {profile.name} {arm} run {run + 1}: {seconds:.2f} s, {len(lock.entries)} distributions"
                    )
        last = closures[-1]
        changes = lock_make.closure_changes(committed, last)
        agree = all(lock.digest == last.digest for lock in closures)
        cold = median(times.get("cold", []))
        warm = median(times.get("warm", []))
        rows.append(
            [
                profile.name,
                f"{profile.engine.python_version} {profile.engine.platform}",
                len(committed.entries) if committed else "-",
                len(last.entries),
                *(f"{median(times[arm]):.2f} ({min(times[arm]):.2f}-{max(times[arm]):.2f})" for arm in arms),
                *([fmt_s(cold / warm, 1)] if len(arms) == 2 else []),
                "same"
                if committed and not changes
                else (f"{len(changes)} changes" if committed else "no lock"),
            ]
        )
        details.append(f"{profile.name}: committed {committed_path.relative_to(REPO)}")
        if committed is None:
            details.append("  no committed lock to compare with")
        elif not changes:
            details.append(
                f"  every run resolved the committed closure: {len(last.entries)} distributions, "
                "same versions and sha256s"
                + ("" if last.body == committed.body else " (uv's comments differ)")
            )
        else:
            details.append(
                f"  today's closure differs from the committed one: {len(changes)} changes "
                f"({len(committed.entries)} distributions committed, {len(last.entries)} resolved)"
            )
            details += [f"    {line}" for line in changes[:SHOWN_CHANGES]]
            if len(changes) > SHOWN_CHANGES:
                details.append(f"    ... {len(changes) - SHOWN_CHANGES} more")
        if not agree:
            details.append(
                "  the runs did not all resolve the same closure (the index moved during the bench)"
            )
    header = ["profile", "python, platform", "committed", "resolved"]
    header += [f"{arm} s median (min-max)" for arm in arms]
    header += ["cold / warm"] if len(arms) == 2 else []
    header += ["vs committed"]
    out.table(header, rows)
    out()
    for line in details:
        out(line)
    out.save(args.out)
    print(f"saved to {args.out.relative_to(REPO) if args.out.is_relative_to(REPO) else args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
