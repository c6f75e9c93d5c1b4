"""The gateway a router host runs, and its flag names for the version pinned.

The gateway is `smg` (SGLang's gateway from 1.x on), pinned in ``router_packages``; its former
name, `sglang-router`, is retired (a pin of it is refused, naming smg). What the launcher of the
pinned version accepts is a committed option list per version
(router_options/<distribution>-<version>.json), generated from the installed gateway's own
parser:

    python -m sglang_deploy.plan.router_flags --python <router venv>/bin/python

Every flag the rendered unit passes (ours and ``router_extra_args``) must be exactly one of
that list, and ``router_policy`` one of its ``--policy`` choices: a flag the pinned version
lacks stops the run at plan time, naming it. A pin without a list is refused too (there is
no preflight on a router host to catch a wrong name later).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from sglang_deploy.errors import DeployError
from sglang_deploy.node.flags import argv_flags, flag_problem

OPTIONS_DIR = Path(__file__).resolve().parent / "router_options"


@dataclass(frozen=True)
class Gateway:
    distribution: str
    package: str  # the import package: its launcher and its RouterArgs

    @property
    def module(self) -> str:
        return f"{self.package}.launch_router"


GATEWAYS = {"smg": Gateway("smg", "smg")}
# The gateway's former name (its last release, 0.3.2, in January 2026): refused where pinned.
RETIRED = "sglang-router"

# The flags the unit renders, by what they set. A version that renames one gets its own row
# here, and the option list says which it has.
FLAGS = {
    "host": "--host",
    "port": "--port",
    "policy": "--policy",
    "prometheus_host": "--prometheus-host",
    "prometheus_port": "--prometheus-port",
    "health_check_port": "--health-check-port",
    "shutdown_grace_s": "--shutdown-grace-period-secs",
    "retry_max_retries": "--retry-max-retries",
    "retry_initial_backoff_ms": "--retry-initial-backoff-ms",
    "retry_max_backoff_ms": "--retry-max-backoff-ms",
    "retry_backoff_multiplier": "--retry-backoff-multiplier",
    "retry_jitter_factor": "--retry-jitter-factor",
    "cb_failure_threshold": "--cb-failure-threshold",
    "cb_success_threshold": "--cb-success-threshold",
    "cb_timeout_s": "--cb-timeout-duration-secs",
    "cb_window_s": "--cb-window-duration-secs",
    "health_check_endpoint": "--health-check-endpoint",
    "health_check_interval_s": "--health-check-interval-secs",
    "health_check_timeout_s": "--health-check-timeout-secs",
    "health_failure_threshold": "--health-failure-threshold",
    "health_success_threshold": "--health-success-threshold",
    "worker_startup_check_interval_s": "--worker-startup-check-interval",
    "worker_urls": "--worker-urls",
}
RENAMED: dict[tuple[str, str], dict[str, str]] = {}  # (distribution, version) -> {key: flag}


@dataclass(frozen=True)
class RouterOptions:
    distribution: str
    version: str
    options: frozenset
    choices: dict  # {option: (choice, ...)} where the parser restricts the values

    def flag(self, key: str) -> str:
        return RENAMED.get((self.distribution, self.version), {}).get(key, FLAGS[key])

    @property
    def gateway(self) -> Gateway:
        return GATEWAYS[self.distribution]


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def names_retired(packages) -> bool:
    """Whether a pin (or a bare name) of ``packages`` is the retired gateway, sglang-router."""
    return any(normalize(re.split(r"[\[<>=!~;\s]", str(pin), maxsplit=1)[0]) == RETIRED for pin in packages)


def gateway_pin(packages) -> tuple[str, str]:
    """(distribution, version) of the one gateway among exact pins; ValueError otherwise."""
    if names_retired(packages):
        raise ValueError(f"{RETIRED} is retired; smg is the gateway (smg==<version>), got {list(packages)}")
    found = []
    for pin in packages:
        name, _, version = pin.partition("==")
        dist = normalize(name.split("[", 1)[0])
        if dist in GATEWAYS and version:
            found.append((dist, version))
    if len(found) != 1:
        known = " or ".join(f"{d}==<version>" for d in GATEWAYS)
        raise ValueError(
            f"exact pins (name==version) with exactly one gateway ({known}), got {list(packages)}"
        )
    return found[0]


def options_file(distribution: str, version: str) -> Path:
    return OPTIONS_DIR / f"{distribution}-{version.split('+', 1)[0]}.json"


@cache
def options_for(distribution: str, version: str) -> RouterOptions | None:
    path = options_file(distribution, version)
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    return RouterOptions(
        distribution=data["distribution"],
        version=data["version"],
        options=frozenset(data["options"]),
        choices={k: tuple(v) for k, v in data["choices"].items()},
    )


def known_versions() -> list[str]:
    return sorted(p.stem for p in OPTIONS_DIR.glob("*.json"))


def pinned_options(packages) -> RouterOptions:
    """The option list of the gateway ``packages`` pin; DeployError when none is committed."""
    try:
        dist, version = gateway_pin(packages)
    except ValueError as exc:
        raise DeployError(f"router_packages: {exc}") from None
    found = options_for(dist, version)
    if found is None:
        raise DeployError(
            f"router_packages: no option list for {dist} {version} (have: {', '.join(known_versions())}): "
            f"install it and run `python -m sglang_deploy.plan.router_flags --python <venv>/bin/python`"
        )
    return found


def check_argv(argv, options: RouterOptions, where: str) -> None:
    """DeployError naming the first flag of ``argv`` the gateway's version lacks, or a
    restricted value it does not accept."""
    engine = f"{options.distribution} {options.version}"
    for flag in argv_flags(argv):
        why = flag_problem(flag, options.options, engine)
        if why:
            raise DeployError(f"{where}: {why}")
    for i, arg in enumerate(argv[:-1]):
        allowed = options.choices.get(arg)
        if allowed and argv[i + 1] not in allowed:
            raise DeployError(
                f"{where}: {arg} {argv[i + 1]!r} is not one of {engine}'s: {', '.join(allowed)}"
            )


# Run by the gateway venv's interpreter: its own parser's option strings and choices.
_LIST_SCRIPT = """
import argparse, json, sys
from importlib.metadata import version
dist, package = sys.argv[1], sys.argv[2]
RouterArgs = __import__(package + ".router_args", fromlist=["RouterArgs"]).RouterArgs
parser = argparse.ArgumentParser()
RouterArgs.add_cli_args(parser, use_router_prefix=False)
options, choices = set(), {}
for action in parser._actions:
    options.update(action.option_strings)
    if action.choices and action.option_strings:
        for name in action.option_strings:
            choices[name] = [str(c) for c in action.choices]
print(json.dumps({"distribution": dist, "version": version(dist), "options": sorted(options),
                  "choices": dict(sorted(choices.items()))}, indent=1))
"""


def generate(python: str, distribution: str) -> Path:
    """Write the option list of ``distribution`` installed for ``python``; its path."""
    gateway = GATEWAYS[distribution]
    python = str(Path(python).absolute()) if "/" in python else python  # it runs in /
    text = subprocess.run(
        [python, "-c", _LIST_SCRIPT, distribution, gateway.package],
        check=True,
        capture_output=True,
        text=True,
        cwd="/",
    ).stdout
    data = json.loads(text)
    path = options_file(distribution, data["version"])
    path.write_text(text)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sglang_deploy.plan.router_flags",
        description="Write the option list of an installed gateway (smg).",
    )
    parser.add_argument("--python", required=True, help="interpreter of a venv with the gateway installed")
    parser.add_argument("--distribution", choices=sorted(GATEWAYS), default="smg")
    args = parser.parse_args(argv)
    print(generate(args.python, args.distribution))
    return 0


if __name__ == "__main__":
    sys.exit(main())
