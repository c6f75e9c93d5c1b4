"""The environment variables SGLang 0.5.23 sets itself, in one table, and the lint rule that
refuses a profile whose `env` gives one of them a value the engine replaces.

A profile's `env` reaches the server through the env file; the launcher then sets some variables
over it before it starts its workers (or a worker does as it loads the model). Such a value never
runs: workers.py finds the engine's value in the workers' environment after a full load, the
cycle rolls back and loads again. The lint refuses it before anything is touched. A variable the
engine sets only when it is unset keeps the profile's value: its row says so (no `sets`) and is
never refused.

A row: the variable, what SGLang does with it, where (sglang 0.5.23, under sglang/srt/), and
`sets`: given the profile's server_args and env, the value the engine leaves it at, or None
where it keeps the profile's (OWN: a value of its own, whatever the profile says).

No row, because the lint cannot tell from the profile: variables set for one model family
(arg_groups/model_hook.py, model_overrides/, deepseek_v4_hook.py, moe_hook.py's NVFP4 and MORI
choices), for a multimodal model's tokenizer (TOKENIZERS_PARALLELISM, managers/
tokenizer_manager.py:635, in the main process only), by the CPU backend (LOCAL_SIZE), ROCm,
or one load format or transfer backend (RUNAI_STREAMER_*, MORI_*, NVSHMEM_QP_DEPTH).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sglang_deploy.errors import ProfileError
from sglang_deploy.profile.engine_flags import pinned_version
from sglang_deploy.profile.loader import OVERRIDES, read_layers
from sglang_deploy.profile.nccl_lint import Finding
from sglang_deploy.profile.schema import PROFILES_DIR, Profile

VERSION = "0.5.23"  # the engine version the table was read from
OWN = object()  # `sets`: a value of the engine's own (random, the GPU's), whatever the profile says
_TRUE = ("true", "1", "yes", "y")  # environ.py EnvBool.parse


@dataclass(frozen=True)
class Launch:
    """What the engine's choice depends on: the profile's server_args and env, and the
    variable being judged (`name`, whose profile value is `value`)."""

    args: Mapping[str, Any]
    env: Mapping[str, str]
    name: str

    @property
    def value(self) -> str:
        return self.env[self.name]

    def given(self, *flags: str) -> bool:
        """One of `flags` is on the command line (a bare flag or one with a value)."""
        return any(self.args.get(flag) not in (None, False) for flag in flags)

    def size(self, *flags: str) -> int:
        """An integer flag (the first spelling given), 1 when absent, as SGLang's sizes."""
        found = next((self.args[f] for f in flags if self.given(f)), 1)
        return int(found) if str(found).isdigit() else 1

    def true(self, variable: str) -> bool:
        """`variable` in the profile's env, read as SGLang's EnvBool reads it (default false)."""
        return self.env.get(variable, "").lower() in _TRUE


def _bit(on: bool) -> str:
    return "1" if on else "0"


def _deterministic(launch: Launch) -> bool:
    return launch.given("enable-deterministic-inference", "rl-on-policy-target")


def _deterministic_tp(launch: Launch) -> bool:
    return _deterministic(launch) and launch.size("tp-size", "tensor-parallel-size") > 1


def _nchannels(launch: Launch) -> str:
    value = launch.env.get("SGLANG_DETERMINISTIC_NCCL_NCHANNELS", "")
    return str(int(value)) if value.strip().lstrip("-").isdigit() else "8"  # EnvInt(8)


@dataclass(frozen=True)
class EngineVar:
    name: str  # the variable; "SGLANG_*" stands for every SGLANG_<X>
    does: str  # what SGLang 0.5.23 does with it, in words
    source: str  # file:line under sglang/srt/
    sets: Callable[[Launch], Any] | None = None  # None: only when unset, the profile's value stays

    def matches(self, variable: str) -> bool:
        return variable == self.name or (self.name.endswith("*") and variable.startswith(self.name[:-1]))


# The table: a new rule is one row.
ENGINE_VARS = (
    EngineVar(
        "CUDA_DEVICE_MAX_CONNECTIONS", "always sets it to 8", "entrypoints/engine.py:1921", lambda _: "8"
    ),
    EngineVar(
        "NCCL_CUMEM_ENABLE",
        "sets it to 1 when --enable-symm-mem is given (when unset: to 0, or 1 for KV-cache sharding "
        "or a multi-node MNNVL fabric)",
        "entrypoints/engine.py:1898",
        lambda launch: "1" if launch.given("enable-symm-mem") else None,
    ),
    EngineVar(
        "NCCL_NVLS_ENABLE",
        "sets it to 1 when --enable-nccl-nvls or --enable-symm-mem is given (when unset: to 0)",
        "entrypoints/engine.py:1909",
        lambda launch: "1" if launch.given("enable-nccl-nvls", "enable-symm-mem") else None,
    ),
    EngineVar(
        "NCCL_GRAPH_MIXING_SUPPORT",
        "sets it to 0 when --enable-symm-mem is given and --dcp-size is over 1 (when unset: to 0 with "
        "--dcp-size over 1)",
        "entrypoints/engine.py:1916",
        lambda launch: (
            "0"
            if launch.given("enable-symm-mem") and launch.size("dcp-size", "decode-context-parallel-size") > 1
            else None
        ),
    ),
    EngineVar(
        "TRTLLM_ENABLE_PDL",
        "sets it to 1 unless it is 0",
        "entrypoints/engine.py:1923",
        lambda launch: None if launch.value == "0" else "1",
    ),
    EngineVar("CUTE_DSL_LOG_LEVEL", "sets it to 30 only when unset", "entrypoints/engine.py:1927"),
    EngineVar("CUTE_DSL_LOG_TO_CONSOLE", "sets it to 1 only when unset", "entrypoints/engine.py:1931"),
    EngineVar(
        "SGLANG_RUN_ID",
        "always sets it to a new sglang-run-<time>-<random>",
        "entrypoints/engine.py:1936",
        lambda _: OWN,
    ),
    EngineVar(
        "NCCL_MNNVL_ENABLE",
        "sets it to 1 only when unset, multi-node on an MNNVL fabric",
        "entrypoints/engine.py:1886",
    ),
    EngineVar(
        "PROMETHEUS_MULTIPROC_DIR",
        "with --enable-metrics sets it only when unset (a set one holds the run's directory)",
        "utils/common.py:2839",
    ),
    EngineVar(
        "SGLANG_ENABLE_TORCH_COMPILE",
        "always sets it: 1 with --enable-torch-compile, else 0",
        "arg_groups/serving_hook.py:438",
        lambda launch: _bit(launch.given("enable-torch-compile")),
    ),
    EngineVar(
        "SGLANG_DISABLE_OUTLINES_DISK_CACHE",
        "always sets it: 1 with --disable-outlines-disk-cache, else 0",
        "arg_groups/serving_hook.py:441",
        lambda launch: _bit(launch.given("disable-outlines-disk-cache")),
    ),
    EngineVar(
        "SGLANG_ENABLE_DETERMINISTIC_INFERENCE",
        "always sets it: 1 with --enable-deterministic-inference (or --rl-on-policy-target), else 0",
        "arg_groups/serving_hook.py:444",
        lambda launch: _bit(_deterministic(launch)),
    ),
    EngineVar(
        "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE",
        "sets it to 0 with --enable-deterministic-inference",
        "arg_groups/serving_hook.py:448",
        lambda launch: "0" if _deterministic(launch) else None,
    ),
    EngineVar(
        "SGLANG_MAMBA_SSM_DTYPE",
        "sets it to --mamba-ssm-dtype's value when that is given",
        "arg_groups/serving_hook.py:440",
        lambda launch: str(launch.args["mamba-ssm-dtype"]) if launch.given("mamba-ssm-dtype") else None,
    ),
    EngineVar(
        "SGLANG_USE_BREAKABLE_CUDA_GRAPH",
        "sets it to 1 with --debug-cuda-graph",
        "arg_groups/serving_hook.py:459",
        lambda launch: "1" if launch.given("debug-cuda-graph") else None,
    ),
    EngineVar(
        "SGLANG_USE_CUDA_IPC_TRANSPORT",
        "always sets it: 1 when the multimodal feature transport is cuda_ipc (--mm-feature-transport, "
        "else this variable read as a boolean), else 0",
        "arg_groups/serving_hook.py:940",
        lambda launch: _bit(
            str(launch.args["mm-feature-transport"]) == "cuda_ipc"
            if launch.given("mm-feature-transport")
            else launch.true(launch.name)
        ),
    ),
    EngineVar(
        "NCCL_ALGO",
        "sets it to allreduce:tree with --enable-deterministic-inference and --tp-size over 1",
        "arg_groups/attention_hook.py:676",
        lambda launch: "allreduce:tree" if _deterministic_tp(launch) else None,
    ),
    *(
        EngineVar(
            name,
            "sets it to SGLANG_DETERMINISTIC_NCCL_NCHANNELS (default 8) with "
            "--enable-deterministic-inference and --tp-size over 1",
            f"arg_groups/attention_hook.py:{line}",
            lambda launch: _nchannels(launch) if _deterministic_tp(launch) else None,
        )
        for name, line in (("NCCL_MIN_NCHANNELS", 697), ("NCCL_MAX_NCHANNELS", 698))
    ),
    EngineVar(
        "SGLANG_SCHEDULER_SKIP_ALL_GATHER",
        "sets it to True with --dwdp-size over 1",
        "arg_groups/parallel_hook.py:501",
        lambda launch: "True" if launch.size("dwdp-size") > 1 else None,
    ),
    EngineVar(
        "SGLANG_SYMM_MEM_PREALLOC_GB_SIZE",
        "with --enable-symm-mem sets it to 4 only when unset",
        "arg_groups/memory_hook.py:349",
    ),
    EngineVar("NCCL_GRAPH_REGISTER", "sets it to 0 only when unset", "arg_groups/parallel_hook.py:425"),
    EngineVar(
        "FLASHINFER_CUDA_ARCH_LIST",
        "always sets it, in each worker as it loads the model, to the GPU's compute capability "
        "(9.0a on an H200) where flashinfer is installed",
        "utils/common.py:1233",
        lambda _: OWN,
    ),
    EngineVar(
        "DG_JIT_CACHE_DIR",
        "always sets it to SGLANG_DG_CACHE_DIR (default <SGLANG_CACHE_DIR>/deep_gemm)",
        "layers/deep_gemm_wrapper/compile_utils.py:51",
        lambda launch: launch.env.get("SGLANG_DG_CACHE_DIR", OWN),
    ),
    EngineVar(
        "DG_JIT_USE_NVRTC",
        "always sets it: 1 when SGLANG_DG_USE_NVRTC is true, else 0",
        "layers/deep_gemm_wrapper/compile_utils.py:56",
        lambda launch: _bit(launch.true("SGLANG_DG_USE_NVRTC")),
    ),
    EngineVar(
        "CUDA_VISIBLE_DEVICES",
        "with SGLANG_ONE_VISIBLE_DEVICE_PER_PROCESS true sets each worker's to its own one GPU",
        "platforms/cuda.py:82",
        lambda launch: OWN
        if launch.true("SGLANG_ONE_VISIBLE_DEVICE_PER_PROCESS") and "," in launch.value
        else None,
    ),
    EngineVar(
        "SGLANG_*",
        "sets SGLANG_<X> to SGL_<X>'s value where SGL_<X> is set too (the old prefix)",
        "environ.py:2300",
        lambda launch: launch.env.get("SGL_" + launch.name.removeprefix("SGLANG_")),
    ),
)


def lint_engine_env(profile: Profile) -> list[Finding]:
    """An error per `env` variable that SGLang (the pinned 0.5.23, or a local build of it) sets
    over the profile's value, located at the line that sets it (Finding.where)."""
    version = pinned_version(profile.engine.packages)
    if version is None or version.split("+", 1)[0] != VERSION:
        return []
    found = []
    for name, value in profile.env.items():
        row = next((row for row in ENGINE_VARS if row.matches(name)), None)
        if row is None or row.sets is None:
            continue
        want = row.sets(Launch(profile.server_args, profile.env, name))
        if want is None or want == value:
            continue
        runs = "a value of its own" if want is OWN else repr(want)
        message = f"SGLang {VERSION} {row.does} (srt/{row.source}): the server runs with {runs}, not {value!r}; remove it from env"
        found.append(Finding("error", f"env.{name}", message, where=_where(profile, name)))
    return found


def _where(profile: Profile, name: str) -> str | None:
    """`file:line` of the profile file that sets env.NAME (`profile_overrides` where host data
    does), or None when unknown."""
    if not profile.source:
        return None
    try:
        env = read_layers(profile.source[0], PROFILES_DIR).data.get("env")
    except ProfileError:
        return None
    if not isinstance(env, Mapping) or name not in env or str(env[name]) != profile.env[name]:
        return OVERRIDES
    file, line = env.where.get(name) or (None, None)
    return f"{file}:{line}" if line else file
