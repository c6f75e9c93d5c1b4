"""The profile's flag names against the option strings of the engine version it pins.

The lists are committed, one file per version (engine_options/sglang-<version>.txt), generated
from the real engine's parser:

    python -m sglang_deploy.profile.engine_flags --python <venv>/bin/python   # or: make engine-options

A local version label is a build of the same release with the same parser (0.5.23+sandbox
is checked against 0.5.23's list). Without a list for the pinned version the lint warns and
only the node's preflight, which asks the installed parser, checks the names.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

from sglang_deploy.node.flags import ENGINE, argv_problems, parse_options_text
from sglang_deploy.profile.nccl_lint import Finding
from sglang_deploy.profile.schema import Profile

OPTIONS_DIR = Path(__file__).resolve().parent / "engine_options"
FLAGS_SCRIPT = Path(__file__).resolve().parents[1] / "node" / "flags.py"


def pinned_version(packages: list[str]) -> str | None:
    """The engine's version among exact pins (`sglang==0.5.23`, `sglang[all]==0.5.23`)."""
    for pin in packages:
        name, _, version = pin.partition("==")
        if _normalize(name.split("[", 1)[0]) == ENGINE:
            return version
    return None


def options_file(version: str) -> Path:
    return OPTIONS_DIR / f"{ENGINE}-{version.split('+', 1)[0]}.txt"


@cache
def options_for(version: str) -> frozenset[str] | None:
    """The engine's option strings at `version`, or None when no list is committed for it."""
    path = options_file(version)
    return parse_options_text(path.read_text()) if path.is_file() else None


def known_versions() -> list[str]:
    return sorted(p.stem.split("-", 1)[1] for p in OPTIONS_DIR.glob(f"{ENGINE}-*.txt"))


def lint_flags(profile: Profile) -> list[Finding]:
    """An error per flag that is not exactly one of the pinned engine's options; a warning
    when there is no list for the pinned version."""
    version = pinned_version(profile.engine.packages)
    if version is None:
        return [
            Finding(
                "warning",
                "engine.packages",
                f"no {ENGINE}==<version> pin: flag names are checked on the node only (preflight)",
            )
        ]
    options = options_for(version)
    if options is None:
        have = ", ".join(known_versions()) or "none"
        return [
            Finding(
                "warning",
                "engine.packages",
                f"no option list for {ENGINE} {version} (have: {have}): flag names are "
                f"checked on the node only (preflight); `make engine-options` adds one",
            )
        ]
    return [
        Finding("error", f"server_args.{flag[2:]}", why)
        for flag, why in argv_problems(profile.argv(), options, f"{ENGINE} {version}")
    ]


def generate(python: str) -> Path:
    """Write the option list of the engine installed for `python`; its path."""
    text = subprocess.run(
        [python, str(FLAGS_SCRIPT)], check=True, capture_output=True, text=True, cwd="/"
    ).stdout
    version = re.search(rf"^# Option strings of {ENGINE} (\S+)'s", text, re.M).group(1)
    path = options_file(version)
    path.write_text(text)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sglang_deploy.profile.engine_flags",
        description="Write the option list of an installed engine.",
    )
    parser.add_argument("--python", required=True, help="interpreter of a venv with the engine installed")
    args = parser.parse_args(argv)
    print(generate(args.python))
    return 0


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


if __name__ == "__main__":
    sys.exit(main())
