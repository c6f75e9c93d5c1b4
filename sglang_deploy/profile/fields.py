"""The field types of a profile's schema (profile/schema.py): what a value may be, each with
the words its error says, and the validators that keep values literal (one line, the text as
written)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, BeforeValidator, Field, PlainValidator

from sglang_deploy.node.lib.engine_auth import SENDABLE

_ONE_LINE_BREAKERS = ("\n", "\r", "\x00")


def pattern(regex: str, expected: str) -> AfterValidator:
    """A string field's check: the whole value matches ``regex``, else it is refused as not ``expected``."""
    compiled = re.compile(regex)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise ValueError(f"{value!r} is not {expected}")
        return value

    return AfterValidator(check)


def _one_line(value: str) -> str:
    if any(c in value for c in _ONE_LINE_BREAKERS):
        raise ValueError("must be one line (no newline, carriage return or NUL)")
    return value


def secret_value_problem(value: str, server_arg: str | None) -> str | None:
    """What a secret's value must be and is not (None: it is fine): one line, for the env file;
    for a server argument, a token an HTTP header carries (our probes send it as Bearer)."""
    if any(c in value for c in _ONE_LINE_BREAKERS):
        return "one line (no newline, carriage return or NUL)"
    if server_arg and value and not SENDABLE.fullmatch(value):
        return "printable ASCII without blanks (it is sent as an HTTP Bearer token)"
    return None


def _env_scalar(value: Any) -> Any:
    # YAML turns `yes`/`on`/`true` into booleans; which spelling the program wants is unknowable.
    if isinstance(value, bool):
        raise ValueError("true/false is ambiguous here: quote the value, e.g. '1' or 'true'")
    return str(value) if isinstance(value, (int, float)) else value


def _unit_text(value: str) -> str:
    _one_line(value)
    if value.endswith("\\"):  # a trailing backslash continues the line in a unit file
        raise ValueError("must not end with a backslash")
    return value


_RESERVED_FLAGS = {
    "model-path": "model.path",
    "model": "model.path",
    "served-model-name": "model.served_name",
    "host": "service.host",
    "port": "service.port",
}


# The server arguments that are secrets: a profile names them under `secrets:` with
# `server_arg:`, and the unit gives them to the server in a file (--config), never on its
# command line (the unit file is 0644, /proc/<pid>/cmdline is anyone's to read).
SecretServerArg = Literal["api-key", "admin-api-key"]


def _flag_name(name: str) -> str:
    if name.startswith("-"):
        raise ValueError(f"write flag names without leading dashes ({name.lstrip('-')!r})")
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", name):
        raise ValueError(
            f"{name!r} is not a flag name (lower-case letters, digits and dashes, "
            f"e.g. {name.replace('_', '-').lower() or 'tp-size'!r})"
        )
    if name in _RESERVED_FLAGS:
        raise ValueError(f"comes from {_RESERVED_FLAGS[name]}; remove it from server_args")
    if name in get_args(SecretServerArg):
        raise ValueError(
            "a secret: on the command line anyone on the node reads it (the unit file, "
            f"/proc/<pid>/cmdline); name it under secrets with server_arg: {name}, e.g. "
            f"secrets: {{SGLANG_{name.upper().replace('-', '_')}: "
            f"{{from_env: SGLANG_{name.upper().replace('-', '_')}, server_arg: {name}}}}}"
        )
    return name


def source_word(value: Any) -> Any:
    """A model source written as a word: `path` (the default: the directory is already on the
    node) is the empty section; any other word is refused."""
    if value == "path":
        return {}
    if isinstance(value, str):
        raise ValueError(
            f"{value!r} is not a source: path, {{controller: DIR}} or "
            "{huggingface: {repo: R, revision: COMMIT}}"
        )
    return value


def _arg_value(value: Any) -> Any:
    scalar = (str, int, float)
    ok_scalar = value is None or isinstance(value, (bool, *scalar))
    ok_list = (
        isinstance(value, list)
        and value
        and all(isinstance(v, scalar) and not isinstance(v, bool) for v in value)
    )
    if not (ok_scalar or ok_list):
        raise ValueError(
            "must be a string, a number, true/false/null or a non-empty list of strings and numbers"
        )
    if any(isinstance(v, str) and "\x00" in v for v in (value if ok_list else [value])):
        raise ValueError("contains a NUL character")
    return value


EnvName = Annotated[str, pattern(r"[A-Za-z_][A-Za-z0-9_]*", "a variable name ([A-Za-z_][A-Za-z0-9_]*)")]
_Scalar = str | int | float
EnvValue = Annotated[
    str, BeforeValidator(_env_scalar, json_schema_input_type=_Scalar), AfterValidator(_one_line)
]
FlagName = Annotated[str, AfterValidator(_flag_name)]
ArgValue = Annotated[
    Any, PlainValidator(_arg_value, json_schema_input_type=_Scalar | bool | None | list[_Scalar])
]
Pin = Annotated[
    str,
    pattern(
        r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?(\[[A-Za-z0-9._,-]*\])?"
        r"==[A-Za-z0-9][A-Za-z0-9.+!_-]*",
        "an exact pin (name==version)",
    ),
]
LockPlatform = Annotated[
    str,
    pattern(
        r"(x86_64|aarch64)-manylinux_2_[0-9]+",
        "a platform as uv names it: <x86_64|aarch64>-manylinux_2_<glibc minor>, e.g. x86_64-manylinux_2_34",
    ),
]
PythonVersion = Annotated[str, pattern(r"3\.[0-9]+", "a Python version X.Y, e.g. 3.12")]
# The venv path is written unquoted into ExecStart= and shell-free commands: keep it plain.
VenvPath = Annotated[
    str, pattern(r"(/[A-Za-z0-9._+@-]+)+", "an absolute path of letters, digits and ._+@- (no trailing /)")
]
AbsPath = Annotated[str, pattern(r"/[^\x00-\x1f]*", "an absolute path")]
Word = Annotated[str, pattern(r"\S+", "one word (non-empty, no spaces)")]
UnitStem = Annotated[
    str,
    pattern(
        r"[A-Za-z0-9][A-Za-z0-9:_.-]{0,199}", "a systemd unit name without suffix (letters, digits, :_.-)"
    ),
]
UserName = Annotated[str, pattern(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}", "a user name or UID")]
Description = Annotated[str, Field(min_length=1), AfterValidator(_unit_text)]
DriverVersion = Annotated[str, pattern(r"[0-9]+(\.[0-9]+)*", "an NVIDIA driver version (e.g. 550.54.15)")]
GpuModel = Annotated[str, Field(min_length=1), AfterValidator(_one_line)]
RestartPolicy = Literal["no", "on-success", "on-failure", "on-abnormal", "on-watchdog", "on-abort", "always"]

# Where a service's engine link (`venv`) and its venvs (`venvs/`) are unless the profile's
# engine.venv and the venvs_dir setting say: the service sglang keeps /opt/sglang, where they
# always were; any other service a directory of its own, so two services of one node share no
# link, no venv (nor the start-up hook inside it) and no venv pruning.
DEFAULT_SERVICE = "sglang"
ENGINE_HOME = "/opt/sglang"


def engine_home(service: str) -> str:
    """/opt/sglang for the service sglang, /opt/sglang/services/<service> for any other (a
    unit name's `:` as `_`: a venv path stays plain, VenvPath)."""
    if service == DEFAULT_SERVICE:
        return ENGINE_HOME
    return f"{ENGINE_HOME}/services/{re.sub(r'[^A-Za-z0-9._+@-]', '_', service)}"
