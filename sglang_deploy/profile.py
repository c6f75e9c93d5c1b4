"""Profiles: the schema of profiles/*.yml and the loader that resolves `extends:`.

This is the one documented place for profile defaults: a key a profile leaves out gets the
default written next to its field below.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union, get_args, get_origin

import yaml
from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field,
                      PlainValidator, PrivateAttr, ValidationError, model_validator)

from .errors import DeployError, ProfileError

PROFILES_DIR = Path(__file__).resolve().parent.parent / "profiles"
OVERRIDES = "profile_overrides"  # how errors name values that came from host data
_ONE_LINE_BREAKERS = ("\n", "\r", "\x00")


# -- Field types -----------------------------------------------------------------------------

def _pattern(regex: str, expected: str) -> AfterValidator:
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


_RESERVED_FLAGS = {"model-path": "model.path", "model": "model.path",
                   "served-model-name": "model.served_name",
                   "host": "service.host", "port": "service.port"}


def _flag_name(name: str) -> str:
    if name.startswith("-"):
        raise ValueError(f"write flag names without leading dashes ({name.lstrip('-')!r})")
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", name):
        raise ValueError(f"{name!r} is not a flag name (lower-case letters, digits and dashes, "
                         f"e.g. {name.replace('_', '-').lower() or 'tp-size'!r})")
    if name in _RESERVED_FLAGS:
        raise ValueError(f"comes from {_RESERVED_FLAGS[name]}; remove it from server_args")
    return name


def _arg_value(value: Any) -> Any:
    scalar = (str, int, float)
    ok_scalar = value is None or isinstance(value, (bool, *scalar))
    ok_list = (isinstance(value, list) and value
               and all(isinstance(v, scalar) and not isinstance(v, bool) for v in value))
    if not (ok_scalar or ok_list):
        raise ValueError("must be a string, a number, true/false/null "
                         "or a non-empty list of strings and numbers")
    if any(isinstance(v, str) and "\x00" in v for v in (value if ok_list else [value])):
        raise ValueError("contains a NUL character")
    return value


EnvName = Annotated[str, _pattern(r"[A-Za-z_][A-Za-z0-9_]*",
                                  "a variable name ([A-Za-z_][A-Za-z0-9_]*)")]
_Scalar = Union[str, int, float]
EnvValue = Annotated[str, BeforeValidator(_env_scalar, json_schema_input_type=_Scalar),
                     AfterValidator(_one_line)]
FlagName = Annotated[str, AfterValidator(_flag_name)]
ArgValue = Annotated[Any, PlainValidator(
    _arg_value, json_schema_input_type=Union[_Scalar, bool, None, list[_Scalar]])]
Pin = Annotated[str, _pattern(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?(\[[A-Za-z0-9._,-]*\])?"
                              r"==[A-Za-z0-9][A-Za-z0-9.+!_-]*", "an exact pin (name==version)")]
# The venv path is written unquoted into ExecStart= and shell-free commands: keep it plain.
VenvPath = Annotated[str, _pattern(r"(/[A-Za-z0-9._+@-]+)+",
                                   "an absolute path of letters, digits and ._+@- (no trailing /)")]
AbsPath = Annotated[str, _pattern(r"/[^\x00-\x1f]*", "an absolute path")]
Word = Annotated[str, _pattern(r"\S+", "one word (non-empty, no spaces)")]
UnitStem = Annotated[str, _pattern(r"[A-Za-z0-9][A-Za-z0-9:_.-]{0,199}",
                                   "a systemd unit name without suffix (letters, digits, :_.-)")]
UserName = Annotated[str, _pattern(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}", "a user name or UID")]
Description = Annotated[str, Field(min_length=1), AfterValidator(_unit_text)]
RestartPolicy = Literal["no", "on-success", "on-failure", "on-abnormal", "on-watchdog",
                        "on-abort", "always"]


class _KeyProblem(ValueError):
    """A whole-profile check that fails because of one key: errors point at that key's line."""

    def __init__(self, loc: tuple, message: str):
        super().__init__(message)
        self.loc = loc


# -- The profile -----------------------------------------------------------------------------

class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Engine(_Section):
    venv: VenvPath = "/opt/sglang/venv"   # the engine's own virtualenv
    python: Word = "python3"              # interpreter that creates the venv
    packages: list[Pin] = Field(min_length=1)  # exact pins: the profile says what is installed
    find_links: list[str] = []            # controller-side wheel files/dirs; pip uses --no-index
    # Distributions whose installed files are checked against their wheels' RECORD (drift):
    # the incident's real cause was untracked edits inside installed SGLang files.
    drift_check: list[Word] = ["sglang"]
    allow_drift: bool = False             # true: a drifted engine only warns; false: no restart


class Model(_Section):
    path: AbsPath    # pre-staged on the node; nothing is downloaded at start-up
    served_name: Word


class Secret(_Section):
    from_env: EnvName       # the operator's environment variable holding the value
    required: bool = False  # unset and required: the deploy stops; unset and optional: left out


class Service(_Section):
    name: UnitStem = "sglang"                   # <name>.service, /etc/sglang/<name>.env
    host: Word = "0.0.0.0"                      # --host: every interface
    port: int = Field(30000, ge=1, le=65535)    # --port: SGLang's own default
    user: UserName = "root"                     # User=: the GPUs and /models need no extra setup
    restart: RestartPolicy = "on-failure"       # Restart=: not after a clean stop
    restart_sec: int = Field(10, ge=0)          # RestartSec=: no tight crash loop
    timeout_start_sec: int = Field(1800, ge=1)  # TimeoutStartSec=; readiness is the gate's job
    timeout_stop_sec: int = Field(120, ge=1)    # TimeoutStopSec=: workers must free GPU memory


class Readiness(_Section):
    timeout_s: int = Field(1200, gt=0)           # 20 min: 1T weights + CUDA graphs took ~9
    poll_interval_s: float = Field(0.25, gt=0)   # the gate notices ready/dead within a second
    progress_every_s: float = Field(10.0, gt=0)  # a progress line while the server loads
    # No new log line for this long outside the long phases (loading weights, capturing CUDA
    # graphs) is reported as a hang, before the full timeout.
    hang_after_s: float = Field(300.0, gt=0)
    # /ping 200 this long without the "fired up" log line: /health 200 confirms instead (a lost
    # log line must not fail a serving start; the warmup's /freeze_gc between them times out at 10 s).
    fired_up_grace_s: float = Field(15.0, gt=0)


class Hook(_Section):
    system_wide: bool = False  # true: also the system interpreter (every Python on the node)


class Profile(_Section):
    """One serving configuration. `name` and `source` come from the files, not from keys."""

    description: Description
    engine: Engine
    model: Model
    server_args: dict[FlagName, ArgValue] = {}  # argv, in order; true: bare flag; false/null: none
    env: dict[EnvName, EnvValue] = {}           # env file and start-up hook
    secrets: dict[EnvName, Secret] = {}         # env file only, from the operator's environment
    service: Service = Field(default_factory=Service)
    readiness: Readiness = Field(default_factory=Readiness)
    hook: Hook = Field(default_factory=Hook)
    _name: str = PrivateAttr("")
    _source: tuple[Path, ...] = PrivateAttr(())

    @model_validator(mode="after")
    def _secrets_stay_out_of_env(self) -> Profile:
        for name in self.env:
            if name in self.secrets:
                raise _KeyProblem(("env", name), "also a secret: keep it under secrets only "
                                  "(env goes into the world-readable start-up hook)")
        return self

    @property
    def name(self) -> str:
        """The leaf profile file's stem."""
        return self._name

    @property
    def source(self) -> tuple[Path, ...]:
        """The files this profile was read from, leaf first."""
        return self._source

    def argv(self) -> list[str]:
        """SGLang's command-line arguments (after `python -m sglang.launch_server`)."""
        argv = ["--model-path", self.model.path, "--served-model-name", self.model.served_name,
                "--host", self.service.host, "--port", str(self.service.port)]
        for flag, value in self.server_args.items():
            if value is None or value is False:
                continue
            argv.append(f"--{flag}")
            if value is not True:
                argv.extend(str(v) for v in (value if isinstance(value, list) else [value]))
        return argv

    def env_file_vars(self, operator_env: Mapping[str, str]) -> dict[str, str]:
        """The env file's variables: `env`, then the secrets set in `operator_env`."""
        out = dict(self.env)
        for name, secret in self.secrets.items():
            value = operator_env.get(secret.from_env)
            if value is None:
                if secret.required:
                    raise DeployError(f"secret {name}: set {secret.from_env} in the deploy's "
                                      f"environment (profile {self.name} requires it)")
                continue
            if any(c in value for c in _ONE_LINE_BREAKERS):
                raise DeployError(f"secret {name}: {secret.from_env} must be one line "
                                  f"(no newline, carriage return or NUL)")
            out[name] = value
        return out

    def hook_vars(self) -> dict[str, str]:
        """The start-up hook's variables: `env` only, never secrets (the hook is 0644)."""
        return dict(self.env)


def schema_json() -> str:
    """JSON Schema of a profile file, for editors."""
    schema = Profile.model_json_schema()
    schema["properties"] = {"extends": {"type": "string", "title": "Extends"},
                            **schema["properties"]}
    return json.dumps(schema, indent=2)


# -- YAML with locations ---------------------------------------------------------------------

class _Located(dict):
    """A mapping that remembers, per key, the (file, line) that set it."""
    where: dict


class _LocatedList(list):
    where: dict


class _Loader(yaml.SafeLoader):
    """SafeLoader that records key locations and refuses duplicate keys (PyYAML keeps the last)."""

    def construct_mapping(self, node, deep=False):
        where = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key, line = self.construct_object(key_node, deep=True), key_node.start_mark.line + 1
            try:
                first = where.get(key)
            except TypeError:  # unhashable key: the base class reports it
                continue
            if first:
                raise ProfileError(f"duplicate key {key!r} (first on line {first[1]})",
                                   file=self.name, line=line)
            where[key] = (self.name, line)
        mapping = _Located(super().construct_mapping(node, deep))
        mapping.where = where
        return mapping

    def _construct_map(self, node):
        data = _Located()
        yield data
        value = self.construct_mapping(node)
        data.update(value)
        data.where = value.where

    def _construct_seq(self, node):
        data = _LocatedList()
        yield data
        data.extend(self.construct_sequence(node))
        data.where = {i: (self.name, item.start_mark.line + 1) for i, item in enumerate(node.value)}


_Loader.add_constructor("tag:yaml.org,2002:map", _Loader._construct_map)
_Loader.add_constructor("tag:yaml.org,2002:seq", _Loader._construct_seq)


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _read(path: Path) -> _Located:
    file = _display(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise ProfileError(f"cannot read: {reason}", file=file) from None
    loader = _Loader(text)
    loader.name = file
    try:
        data = loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark, context = exc.problem_mark or exc.context_mark, exc.context_mark
        if "'\\t'" in str(exc.problem):
            reason = "tab character (indent YAML with spaces)"
        else:
            reason = f"invalid YAML: {exc.problem}"
            if exc.context and context and context.line != mark.line:
                reason += f" ({exc.context} on line {context.line + 1})"
        raise ProfileError(reason, file=file, line=mark.line + 1 if mark else None) from None
    except yaml.YAMLError as exc:
        raise ProfileError(f"invalid YAML: {exc}", file=file) from None
    finally:
        loader.dispose()
    if data is None:  # an empty file
        data = _locate({}, file)
    if not isinstance(data, _Located):
        raise ProfileError("a profile is a mapping (description:, engine:, model:, ...)", file=file)
    return data


def _locate(value: Any, origin: str) -> Any:
    """Plain data (host data overrides) as located data, every key attributed to `origin`."""
    if isinstance(value, Mapping):
        located = _Located((key, _locate(child, origin)) for key, child in value.items())
    elif isinstance(value, list):
        located = _LocatedList(_locate(child, origin) for child in value)
    else:
        return value
    located.where = dict.fromkeys(located.keys() if isinstance(located, dict)
                                  else range(len(located)), (origin, None))
    return located


# -- Loading ---------------------------------------------------------------------------------

def load_profile(ref: str | Path, profiles_dir: str | Path = PROFILES_DIR,
                 overrides: Optional[Mapping[str, Any]] = None) -> Profile:
    """Read profile `ref` (a name under `profiles_dir`, or a path), resolve its `extends:`
    chain, deep-merge `overrides` (host data) on top and validate.

    Every problem is a ProfileError naming the file, the key path and the line that set it.
    """
    profiles_dir = Path(profiles_dir).resolve()
    try:
        path = _find(str(ref), Path.cwd(), [profiles_dir])
    except LookupError as exc:
        raise ProfileError(str(exc)) from None
    leaf = _display(path)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", path.stem):
        raise ProfileError("a profile file name is letters, digits and ._- "
                           "(the name is written into rendered files)", file=leaf)
    chain = _chain(path, profiles_dir)
    data = _locate({}, leaf)
    for _, layer in reversed(chain):  # root first, so each child wins over its parent
        data = _merge(data, layer)
    if overrides is not None:
        if not isinstance(overrides, Mapping) or "extends" in overrides:
            raise ProfileError("must be a mapping of profile keys (extends: only in files)",
                               key=OVERRIDES)
        data = _merge(data, _locate(overrides, OVERRIDES))
    try:
        profile = Profile.model_validate(data)
    except ValidationError as exc:
        raise _profile_error(exc, data, leaf) from None
    profile._name, profile._source = path.stem, tuple(p for p, _ in chain)
    return profile


def _find(ref: str, base: Path, dirs: list[Path]) -> Path:
    """A profile by path (relative to `base`) or by name (`<dir>/<ref>.yml`, first dir wins)."""
    if "/" in ref or ref.endswith((".yml", ".yaml")):
        path = base / Path(ref).expanduser()
        if path.is_file():
            return path.resolve()
        raise LookupError(f"no profile file {ref}")
    dirs = list(dict.fromkeys(d.resolve() for d in dirs))
    for directory in dirs:
        if (directory / f"{ref}.yml").is_file():
            return (directory / f"{ref}.yml").resolve()
    names = sorted({p.stem for d in dirs for p in d.glob("*.yml")})
    where = ", ".join(_display(d) for d in dirs)
    raise LookupError(f"no profile named {ref!r} in {where}{_hint(ref, names)}")


def _chain(path: Path, profiles_dir: Path) -> list[tuple[Path, _Located]]:
    """The profile at `path` and its `extends:` ancestors, leaf first."""
    chain = [(path, _read(path))]
    while "extends" in chain[-1][1]:
        here, data = chain[-1]
        parent = data.pop("extends")
        file, line = data.where.pop("extends")
        if not isinstance(parent, str) or not parent.strip():
            raise ProfileError("must be a profile name or a path",
                               file=file, key="extends", line=line)
        try:
            path = _find(parent, here.parent, [here.parent, profiles_dir])
        except LookupError as exc:
            raise ProfileError(str(exc), file=file, key="extends", line=line) from None
        seen = [p for p, _ in chain]
        if path in seen:
            cycle = " -> ".join(_display(p) for p in seen[seen.index(path):] + [path])
            raise ProfileError(f"cycle: {cycle}", file=file, key="extends", line=line)
        chain.append((path, _read(path)))
    return chain


def _merge(base: Any, over: Any) -> Any:
    """Deep merge: mappings merge key by key, `over` winning; anything else (lists too) is
    replaced."""
    if not (isinstance(base, _Located) and isinstance(over, _Located)):
        return over
    merged = _Located(base)
    merged.where = dict(base.where)
    for key, value in over.items():
        merged[key] = _merge(base[key], value) if key in base else value
        merged.where[key] = over.where.get(key)
    return merged


# -- Validation errors, located --------------------------------------------------------------

def _profile_error(exc: ValidationError, data: _Located, leaf: str) -> ProfileError:
    errors = [_one_error(err, data, leaf) for err in exc.errors()]
    first = errors[0]
    if len(errors) == 1:
        return first
    more = "".join(f"\n{err}" for err in errors[1:])
    return ProfileError(first.reason + more, file=first.file, key=first.key, line=first.line)


def _one_error(err: Mapping[str, Any], data: _Located, leaf: str) -> ProfileError:
    loc = tuple(part for part in err["loc"] if part != "[key]")
    kind, value = err["type"], err["input"]
    if kind == "extra_forbidden":
        reason = "unknown key" + _hint(loc[-1], _known_keys(loc[:-1]))
    elif kind == "missing":
        reason = "required key is missing"
    elif kind == "value_error":
        reason = str(err["ctx"]["error"])
        loc = getattr(err["ctx"]["error"], "loc", loc)
    elif kind in ("model_type", "dict_type"):
        reason = "must be a mapping"
    elif value is None or isinstance(value, (str, int, float)):
        reason = f"{err['msg']} (got {value!r})"
    else:
        reason = err["msg"]
    file, line = _where(data, loc)
    key = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    return ProfileError(reason, file=file or leaf, key=key or None, line=line)


def _where(data: Any, loc: tuple) -> tuple[Optional[str], Optional[int]]:
    """(file, line) of the deepest key along `loc` whose location is known."""
    found = (None, None)
    for part in loc:
        where = getattr(data, "where", {})
        if part not in where:
            break
        found = where[part] or found
        data = data[part]
    return found


def _known_keys(loc: tuple) -> list[str]:
    """The keys the schema allows in the mapping at `loc`."""
    tp: Any = Profile
    for part in loc:
        if isinstance(tp, type) and issubclass(tp, BaseModel) and part in tp.model_fields:
            tp = tp.model_fields[part].annotation
        elif get_origin(tp) is dict:
            tp = get_args(tp)[1]
        else:
            return []
    if not (isinstance(tp, type) and issubclass(tp, BaseModel)):
        return []
    return ["extends", *tp.model_fields] if tp is Profile else list(tp.model_fields)


def _hint(word: Any, choices: list[str]) -> str:
    close = difflib.get_close_matches(str(word), choices, n=1)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return f" (expected one of: {', '.join(choices)})" if choices else ""
