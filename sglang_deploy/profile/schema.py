"""Profiles: the schema of profiles/*.yml (the Profile, from the sections in
profile/sections.py), and `load_profile`.

A key a profile leaves out gets the default written next to its field, here or in
sections.py, with its description (Field), which `make docs` writes into docs/profile-keys.md.
Reading the files (line numbers, `extends:`, host data overrides, located errors) is
profile/loader.py's job.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field, PrivateAttr, ValidationError, model_validator

from sglang_deploy.errors import DeployError
from sglang_deploy.node.lib import env_records
from sglang_deploy.profile.fields import (
    ArgValue,
    Description,
    EnvName,
    EnvValue,
    FlagName,
    engine_home,
    secret_value_problem,
)
from sglang_deploy.profile.key_errors import KeyProblem, located_error
from sglang_deploy.profile.loader import OVERRIDES, read_layers
from sglang_deploy.profile.sections import (
    Engine,
    Gpu,
    Hook,
    HuggingFaceRepo,
    Model,
    Pcie,
    Readiness,
    Secret,
    Section,
    Service,
    Source,
    Throughput,
)

# The sections are importable from here too, where the Profile is.
__all__ = [
    "OVERRIDES",
    "PROFILES_DIR",
    "Engine",
    "Gpu",
    "Hook",
    "HuggingFaceRepo",
    "Model",
    "Pcie",
    "Profile",
    "Readiness",
    "Secret",
    "Service",
    "Source",
    "Throughput",
    "default_profiles",
    "load_profile",
    "schema_json",
    "shown_path",
]

PROFILES_DIR = Path(__file__).resolve().parents[2] / "profiles"  # where names are looked up


class Profile(Section):
    """One serving configuration. `name` and `source` come from the files, not from keys."""

    description: Description = Field(
        description="one line: what this configuration is (the unit's Description=)"
    )
    engine: Engine = Field(
        description="what is installed and how: the venv, its pinned packages, the drift check"
    )
    model: Model = Field(description="what is served, and where its files come from")
    server_args: dict[FlagName, ArgValue] = Field(
        {}, description="argv, in order; true: bare flag; false/null: none"
    )
    env: dict[EnvName, EnvValue] = Field({}, description="env file and start-up hook")
    secrets: dict[EnvName, Secret] = Field({}, description="env file only, from the operator's environment")
    service: Service = Field(default_factory=Service, description="the systemd unit and the server's address")
    readiness: Readiness = Field(default_factory=Readiness, description="the gate after a (re)start")
    hook: Hook = Field(default_factory=Hook, description="the start-up hook: env in a Python started by hand")
    throughput: Throughput = Field(default_factory=Throughput)
    gpu: Gpu = Field(
        default_factory=Gpu, description="what the node's GPUs and driver must be, and their settings"
    )
    pcie: Pcie = Field(default_factory=Pcie, description="the PCIe fabric between the GPUs")
    _name: str = PrivateAttr("")
    _source: tuple[Path, ...] = PrivateAttr(())

    @model_validator(mode="after")
    def _secrets_stay_secret(self) -> Profile:
        for name in self.env:
            if name in self.secrets:
                raise KeyProblem(
                    ("env", name),
                    "also a secret: keep it under secrets only "
                    "(env goes into the world-readable start-up hook)",
                )
        for name, arg in ((name, secret.server_arg) for name, secret in self.secrets.items()):
            if arg and self.secret_server_args[arg] != name:  # the last secret naming it: another
                why = f"secret {self.secret_server_args[arg]} feeds --{arg} too: one secret per argument"
                raise KeyProblem(("secrets", name, "server_arg"), why)
        if self.secret_server_args and "config" in self.server_args:
            why = "the secrets' server arguments take --config (SGLang reads one config file)"
            raise KeyProblem(("server_args", "config"), why)
        return self

    @model_validator(mode="after")
    def _engine_link(self) -> Profile:
        if self.engine.venv is None:
            self.engine.venv = f"{engine_home(self.service.name)}/venv"
        return self

    @model_validator(mode="after")
    def _draft_path_is_a_path(self) -> Profile:
        # Staged like model.path (quoted shell commands, rsync's list of names, result lines):
        # a control character cannot be part of a directory anyone means, and a newline would
        # split the names rsync reads. Spaces, quotes and `$(...)` stay literal.
        found = self.server_args.get("speculative-draft-model-path")
        if isinstance(found, str) and any(ord(c) < 0x20 or c == "\x7f" for c in found):
            raise KeyProblem(
                ("server_args", "speculative-draft-model-path"),
                "a directory: no newline or other control character",
            )
        return self

    @model_validator(mode="after")
    def _speculation_rules_need_speculation(self) -> Profile:
        check = self.throughput
        rules = [key for key in ("min_speedup_over", "min_accept_length") if getattr(check, key) is not None]
        if rules and not self.server_args.get("speculative-algorithm"):
            why = "a rule for a speculating profile: server_args has no speculative-algorithm"
            raise KeyProblem(("throughput", rules[0]), why)
        if check.min_speedup_pct is not None and check.min_speedup_over is None:
            raise KeyProblem(("throughput", "min_speedup_pct"), "faster than what? set min_speedup_over too")
        return self

    @property
    def name(self) -> str:
        """The leaf profile file's stem."""
        return self._name

    @property
    def source(self) -> tuple[Path, ...]:
        """The files this profile was read from, leaf first."""
        return self._source

    @property
    def draft_path(self) -> str | None:
        """The EAGLE-3 draft model's directory on the node, if the profile names one."""
        found = self.server_args.get("speculative-draft-model-path")
        return str(found) if isinstance(found, (str, int, float)) and found else None

    @property
    def tp_size(self) -> int:
        """Tensor-parallel size (`tp-size` or its alias `tensor-parallel-size`); 1 if unset."""
        return self._server_arg_int("tp-size", "tensor-parallel-size")

    @property
    def pp_size(self) -> int:
        """Pipeline-parallel size (`pp-size` or `pipeline-parallel-size`); 1 if unset."""
        return self._server_arg_int("pp-size", "pipeline-parallel-size")

    @property
    def nnodes(self) -> int:
        """Nodes one server spans (`nnodes`); 1 if unset."""
        return self._server_arg_int("nnodes")

    @property
    def gpus_per_node(self) -> int:
        """GPUs each node needs: tensor × pipeline parallel, shared across the nodes."""
        return max(1, self.tp_size * self.pp_size // self.nnodes)

    def _server_arg_int(self, *spellings: str) -> int:
        # SGLang's defaults are 1; the first spelling set (not null/false/0) wins, as in argparse
        # when only one of them is given.
        return int(next((self.server_args[s] for s in spellings if self.server_args.get(s)), 1))

    @property
    def secret_server_args(self) -> dict[str, str]:
        """{server argument: the secret's name} of the secrets with a `server_arg`."""
        return {secret.server_arg: name for name, secret in self.secrets.items() if secret.server_arg}

    def argv(self) -> list[str]:
        """SGLang's command-line arguments (after `python -m sglang.launch_server`), --config last."""
        argv = [
            "--model-path",
            self.model.path,
            "--served-model-name",
            self.model.served_name,
            "--host",
            self.service.host,
            "--port",
            str(self.service.port),
        ]
        for flag, value in self.server_args.items():
            if value is None or value is False:
                continue
            argv.append(f"--{flag}")
            if value is not True:
                argv.extend(str(v) for v in (value if isinstance(value, list) else [value]))
        if self.secret_server_args:
            argv += ["--config", env_records.secret_args_path(self.service.name)]
        return argv

    def env_file_vars(self, operator_env: Mapping[str, str]) -> dict[str, str]:
        """The env file's variables: `env`, then the secrets set in `operator_env`."""
        out = dict(self.env)
        for name, secret in self.secrets.items():
            value = operator_env.get(secret.from_env)
            if value is None:
                if secret.required:
                    raise DeployError(
                        f"secret {name}: set {secret.from_env} in the deploy's "
                        f"environment (profile {self.name} requires it)"
                    )
                continue
            why = secret_value_problem(value, secret.server_arg)
            if why:
                raise DeployError(f"secret {name}: {secret.from_env} must be {why}")
            out[name] = value
        return out

    def hook_vars(self) -> dict[str, str]:
        """The start-up hook's variables: `env` only, never secrets (the hook is 0644)."""
        return dict(self.env)


def schema_json() -> str:
    """JSON Schema of a profile file, for editors."""
    schema = Profile.model_json_schema()
    schema["properties"] = {"extends": {"type": "string", "title": "Extends"}, **schema["properties"]}
    return json.dumps(schema, indent=2)


def load_profile(
    ref: str | Path, profiles_dir: str | Path = PROFILES_DIR, overrides: Mapping[str, Any] | None = None
) -> Profile:
    """Read profile `ref` (a name under `profiles_dir`, or a path), resolve its `extends:`
    chain, deep-merge `overrides` (host data) on top and validate.

    Every problem is a ProfileError naming the file, the key path and the line that set it.
    """
    layers = read_layers(ref, profiles_dir, overrides)
    try:
        profile = Profile.model_validate(layers.data)
    except ValidationError as exc:
        raise located_error(exc, layers, Profile) from None
    profile._name, profile._source = layers.source[0].stem, layers.source
    return profile


def default_profiles() -> list[str]:
    """Every profile in profiles/, by path."""
    return [shown_path(path) for path in sorted(PROFILES_DIR.glob("*.yml"))]


def shown_path(path: Path) -> str:
    """``path`` as a message names it: relative to the working directory where it is under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
