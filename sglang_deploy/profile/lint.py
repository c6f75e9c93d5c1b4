"""Check profiles before a deploy: the schema (through the loader), the flag names against the
pinned engine's option list (engine_flags), the variables the engine sets over the profile's
env (engine_env), then the NCCL variables, the model sources, and that the engine packages are
those of the profile's lock (locks/, plan/locks.py).

    python -m sglang_deploy.profile.lint [--strict] [PROFILE_OR_PATH ...]   # default: profiles/*.yml
    python -m sglang_deploy.profile.lint --schema                            # JSON Schema of a profile

One line per problem (`profiles/x.yml: error: server_args.tp-sizee: ...`,
`profiles/x.yml: warning: NCCL_BUFFSIZE: ...`; a profile that does not load prints the
loader's `file:line: key: reason`, and so does an env variable the engine overwrites:
`profiles/x.yml:31: env.CUDA_DEVICE_MAX_CONNECTIONS: ...`), then a count. Exit status 1 when a profile
does not load or has an error (with --strict: or a warning), otherwise 0.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from sglang_deploy.errors import ProfileError
from sglang_deploy.plan.locks import lock_problems, unlocked_warning
from sglang_deploy.plan.model_sources import lint_sources
from sglang_deploy.profile.engine_env import lint_engine_env
from sglang_deploy.profile.engine_flags import lint_flags
from sglang_deploy.profile.nccl_lint import Finding, lint_env
from sglang_deploy.profile.schema import Profile, default_profiles, load_profile, schema_json, shown_path


def lint_profile(profile: Profile, *, pcie_only: bool = True) -> list[Finding]:
    """The findings of one loaded profile: its flag names, the variables the engine sets over
    its env (engine_env), then its NCCL variables. Every node this project provisions is
    PCIe-only, so `pcie_only` is true unless a caller knows better; profiles do not say (yet)."""
    return (
        lint_flags(profile)
        + lint_engine_env(profile)
        + lint_env(profile.env, pcie_only=pcie_only)
        + lint_sources(profile)
        + [Finding("error", "engine.packages", why) for why in lock_problems(profile)]
        + [Finding("warning", "engine.packages", why) for why in [unlocked_warning(profile)] if why]
    )


def finding_lines(profile: Profile, *, where: str | None = None) -> tuple[list[str], list[str]]:
    """(errors, warnings) of one loaded profile, each a line naming its file (or `where`); a
    finding that knows its key's line is located as the loader's errors are: `file:line: key: why`."""
    where = where or shown_path(profile.source[0])
    lines = {"error": [], "warning": []}
    for f in lint_profile(profile):
        lines[f.severity].append(f"{f.where}: {f.variable}: {f.message}" if f.where else f"{where}: {f}")
    return lines["error"], lines["warning"]


def run(refs: list[str], *, strict: bool = False, out: TextIO | None = None) -> int:
    """Lint each profile in `refs` (names or paths); print findings and a count (to `out`,
    default standard output); the exit status."""
    out = out or sys.stdout
    errors = warnings = 0
    for ref in refs:
        try:
            profile = load_profile(ref)
        except ProfileError as exc:
            print(exc, file=out)
            errors += 1
            continue
        found_errors, found_warnings = finding_lines(profile)
        for line in found_errors + found_warnings:
            print(line, file=out)
        errors += len(found_errors)
        warnings += len(found_warnings)
    print(
        f"{_count(len(refs), 'profile')} checked: {_count(errors, 'error')}, {_count(warnings, 'warning')}",
        file=out,
    )
    return 1 if errors or (strict and warnings) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sglang_deploy.profile.lint",
        description="Check profiles: schema, flag names, then NCCL variables (PCIe-only nodes).",
    )
    parser.add_argument(
        "profiles",
        nargs="*",
        metavar="PROFILE_OR_PATH",
        help="profile names or files (default: every profiles/*.yml)",
    )
    parser.add_argument("--strict", action="store_true", help="warnings fail too")
    parser.add_argument(
        "--schema", action="store_true", help="print the JSON Schema of a profile file and exit"
    )
    args = parser.parse_args(argv)
    if args.schema:
        if args.profiles or args.strict:
            parser.error("--schema takes no other argument")
        print(schema_json())
        return 0
    return run(args.profiles or default_profiles(), strict=args.strict)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


if __name__ == "__main__":
    sys.exit(main())
