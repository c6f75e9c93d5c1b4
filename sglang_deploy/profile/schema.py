"""Profiles: the schema of profiles/*.yml, and `load_profile`.

This is the one documented place for profile defaults: a key a profile leaves out gets the
default written next to its field below, with its description (Field), which `make docs` writes
into docs/profile-keys.md. Reading the files (line numbers, `extends:`, host data
overrides, located errors) is profile_loader.py's job.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    model_validator,
)

from sglang_deploy.errors import DeployError
from sglang_deploy.node.lib import env_records
from sglang_deploy.profile.fields import (
    DEFAULT_SERVICE,
    AbsPath,
    ArgValue,
    Description,
    DriverVersion,
    EnvName,
    EnvValue,
    FlagName,
    GpuModel,
    LockPlatform,
    Pin,
    PythonVersion,
    RestartPolicy,
    SecretServerArg,
    UnitStem,
    UserName,
    VenvPath,
    Word,
    _pattern,
    engine_home,
    secret_value_problem,
    source_word,
)
from sglang_deploy.profile.loader import OVERRIDES, KeyProblem, located_error, read_layers

__all__ = [
    "OVERRIDES",
    "PROFILES_DIR",
    "Profile",
    "default_profiles",
    "load_profile",
    "schema_json",
    "shown_path",
]

PROFILES_DIR = Path(__file__).resolve().parents[2] / "profiles"  # where names are looked up


# -- The profile -----------------------------------------------------------------------------


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Engine(_Section):
    venv: VenvPath | None = Field(
        None,
        description=(
            "The link the unit runs through, to one venv of the venvs_dir setting. Unset: the "
            "service's own, `/opt/sglang/venv` for the service `sglang`, "
            "`/opt/sglang/services/<service.name>/venv` for any other (two services of one node "
            "never share one)."
        ),
    )
    python: Word = Field("python3", description="interpreter that creates the venv")
    packages: list[Pin] = Field(min_length=1, description="exact pins: the profile says what is installed")
    find_links: list[str] = Field([], description="controller-side wheel files/dirs; pip uses --no-index")
    drift_check: list[Word] = Field(
        ["sglang"],
        description=(
            "Distributions whose installed files are checked against their wheels' RECORD (drift): "
            "the incident's real cause was untracked edits inside installed SGLang files. A locked "
            "engine (locks/) checks every locked distribution instead."
        ),
    )
    allow_drift: bool = Field(False, description="true: a drifted engine only warns; false: no restart")
    platform: LockPlatform = Field(
        "x86_64-manylinux_2_34",
        description=(
            "The nodes' platform, which `make lock` resolves the closure of `packages` for (locks/, "
            "sglang_deploy/plan/locks.py): CPU architecture and glibc as a manylinux tag (SGLang "
            "0.5.23 ships manylinux_2_34 wheels only: Ubuntu 24.04, Debian 12 and newer), and the "
            "X.Y of `python` on the nodes. The deploy refuses a node whose `python` is another X.Y "
            "than the lock's while the run is planned, before anything is uploaded."
        ),
    )
    python_version: PythonVersion = Field("3.12", description="Ubuntu 24.04's python3")
    install_from: Literal["wheelhouse", "index"] = Field(
        "wheelhouse",
        description=(
            "wheelhouse: every locked wheel is downloaded once on the controller (`make "
            "wheelhouse`) and uploaded to the nodes, which need no route to an index; index: the "
            "nodes download the locked wheels themselves (hashes still required). A pin set without "
            "a lock (locks/) is refused by the lint unless `index`: pip then resolves it on each "
            "node, the day it is built (from the find_links alone where there are any)."
        ),
    )


class HuggingFaceRepo(_Section):
    repo: Annotated[
        str,
        _pattern(
            r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?", "a Hugging Face repo id (owner/name)"
        ),
    ] = Field(description="owner/name on the Hugging Face Hub")
    revision: Annotated[
        str, _pattern(r"[0-9a-f]{40}", "a 40-hex commit id (a branch or tag name moves: not reproducible)")
    ] = Field(
        description=(
            "A commit, never a branch or tag: a branch moves, so the same profile would stage "
            "another model tomorrow."
        )
    )


class Source(_Section):
    """Where a model directory comes from: at most one of these; neither is `source: path`."""

    controller: str | None = Field(
        None, description="a directory on the operator's machine (relative: to the repo)"
    )
    huggingface: HuggingFaceRepo | None = Field(
        None, description="downloaded on the node (HF_TOKEN: secrets)"
    )

    @model_validator(mode="after")
    def _one_kind(self) -> Source:
        if self.controller is not None and self.huggingface is not None:
            raise ValueError("either controller or huggingface, not both")
        return self

    @property
    def kind(self) -> str:
        return (
            "controller"
            if self.controller is not None
            else "huggingface"
            if self.huggingface is not None
            else "path"
        )


ModelSource = Annotated[Source, BeforeValidator(source_word, json_schema_input_type=Literal["path"] | dict)]


class Model(_Section):
    path: AbsPath = Field(description="on the node; nothing is downloaded at start-up")
    served_name: Word = Field(description="--served-model-name: the model name clients ask for")
    source: ModelSource = Field(
        default_factory=Source,
        description=(
            "How `path` gets there: `path` (already on the node), {controller: DIR} or "
            "{huggingface: {repo: R, revision: COMMIT}}; staged and verified by model_staging.py."
        ),
    )
    draft_source: ModelSource = Field(
        default_factory=Source,
        description="The same, for server_args' speculative-draft-model-path (EAGLE-3's draft model).",
    )


class Secret(_Section):
    from_env: EnvName = Field(description="the operator's environment variable holding the value")
    required: bool = Field(
        False, description="unset and required: the deploy stops; unset and optional: left out"
    )
    server_arg: SecretServerArg | None = Field(
        None,
        description=(
            "The server argument it is (api-key: clients and our probes send it as a Bearer token): "
            "the unit writes it into a file of the start for --config, never onto the command line."
        ),
    )


# The wildcard addresses a server listens on every interface with, and the loopback address of
# the same family our probes ask it at.
_EVERY_INTERFACE = {"0.0.0.0": "127.0.0.1", "::": "::1"}


class Service(_Section):
    name: UnitStem = Field(DEFAULT_SERVICE, description="<name>.service, /etc/sglang/<name>.env")
    host: Word = Field(
        "0.0.0.0",
        description=(
            "--host: every interface. Our probes on the node (gate, decode check, drain, status) "
            "ask the server at this address, or at loopback where it is every interface (0.0.0.0: "
            "127.0.0.1, `::`: ::1); routers and Prometheus reach a server bound to one address "
            "there."
        ),
    )
    port: int = Field(30000, ge=1, le=65535, description="--port: SGLang's own default")
    user: UserName = Field("root", description="User=: the GPUs and /models need no extra setup")
    restart: RestartPolicy = Field("on-failure", description="Restart=: not after a clean stop")
    restart_sec: int = Field(10, ge=0, description="RestartSec=: no tight crash loop")
    timeout_start_sec: int = Field(1800, ge=1, description="TimeoutStartSec=; readiness is the gate's job")
    timeout_stop_sec: int = Field(120, ge=1, description="TimeoutStopSec=: workers must free GPU memory")
    dist_init_port: int = Field(
        20000,
        ge=1,
        le=65535,
        description=(
            "Multi-node (a serving group, sglang_deploy/plan/serving_group.py): the port of rank "
            "0's --dist-init-addr, where torch's TCPStore waits for the other nodes' ranks."
        ),
    )

    @property
    def probe_host(self) -> str:
        """The address our probes on the node ask the server at: `host`, or loopback where the
        server listens on every interface."""
        return _EVERY_INTERFACE.get(self.host, self.host)

    @property
    def probe_url(self) -> str:
        """http://<probe_host>:<port> (an IPv6 literal bracketed)."""
        return f"http://{_bracketed(self.probe_host)}:{self.port}"

    def reached_at(self, address: str) -> str:
        """Where another host reaches the server: ``address`` (the node's cluster address)
        where it listens on every interface, else the one address it is bound to."""
        return address if self.host in _EVERY_INTERFACE else self.host


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


class Readiness(_Section):
    timeout_s: int = Field(1200, gt=0, description="20 min: 1T weights + CUDA graphs took ~9")
    poll_interval_s: float = Field(0.25, gt=0, description="the gate notices ready/dead within a second")
    progress_every_s: float = Field(10.0, gt=0, description="a progress line while the server loads")
    hang_after_s: float = Field(
        300.0,
        gt=0,
        description=(
            "No new log line for this long outside the long phases (loading weights, capturing CUDA "
            "graphs) is reported as a hang, before the full timeout."
        ),
    )
    fired_up_grace_s: float = Field(
        15.0,
        gt=0,
        description=(
            '/ping 200 this long without the "fired up" log line: /health 200 confirms instead (a '
            "lost log line must not fail a serving start; the warmup's /freeze_gc between them "
            "times out at 10 s)."
        ),
    )
    settle_s: float = Field(
        5.0,
        ge=0,
        description=(
            "Once up, the server must stay up this long (the same main process, no cause of death "
            'in its log) before the gate says ready: a start that dies seconds after "fired up" is '
            "a failed start, rolled back, never the last known good."
        ),
    )


class Throughput(_Section):
    """The decode check after every restart that passed its gate (node/decode_check.py):
    streaming chat completions at temperature 0, one at a time. The defaults take about 13 s at
    60 tok/s; no expectation set: the figures are recorded, nothing is judged."""

    enabled: bool = Field(True, description="false: no decode check after a restart")
    requests: int = Field(5, ge=1, le=100, description="timed requests; the median is the figure")
    warmup_requests: int = Field(1, ge=0, le=20, description="untimed, first (caches, CUDA graphs' paths)")
    max_tokens: int = Field(128, ge=2, le=4096, description="tokens decoded per request")
    prompts: list[Annotated[str, Field(min_length=1)]] = Field(
        [], description="cycled; none: one fixed prompt"
    )
    timeout_s: float = Field(60.0, gt=0, description="per request")
    min_decode_tok_s: float | None = Field(None, gt=0, description="absolute floor (median)")
    max_regression_pct: float | None = Field(
        None,
        ge=0,
        le=100,
        description="Largest drop, in %, under the last known good's figure recorded on the same node.",
    )
    on_regression: Literal["warn", "fail", "rollback"] = Field(
        "warn",
        description=(
            "warn: served and recorded, with a warning; fail: the deploy fails, the new "
            "configuration keeps serving but is not the last known good; rollback: back to the last "
            "known good."
        ),
    )


class Gpu(_Section):
    min_driver: DriverVersion | None = Field(
        None,
        description=(
            'Checked by preflight and `make verify` where nvidia-smi exists ("no GPU: skipped" '
            "elsewhere). oldest NVIDIA driver accepted; null: any"
        ),
    )
    model: GpuModel | None = Field(None, description="text every GPU's name contains, e.g. H200; null: any")
    persistence_mode: bool = Field(
        True,
        description=(
            "The driver stays initialised between processes (no seconds-long re-init per start): "
            "nvidia-persistenced's unit enabled and running where the driver ships it (Ubuntu's "
            "unit, which passes --no-persistence-mode, gets a drop-in without it), else `nvidia-smi "
            "-pm 1`."
        ),
    )


class Pcie(_Section):
    disable_acs: bool = Field(
        False,
        description=(
            "true: a boot-time unit (sglang-disable-acs.service) clears ACS on every PCI bridge, so "
            "GPU peer-to-peer traffic is not redirected through the root complex (NCCL P2P on "
            "PCIe)."
        ),
    )


class Hook(_Section):
    system_wide: bool = Field(
        False, description="true: also the system interpreter (every Python on the node)"
    )


class Profile(_Section):
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
