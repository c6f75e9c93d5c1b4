#!/usr/bin/env python3
"""The stand-in engine's wheel at a given version, from the same engine-standin/ source.

    python3 sandbox/standin_wheel.py --version 0.5.24+sandbox --out build/wheels-0.5.24

The source is copied, its two version strings (pyproject.toml, sglang/version.py) set, and the
wheel built and normalised (sglang_deploy.wheel_normal): same source and version, same bytes.
An upgrade or a rollback between two versions can then be exercised on sandbox nodes.
"""

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SOURCE = REPO_ROOT / "engine-standin"


def build(version: str, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as temporary:
        source = Path(temporary) / "engine-standin"
        shutil.copytree(SOURCE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        pyproject = source / "pyproject.toml"
        pyproject.write_text(re.sub(r'(?m)^version = ".*"$', f'version = "{version}"', pyproject.read_text()))
        (source / "sglang" / "version.py").write_text(
            re.sub(
                r'(?m)^__version__ = ".*"$',
                f'__version__ = "{version}"',
                (source / "sglang" / "version.py").read_text(),
            )
        )
        for old in out.glob("sglang-*.whl"):
            old.unlink()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "--no-deps",
                "--no-build-isolation",
                str(source),
                "-w",
                str(out),
            ],
            check=True,
        )
    (wheel,) = out.glob("sglang-*.whl")
    subprocess.run(
        [sys.executable, "-m", "sglang_deploy.wheel_normal", str(wheel)], check=True, cwd=REPO_ROOT
    )
    return wheel


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", required=True)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    print(build(args.version, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
