"""The arguments of the server.

The parser has every option of SGLang 0.5.23's (`ServerArgs.add_cli_args`), built from
server_args_spec.py, a table generated from the real parser (engine-standin/tools/): the same
flags and aliases in the same order, value types, nargs, actions, choices and defaults. So an
argv the stand-in accepts is one SGLang accepts, and a mistake fails the same way: argparse
prints usage plus `sglang serve: error: ...` and exits 2. The value types and SGLang's own
actions are re-implemented here, by the names the table gives them. `prepare_server_args`
does what SGLang's does around the parse: `--config FILE.yaml` merging, the --log-level check.

Two consequences of 0.5.23's parser worth knowing:
* It has no `--cuda-graph-max-bs` any more, only `--cuda-graph-max-bs-decode` and `-prefill`;
  with argparse's prefix matching `--cuda-graph-max-bs` is "ambiguous option ... could match
  --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill" (exit 2).
* `--speculative-algorithm` is a free string at parse time; an unknown name fails later,
  before anything is spawned: `ValueError: Unknown speculative algorithm name: X` (exit 1).

The ServerArgs record keeps, as typed fields, what the stand-in acts on; every other option's
value is in `other_args` and readable as an attribute too (`server_args.reasoning_parser`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import re
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any, Optional

import orjson

from sglang.srt.server_args_spec import (
    CUDA_GRAPH_ALLOWED_KEYS,
    CUDA_GRAPH_PHASES,
    ENV_CHOICES,
    NOT_FIELDS,
    OPTIONS,
    SPECULATIVE_ALGORITHMS,
    Option,
)

logger = logging.getLogger(__name__)

# -- Value types: SGLang's callables, by the names the table uses ------------------------------
# argparse names a type in its messages ("invalid int value", "invalid loads value") unless it
# raises ArgumentTypeError, whose text it prints; each keeps SGLang's name and messages.


def human_readable_int(value: str) -> int:
    """An int, or one with an SI (k, M, G, T; decimals allowed: '25.6k') or IEC suffix
    (Ki, Mi, Gi, Ti). Suffixes are case-sensitive."""
    value = value.strip()
    si = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    iec = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if match:
        number, suffix = match.groups()
        if suffix in iec:
            if "." in number:
                raise argparse.ArgumentTypeError(
                    f"Decimals are not allowed with IEC suffixes like '{suffix}'. "
                    f"Use an integer IEC value such as '{int(Decimal(number))}{suffix}', "
                    f"or an SI value such as '{number}{suffix[0]}'."
                )
            return int(number) * iec[suffix]
        return int(Decimal(number) * si[suffix])
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"Invalid integer value: '{value}'. "
            "Use a plain integer, SI suffixes (1k, 1M), or IEC suffixes (1Ki, 1Mi). "
            "Suffixes are case-sensitive."
        )


def json_list_type(value: str) -> Any:
    """Any JSON value, read by orjson as SGLang reads it."""
    try:
        return orjson.loads(value)
    except json.JSONDecodeError:  # orjson's error is a subclass
        raise argparse.ArgumentTypeError(f"Invalid JSON list: {value}. Please provide a valid JSON list.")


def nullable_str(val: str) -> Optional[str]:
    """'' and 'None' mean no value."""
    if not val or val == "None":
        return None
    return val


def parse_cuda_graph_backend_arg(raw: str) -> str:
    """Reject the retired backend before argparse checks the choices."""
    if raw == "tc_piecewise":
        raise argparse.ArgumentTypeError("tc_piecewise was removed; select breakable, full, or disabled")
    return raw


def parse_cuda_graph_config_arg(raw: str) -> dict[str, dict[str, Any]]:
    """--cuda-graph-config: a JSON object of phase -> settings, each phase's keys checked."""
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"--cuda-graph-config must be JSON: {e}")
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError(
            f"--cuda-graph-config must be a JSON object, got {type(parsed).__name__}"
        )
    result: dict[str, dict[str, Any]] = {}
    for phase, phase_settings in parsed.items():
        phase = str(phase)
        if phase not in CUDA_GRAPH_PHASES:
            raise argparse.ArgumentTypeError(
                f"--cuda-graph-config: unknown phase '{phase}', expected one of {CUDA_GRAPH_PHASES}"
            )
        if not isinstance(phase_settings, dict):
            raise argparse.ArgumentTypeError(
                f"--cuda-graph-config['{phase}'] must be a JSON object, got {type(phase_settings).__name__}"
            )
        if "backend" in phase_settings:
            parse_cuda_graph_backend_arg(phase_settings["backend"])
        allowed = CUDA_GRAPH_ALLOWED_KEYS[phase]
        result[phase] = {}
        for key, value in phase_settings.items():
            if key not in allowed:
                raise argparse.ArgumentTypeError(
                    f"--cuda-graph-config['{phase}']: unknown key '{key}', expected one of {allowed}"
                )
            result[phase][key] = value
    return result


TYPES: dict[str, Callable[[str], Any]] = {
    "str": str,
    "int": int,
    "float": float,
    "json.loads": json.loads,
    "human_readable_int": human_readable_int,
    "json_list_type": json_list_type,
    "nullable_str": nullable_str,
    "parse_cuda_graph_backend_arg": parse_cuda_graph_backend_arg,
    "parse_cuda_graph_config_arg": parse_cuda_graph_config_arg,
}

# -- SGLang's own actions (class names as SGLang's: --config's messages name them) -------------


def warn_deprecated(option_string: Optional[str], new_flag: Optional[str]) -> None:
    """SGLang's warning, in yellow; before logging is set up it goes plain to stderr."""
    replacement = f" Use '{new_flag}' instead." if new_flag else ""
    message = f"'{option_string}' is deprecated and will be removed in a future release.{replacement}"
    logger.warning(f"\033[1;33m{message}\033[0m")


class LoRAPathAction(argparse.Action):
    """--lora-paths: each value a path, or a JSON object with lora_name and lora_path."""

    def __call__(self, parser, namespace, values, option_string=None):
        lora_paths = []
        if values:
            assert isinstance(values, list), "Expected a list of LoRA paths."
            for lora_path in values:
                lora_path = lora_path.strip()
                if lora_path.startswith("{") and lora_path.endswith("}"):
                    obj = json.loads(lora_path)
                    assert "lora_path" in obj and "lora_name" in obj, (
                        f"{repr(lora_path)} looks like a JSON str, "
                        "but it does not contain 'lora_name' and 'lora_path' keys."
                    )
                    lora_paths.append(obj)
                else:
                    lora_paths.append(lora_path)
        setattr(namespace, self.dest, lora_paths)


class DeprecatedStoreTrueAction(argparse.Action):
    """A deprecated flag that still stores True, with a warning naming its replacement."""

    def __init__(self, option_strings, dest, new_flag=None, nargs=0, const=True, default=False, **kwargs):
        self.new_flag = new_flag
        super().__init__(option_strings, dest, nargs=nargs, const=const, default=default, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        warn_deprecated(option_string, self.new_flag)
        setattr(namespace, self.dest, True)


class DeprecatedStoreConstAction(argparse.Action):
    """A deprecated flag that writes `const_value` onto its replacement's dest, with a warning."""

    def __init__(
        self, option_strings, dest, new_flag=None, const_value=None, nargs=0, default=None, **kwargs
    ):
        self.new_flag = new_flag
        self.const_value = const_value
        super().__init__(option_strings, dest, nargs=nargs, default=default, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        warn_deprecated(option_string, self.new_flag)
        setattr(namespace, self.dest, self.const_value)


def add_option(parser: argparse.ArgumentParser, option: Option) -> None:
    """parser.add_argument as SGLang called it for this table entry."""
    kind, flags = option.action, option.flags
    kwargs: dict[str, Any] = {"dest": option.dest, "required": option.required, "default": option.default}
    if kind == "boolean_optional":
        # The table lists `--x, --no-x`; the action makes each `--no-` form itself.
        flags, kwargs["action"] = flags[::2], argparse.BooleanOptionalAction
    elif kind in ("store_true", "deprecated_store_true"):
        kwargs["action"] = "store_true"
        if kind == "deprecated_store_true":
            kwargs.update(action=DeprecatedStoreTrueAction, new_flag=option.new_flag)
    elif kind in ("store", "lora_path", "deprecated_store_const"):
        choices = option.choices
        for variable, added in ENV_CHOICES.get(option.dest, {}).items():
            if os.environ.get(variable, "").lower() in ("true", "1", "yes", "y"):  # SGLang's EnvBool
                choices = list(choices or []) + list(added)
        kwargs.update(nargs=option.nargs, type=TYPES[option.type] if option.type else None, choices=choices)
        if kind == "store":
            kwargs.update(action="store", const=option.const)
        elif kind == "lora_path":
            kwargs["action"] = LoRAPathAction
        else:
            kwargs.update(action=DeprecatedStoreConstAction, new_flag=option.new_flag)
            kwargs["const_value"] = option.const_value
    else:
        raise ValueError(f"{flags}: unknown kind of action {kind!r}")
    parser.add_argument(*flags, **kwargs)


# -- The record ------------------------------------------------------------------------------


@dataclasses.dataclass
class ServerArgs:
    """Server-wide configuration: typed fields for what the stand-in acts on (defaults as
    SGLang's), every other option's parsed value in `other_args`."""

    # Model and tokenizer
    model_path: str
    trust_remote_code: bool = False
    context_length: Optional[int] = None
    # Memory and scheduling
    mem_fraction_static: Optional[float] = None
    # Distributed topology and parallelism
    dist_timeout: Optional[int] = None
    dist_init_addr: Optional[str] = None
    nnodes: int = 1
    node_rank: int = 0
    tp_size: int = 1
    # Device info and server timeout
    watchdog_timeout: float = 300
    # HTTP server
    host: str = "127.0.0.1"
    port: int = 30000
    # API related
    served_model_name: Optional[str] = None
    # Logging, metrics
    enable_metrics: bool = False
    # Cuda graphs
    cuda_graph_max_bs_decode: Optional[int] = None
    cuda_graph_max_bs_prefill: Optional[int] = None
    # Speculative decoding
    speculative_algorithm: Optional[str] = None
    speculative_draft_model_path: Optional[str] = None
    speculative_num_steps: Optional[int] = None
    speculative_eagle_topk: Optional[int] = None
    speculative_num_draft_tokens: Optional[int] = None

    # The other options' values, by dest
    other_args: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        # Like SGLang: /v1/models lists the model path unless a name is given.
        if self.served_model_name is None:
            self.served_model_name = self.model_path

    def __getattr__(self, name: str) -> Any:
        """An option without a typed field, as SGLang's record has it (`args.api_key`)."""
        other = vars(self).get("other_args", {})  # absent while unpickling
        if name.startswith("__") or name not in other:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return other[name]

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        """Register SGLang 0.5.23's options, in its order (server_args_spec.OPTIONS)."""
        for option in OPTIONS:
            add_option(parser, option)

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> ServerArgs:
        typed = [f.name for f in dataclasses.fields(cls) if f.name != "other_args"]
        other = {k: v for k, v in vars(args).items() if k not in typed and k not in NOT_FIELDS}
        return cls(**{name: getattr(args, name) for name in typed}, other_args=other)

    def check_server_args(self) -> None:
        """Checks SGLang makes before launching anything (an exception: exit 1)."""
        if self.speculative_algorithm is not None and (
            self.speculative_algorithm.upper() not in SPECULATIVE_ALGORITHMS
        ):
            raise ValueError(f"Unknown speculative algorithm name: {self.speculative_algorithm}")
        assert self.tp_size % self.nnodes == 0, "tp_size must be divisible by number of nodes"
        # 0.5.23 checks nothing else about the nodes: no --dist-init-addr with --nnodes > 1, or a
        # --node-rank outside [0, nnodes), is accepted and only shows as a rendezvous that never
        # completes (dist_group).


def make_parser() -> argparse.ArgumentParser:
    """SGLang's parser is named `sglang serve`; its usage and error lines say so."""
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser


# -- --config FILE.yaml: SGLang's ConfigArgumentMerger ---------------------------------------


def _config_keys(action: argparse.Action) -> set:
    return {action.dest} | {o[2:].replace("-", "_") for o in action.option_strings if o.startswith("--")}


def merge_config_with_args(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """The YAML file's options as flags before argv's (argv wins), `--config FILE` taken out.

    As SGLang: true store_true keys become the flag, false ones nothing, other booleans
    `--key true|false`, lists `--key a b`, mappings JSON; keys of multi-value actions are
    refused. Errors are ValueError (exit 1). PyYAML is imported here: not in the closure.
    """
    import yaml

    indices = [i for i, arg in enumerate(argv) if arg == "--config"]
    if len(indices) > 1:
        raise ValueError("Multiple config files specified! Only one allowed.")
    if indices[0] == len(argv) - 1:
        raise ValueError("No config file specified after --config flag!")
    file_path = argv[indices[0] + 1]
    if not file_path:
        return argv
    if Path(file_path).suffix.lower() not in [".yaml", ".yml"]:
        raise ValueError(f"Config file must be YAML format, got: {Path(file_path).suffix}")
    if not Path(file_path).exists():
        raise ValueError(f"Config file not found: {file_path}")
    with open(file_path) as file:
        config = yaml.safe_load(file)
    config = {} if config is None else config
    if not isinstance(config, dict):
        raise ValueError("Config file must contain a dictionary at root level")

    def single(a: argparse.Action) -> bool:
        return isinstance(a, (argparse._StoreTrueAction, argparse._StoreAction)) or a.nargs is None

    store_true = {
        k for a in parser._actions if isinstance(a, argparse._StoreTrueAction) for k in _config_keys(a)
    }
    supported = {k for a in parser._actions if single(a) for k in _config_keys(a)}
    unsupported = {
        key: a
        for a in parser._actions
        if a.option_strings and not single(a) and not {"--config", "--help", "-h"} & set(a.option_strings)
        for key in _config_keys(a)
        if key not in supported
    }
    args: list[str] = []
    for key, value in config.items():
        key_norm = key.replace("-", "_")
        if key_norm in unsupported:
            action_name = unsupported[key_norm].__class__.__name__
            raise ValueError(f"Unsupported config option '{key_norm}' with action '{action_name}'")
        if isinstance(value, bool):
            if key_norm not in store_true:
                args += [f"--{key}", str(value).lower()]
            elif value:
                args.append(f"--{key}")
        elif isinstance(value, list):
            if value:
                args += [f"--{key}"] + [str(item) for item in value]
        else:
            args += [f"--{key}", json.dumps(value) if isinstance(value, dict) else str(value)]
    return args + argv[: indices[0]] + argv[indices[0] + 2 :]


def prepare_server_args(argv: list[str]) -> ServerArgs:
    """Parse argv into ServerArgs; unknown flags or bad values exit 2 with argparse's message."""
    parser = make_parser()
    if "--config" in argv:
        argv = merge_config_with_args(parser, argv)
    raw_args = parser.parse_args(argv)
    # SGLang sets up logging with this level first: a name logging lacks fails here (exit 1).
    logging.Logger("sglang").setLevel(getattr(logging, raw_args.log_level.upper()))
    return ServerArgs.from_cli_args(raw_args)
