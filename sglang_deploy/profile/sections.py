"""The sections of a profile (engine, model, secrets, service, readiness, throughput, gpu,
pcie, hook): each key with its default and its description (Field), the one place they are
written; profile/schema.py assembles them into the Profile and loads it."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from sglang_deploy.profile.fields import (
    DEFAULT_SERVICE,
    AbsPath,
    DriverVersion,
    EnvName,
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
    pattern,
    source_word,
)


class Section(BaseModel):
    """A part of a profile: a key it does not know is an error."""

    model_config = ConfigDict(extra="forbid")


class Engine(Section):
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


class HuggingFaceRepo(Section):
    repo: Annotated[
        str,
        pattern(
            r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?", "a Hugging Face repo id (owner/name)"
        ),
    ] = Field(description="owner/name on the Hugging Face Hub")
    revision: Annotated[
        str, pattern(r"[0-9a-f]{40}", "a 40-hex commit id (a branch or tag name moves: not reproducible)")
    ] = Field(
        description=(
            "A commit, never a branch or tag: a branch moves, so the same profile would stage "
            "another model tomorrow."
        )
    )


class Source(Section):
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


class Model(Section):
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


class Secret(Section):
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


class Service(Section):
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


class Readiness(Section):
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


class Throughput(Section):
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
    min_speedup_over: str | None = Field(
        None,
        min_length=1,
        description=(
            "Speculation must pay: the profile (e.g. baseline) whose figure recorded on the same node "
            "this speculating profile must beat, by min_speedup_pct; a node without that figure yet is "
            "said, not judged (`make ab` records it). Needs server_args.speculative-algorithm."
        ),
    )
    min_speedup_pct: float | None = Field(
        None,
        ge=-100,
        le=1000,
        description="How much faster than min_speedup_over's figure, in %; null: 0 (at least as fast).",
    )
    min_accept_length: float | None = Field(
        None,
        ge=1,
        description=(
            "Floor of the speculative accept length the server reports (tokens per verify step, "
            "its own included). Needs server_args.speculative-algorithm."
        ),
    )
    on_regression: Literal["warn", "fail", "rollback"] = Field(
        "warn",
        description=(
            "warn: served and recorded, with a warning; fail: the deploy fails, the new "
            "configuration keeps serving but is not the last known good; rollback: back to the last "
            "known good."
        ),
    )

    @property
    def alerted(self) -> dict[str, float]:
        """The expectations the alert rules compare against, as metrics_textfile.py takes them
        ({option: value}): those set, and min_speedup_pct 0 where only min_speedup_over is."""
        found = {
            "max_regression_pct": self.max_regression_pct,
            "min_decode_tok_s": self.min_decode_tok_s,
            "min_accept_length": self.min_accept_length,
            "min_speedup_pct": (self.min_speedup_pct or 0.0) if self.min_speedup_over else None,
        }
        return {name: value for name, value in found.items() if value is not None}


class Gpu(Section):
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


class Pcie(Section):
    disable_acs: bool = Field(
        False,
        description=(
            "true: a boot-time unit (sglang-disable-acs.service) clears ACS on every PCI bridge, so "
            "GPU peer-to-peer traffic is not redirected through the root complex (NCCL P2P on "
            "PCIe)."
        ),
    )


class Hook(Section):
    system_wide: bool = Field(
        False, description="true: also the system interpreter (every Python on the node)"
    )
