"""Write sglang/srt/server_args_spec.py: the real SGLang's server options, as data.

Run by an interpreter that imports the real SGLang (not the stand-in), from anywhere:

    ~/.cache/sglang-deploy/real-sglang-venv/bin/python engine-standin/tools/gen_server_args_spec.py

(that venv is built by tests/unit/test_real_sglang_parser.py). `--stdout` prints the module
instead of writing it; a unit test compares that with the committed file.

It builds SGLang's parser as `prepare_server_args` does (`ServerArgs.add_cli_args` on
`ArgumentParser(prog="sglang serve")`) and records every action in order (the order decides
which flag an abbreviation or an ambiguous prefix names): option strings, dest, the kind of
action, nargs, the name of the type callable, choices, default, const, required. The
stand-in's parser (sglang/srt/server_args.py) is built from that table and re-implements each
type and action kind by name; a type or an action this script does not know stops it.
Environment variables that SGLang's parser reads while it is built are set and unset in turn,
and what they change is recorded (ENV_CHOICES); SGLANG_* variables of the caller are ignored.
The output is laid out as `ruff format` lays it out, so the file stays formatted.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any

OUTPUT = Path(__file__).resolve().parents[1] / "sglang" / "srt" / "server_args_spec.py"
LINE_LENGTH = 110  # ruff's line-length for this repository

# SGLang's type callables, by "module.qualname", and the names the stand-in gives them.
TYPE_NAMES = {
    "builtins.str": "str",
    "builtins.int": "int",
    "builtins.float": "float",
    "json.loads": "json.loads",
    "sglang.srt.utils.common.human_readable_int": "human_readable_int",
    "sglang.srt.utils.common.json_list_type": "json_list_type",
    "sglang.srt.utils.common.nullable_str": "nullable_str",
    "sglang.srt.model_executor.cuda_graph_config.parse_cuda_graph_backend_arg": "parse_cuda_graph_backend_arg",
    "sglang.srt.model_executor.cuda_graph_config.parse_cuda_graph_config_arg": "parse_cuda_graph_config_arg",
}

# Action classes, by name, and the kind the stand-in builds for each.
ACTION_KINDS = {
    "_StoreAction": "store",
    "_StoreTrueAction": "store_true",
    "BooleanOptionalAction": "boolean_optional",
    "LoRAPathAction": "lora_path",
    "DeprecatedStoreTrueAction": "deprecated_store_true",
    "DeprecatedStoreConstAction": "deprecated_store_const",
}

# What each kind implies, left out of its entries (the stand-in's builder supplies it).
IMPLIED = {
    "store": {},
    "store_true": {"nargs": 0, "const": True},
    "boolean_optional": {"nargs": 0},
    "lora_path": {},
    "deprecated_store_true": {"nargs": 0, "const": True},
    "deprecated_store_const": {"const": None},
}

# Environment variables SGLang's add_cli_args reads (envs.X.get()), set to "1" in turn.
ENV_SWITCHES = ("SGLANG_KV_CANARY_ENABLE_TOKEN_ORACLE",)

HEADER = '''\
"""SGLang {version}'s server options, one entry per action of its argument parser.

GENERATED from the real SGLang by engine-standin/tools/gen_server_args_spec.py: do not edit.
A data table, longer than the stand-in's other modules. Regenerate after an engine upgrade:

    ~/.cache/sglang-deploy/real-sglang-venv/bin/python engine-standin/tools/gen_server_args_spec.py

Entries are in the parser's order (it decides what an abbreviated or ambiguous flag names).
An Option is what `parser.add_argument` received: the flags, dest, the kind of action
(store, store_true, boolean_optional, and SGLang's own lora_path, deprecated_store_true,
deprecated_store_const), nargs, the name of the type callable (server_args.TYPES maps it),
choices, default, const, required; and `new_flag` / `const_value` of the deprecated kinds.
Left out of an entry: what its kind implies (store_true: nargs 0, const True) and values equal
to Option's own defaults (None, required False, action "store"). Help texts are not recorded.
`-h/--help` is argparse's own and not listed.

Computed by SGLang when the parser is built, recorded as they came out: the choices of
--reasoning-parser and --tool-call-parser (its parser registries), of the attention, MoE and
other backends (its choice tables); --sampling-backend's are a set there (UNORDERED_CHOICES)
and grow with an environment variable (ENV_CHOICES). Every default is data: SGLang takes each
from its ServerArgs field declaration.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional, Union

SGLANG_VERSION = "{version}"


class Option(NamedTuple):
    flags: tuple[str, ...]
    dest: str
    action: str = "store"
    nargs: Optional[Union[int, str]] = None
    type: Optional[str] = None
    choices: Optional[list] = None
    default: Any = None
    const: Any = None
    required: bool = False
    new_flag: Optional[str] = None
    const_value: Any = None


'''


# -- Reading the real parser -------------------------------------------------------------------


def real_parser() -> argparse.ArgumentParser:
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser


def type_name(action: argparse.Action) -> str | None:
    if action.type is None:
        return None
    key = f"{getattr(action.type, '__module__', '?')}.{getattr(action.type, '__qualname__', '?')}"
    if key not in TYPE_NAMES:
        sys.exit(f"{action.option_strings}: type {key} is new: re-implement it in the stand-in")
    return TYPE_NAMES[key]


def is_data(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(is_data(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and is_data(v) for k, v in value.items())
    return False


def entry(action: argparse.Action) -> dict[str, Any]:
    """The Option fields of one action, those its kind implies left out."""
    kind = ACTION_KINDS.get(type(action).__name__)
    if kind is None:
        sys.exit(f"{action.option_strings}: action {type(action).__name__} is new: teach the stand-in")
    if action.metavar is not None:
        sys.exit(f"{action.option_strings}: a metavar is not recorded yet")
    if not is_data(action.default) or not is_data(action.const):
        sys.exit(f"{action.option_strings}: default {action.default!r} is not data")
    choices = action.choices
    if isinstance(choices, (set, frozenset)):
        choices = sorted(choices)  # SGLang passes a set: its order changes with the hash seed
    fields = {
        "flags": tuple(action.option_strings),
        "dest": action.dest,
        "action": kind,
        "nargs": action.nargs,
        "type": type_name(action),
        "choices": list(choices) if choices is not None else None,
        "default": action.default,
        "const": action.const,
        "required": action.required,
        "new_flag": getattr(action, "new_flag", None),
        "const_value": getattr(action, "const_value", None),
    }
    neutral = {"action": "store", "required": False}
    implied = IMPLIED[kind]
    return {
        key: value
        for key, value in fields.items()
        if key in ("flags", "dest")
        or (key in implied and not same(value, implied[key]))
        or (key not in implied and not same(value, neutral.get(key)))
    }


def same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def entries(parser: argparse.ArgumentParser) -> list[dict[str, Any]]:
    actions = parser._actions
    if not isinstance(actions[0], argparse._HelpAction) or actions[0].option_strings != ["-h", "--help"]:
        sys.exit("the first action is not argparse's -h/--help")
    return [entry(action) for action in actions[1:]]


def env_choices(base: list[dict[str, Any]]) -> dict[str, dict[str, list]]:
    """Per dest, the choices each ENV_SWITCHES variable adds; anything else it changes stops."""
    import inspect

    from sglang.srt.server_args import ServerArgs

    read = set(re.findall(r"envs\.(\w+)\.get\(", inspect.getsource(ServerArgs.add_cli_args)))
    if read - set(ENV_SWITCHES):
        sys.exit(f"add_cli_args reads {sorted(read - set(ENV_SWITCHES))}: add them to ENV_SWITCHES")
    added: dict[str, dict[str, list]] = {}
    for name in ENV_SWITCHES:
        os.environ[name] = "1"
        try:
            switched = entries(real_parser())
        finally:
            del os.environ[name]
        for old, new in zip(base, switched):
            if old == new:
                continue
            if {**old, "choices": None} != {**new, "choices": None} or not set(old["choices"]) <= set(
                new["choices"]
            ):
                sys.exit(f"{name}=1 changes {old['flags']} beyond adding choices")
            extra = [c for c in new["choices"] if c not in old["choices"]]
            added.setdefault(old["dest"], {})[name] = extra
    return added


def extras() -> dict[str, Any]:
    """Values the stand-in's checks and type callables need, as SGLang has them."""
    from sglang.srt.model_executor import cuda_graph_config
    from sglang.srt.speculative import spec_info, spec_registry

    algorithm = spec_info.SpeculativeAlgorithm
    speculative = [m.name for m in algorithm] + sorted(spec_info._RESERVED_ALIASES)
    speculative += sorted(name for name in spec_registry._REGISTRY if name not in speculative)
    return {
        "speculative_algorithms": tuple(speculative),
        "cuda_graph_phases": tuple(cuda_graph_config.Phase.ALL),
        "cuda_graph_allowed_keys": {
            phase: tuple(keys) for phase, keys in cuda_graph_config.ALLOWED_KEYS_PER_PHASE.items()
        },
    }


# -- Writing Python as ruff formats it ---------------------------------------------------------


def literal(value: Any) -> str:
    """A value on one line, in ruff's style (double quotes)."""
    if isinstance(value, str):
        text = repr(value)
        if text.startswith("'") and '"' not in value:
            text = '"' + text[1:-1].replace("\\'", "'") + '"'
        return text
    if isinstance(value, tuple):
        inner = ", ".join(literal(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, list):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{literal(k)}: {literal(v)}" for k, v in value.items()) + "}"
    return repr(value)


def block(prefix: str, value: Any, suffix: str, indent: int) -> list[str]:
    """`prefix value suffix` at `indent`: on one line when it fits, else a collection one
    item a line with a trailing comma (which keeps ruff from joining it again)."""
    pad = " " * indent
    line = f"{pad}{prefix}{literal(value)}{suffix}"
    if len(line) <= LINE_LENGTH or not isinstance(value, (list, tuple, dict)) or not value:
        return [line]
    opener, closer = {list: "[]", tuple: "()", dict: "{}"}[type(value)]
    lines = [f"{pad}{prefix}{opener}"]
    if isinstance(value, dict):
        for key, item in value.items():
            lines += block(f"{literal(key)}: ", item, ",", indent + 4)
    else:
        for item in value:
            lines += block("", item, ",", indent + 4)
    return lines + [f"{pad}{closer}{suffix}"]


def option_lines(fields: dict[str, Any]) -> list[str]:
    args = [("", fields["flags"]), ("", fields["dest"])]
    args += [(f"{key}=", value) for key, value in fields.items() if key not in ("flags", "dest")]
    one_line = "    Option(" + ", ".join(f"{k}{literal(v)}" for k, v in args) + "),"
    if len(one_line) <= LINE_LENGTH:
        return [one_line]
    lines = ["    Option("]
    for prefix, value in args:
        lines += block(prefix, value, ",", 8)
    return lines + ["    ),"]


def render(version: str, options: list[dict[str, Any]], added: dict, more: dict[str, Any]) -> str:
    unordered = [o["dest"] for o in options if o.get("choices") and o.get("_unordered")]
    lines = HEADER.format(version=version).splitlines()
    lines.append("OPTIONS = (")
    for fields in options:
        lines += option_lines({k: v for k, v in fields.items() if k != "_unordered"})
    lines.append(")")
    lines += ["", "# Dests whose choices SGLang passes as a set: listed sorted here; argparse's messages"]
    lines += ["# list a set in hash order, which changes from run to run."]
    lines += block("UNORDERED_CHOICES = ", tuple(unordered), "", 0)
    lines += ["", "# Choices an environment variable (true when 1, true, yes or y) adds, per dest."]
    lines += block("ENV_CHOICES = ", added, "", 0)
    lines += ["", "# Dests that are not fields of SGLang's ServerArgs record (the parser's alone)."]
    lines += block("NOT_FIELDS = ", more["not_fields"], "", 0)
    lines += ["", "# --speculative-algorithm names SpeculativeAlgorithm.from_string accepts (any case)."]
    lines += block("SPECULATIVE_ALGORITHMS = ", more["speculative_algorithms"], "", 0)
    lines += ["", "# What parse_cuda_graph_config_arg accepts: the phases, and each phase's keys."]
    lines += block("CUDA_GRAPH_PHASES = ", more["cuda_graph_phases"], "", 0)
    lines += block("CUDA_GRAPH_ALLOWED_KEYS = ", more["cuda_graph_allowed_keys"], "", 0)
    return "\n".join(lines) + "\n"


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--stdout", action="store_true", help="print the module instead of writing it")
    to_stdout = cli.parse_args().stdout
    for name in [n for n in os.environ if n.startswith("SGLANG")]:
        del os.environ[name]

    from importlib import metadata

    import sglang.srt.server_args as real

    version = metadata.version("sglang")
    if "+" in version or Path(real.__file__).resolve().is_relative_to(OUTPUT.parents[2]):
        sys.exit(f"{real.__file__} ({version}) is the stand-in, not SGLang")
    parser = real_parser()
    options = entries(parser)
    for action, fields in zip(parser._actions[1:], options):
        if isinstance(action.choices, (set, frozenset)):
            fields["_unordered"] = True
    record = {f.name for f in real.record_fields(real.ServerArgs)}
    more = extras()
    more["not_fields"] = tuple(o["dest"] for o in options if o["dest"] not in record)
    plain = [{k: v for k, v in o.items() if k != "_unordered"} for o in options]
    text = render(version, options, env_choices(plain), more)
    if to_stdout:
        sys.stdout.write(text)
    else:
        OUTPUT.write_text(text)
        print(f"{OUTPUT}: {len(options)} options of sglang {version}", file=sys.stderr)


if __name__ == "__main__":
    main()
