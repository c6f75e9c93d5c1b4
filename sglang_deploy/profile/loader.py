"""Reading profile files: YAML that remembers where every key was set, `extends:` chains,
host data overrides merged on top (validation errors turned into `file:line: key: reason`:
key_errors.py).

The schema itself (and every profile default) is in schema.py and sections.py; this module
knows no field but `env` and `server_args`, whose scalars it keeps as written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sglang_deploy.errors import ProfileError
from sglang_deploy.profile.key_errors import hint

OVERRIDES = "profile_overrides"  # how errors name values that came from host data


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
                raise ProfileError(
                    f"duplicate key {key!r} (first on line {first[1]})", file=self.name, line=line
                )
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


# -- Scalars as written in env and server_args -----------------------------------------------

# `env` values and `server_args` values end up as text (the env file, argv), and YAML 1.1
# rewrites text that looks like a number: `0755` is 493, `1:30` is 90, `12.10` is 12.1, `0042`
# is 34, `1_000` is 1000, `2024-01-01` a date. There a number stays a number only when it reads
# back as written (`8`, `0.85`); anything else is kept as the text in the file.
_TAG = "tag:yaml.org,2002:"
_AS_WRITTEN_SECTIONS = ("env", "server_args")
# true/false in server_args mean a bare flag / no flag. YAML 1.1's other spellings of a boolean
# (yes, no, on, off) are refused there: `--flag on` and a bare `--flag` differ, and which one
# was meant is unknowable. (In env every boolean is refused by the schema.)
_YAML12_BOOLS = {"true", "True", "TRUE", "false", "False", "FALSE"}


def _keep_scalar_text(loader: _Loader, top: yaml.Node) -> None:
    """Rewrite, before construction, the value nodes of `top`'s env and server_args mappings
    (and of mappings merged into them with `<<`) so that they construct as written."""
    for mapping in _merged(top):
        for key, value in mapping.value:
            if isinstance(key, yaml.ScalarNode) and key.value in _AS_WRITTEN_SECTIONS:
                for section in _merged(value):
                    section.value = [
                        (k, _as_written(loader, key.value, k, v, items=True)) for k, v in section.value
                    ]


def _merged(node: yaml.Node) -> list:
    """`node` (if a mapping) and the mappings its `<<` keys merge in."""
    if not isinstance(node, yaml.MappingNode):
        return []
    found = [node]
    for key, value in node.value:
        if key.tag == _TAG + "merge":
            for merged in value.value if isinstance(value, yaml.SequenceNode) else [value]:
                found += _merged(merged)
    return found


def _as_written(loader: _Loader, section: str, key: yaml.Node, node: yaml.Node, items=False) -> yaml.Node:
    """`node` (the value of `key` in `section`; `items`: a list's items too), retagged as a
    string where YAML 1.1 would not construct it as written."""
    if items and isinstance(node, yaml.SequenceNode):  # a flag's list of values
        values = [_as_written(loader, section, key, item) for item in node.value]
        return yaml.SequenceNode(node.tag, values, node.start_mark, node.end_mark, node.flow_style)
    if not isinstance(node, yaml.ScalarNode) or key.tag == _TAG + "merge":
        return node
    if node.tag == _TAG + "bool" and items and section == "server_args" and node.value not in _YAML12_BOOLS:
        raise ProfileError(
            f"{node.value!r} is a YAML 1.1 boolean: write true (a bare flag), false (no flag) "
            f"or, for the text, quote it ('{node.value}')",
            file=loader.name,
            key=f"server_args.{key.value}",
            line=node.start_mark.line + 1,
        )
    if node.tag == _TAG + "int" and str(loader.construct_yaml_int(node)) == node.value:
        return node
    if node.tag == _TAG + "float" and str(loader.construct_yaml_float(node)) == node.value:
        return node
    if node.tag in (_TAG + "int", _TAG + "float", _TAG + "timestamp"):
        return yaml.ScalarNode(_TAG + "str", node.value, node.start_mark, node.end_mark, node.style)
    return node


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _keep_scalar_text_under(loader: _Loader, node: yaml.Node, key: str, seen=None) -> None:
    """_keep_scalar_text on the value of every `key` in the mappings under `node`, at any depth
    (a hosts file's `profile_overrides`, in `defaults:` or under a host)."""
    seen = set() if seen is None else seen
    if id(node) in seen:  # an alias: the same node again
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        for name, value in node.value:
            if isinstance(name, yaml.ScalarNode) and name.value == key:
                _keep_scalar_text(loader, value)
            _keep_scalar_text_under(loader, value, key, seen)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _keep_scalar_text_under(loader, item, key, seen)


def read_yaml(path: Path, as_written_under: str | None = None) -> Any:
    """The YAML file at `path`, read as profiles are: a duplicate key refused naming both of its
    lines, `env` and `server_args` scalars kept as written; those of the top mapping (a
    profile), or with `as_written_under` those under every such key (a hosts file's
    `profile_overrides`). Plain data (None for an empty file); ProfileError (`file:line`)."""
    data = _read_yaml(Path(path), as_written_under)
    return _plain(data)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _plain(child) for key, child in value.items()}
    if isinstance(value, list):
        return [_plain(child) for child in value]
    return value


def _read_yaml(path: Path, as_written_under: str | None = None) -> Any:
    file = _display(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise ProfileError(f"cannot read: {reason}", file=file) from None
    loader = _Loader(text)
    loader.name = file
    try:
        node = loader.get_single_node()
        if node is not None and as_written_under:
            _keep_scalar_text_under(loader, node, as_written_under)
        elif node is not None:
            _keep_scalar_text(loader, node)
        data = loader.construct_document(node) if node is not None else None
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
    return data


def _read(path: Path) -> _Located:
    file = _display(path)
    data = _read_yaml(path)
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
    located.where = dict.fromkeys(
        located.keys() if isinstance(located, dict) else range(len(located)), (origin, None)
    )
    return located


# -- Layers: extends chain and overrides -----------------------------------------------------


@dataclass(frozen=True)
class Layers:
    """A profile's files merged root first, overrides on top: what the schema validates."""

    data: _Located  # the merged mapping; every key knows its (file, line)
    source: tuple[Path, ...]  # the files read, leaf first
    leaf: str  # the leaf file as errors name it


def read_layers(
    ref: str | Path, profiles_dir: str | Path, overrides: Mapping[str, Any] | None = None
) -> Layers:
    """Read profile `ref` (a name under `profiles_dir`, or a path), resolve its `extends:`
    chain and deep-merge `overrides` (host data) on top. Nothing is validated yet."""
    profiles_dir = Path(profiles_dir).resolve()
    try:
        path = _find(str(ref), Path.cwd(), [profiles_dir])
    except LookupError as exc:
        raise ProfileError(str(exc)) from None
    leaf = _display(path)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", path.stem):
        raise ProfileError(
            "a profile file name is letters, digits and ._- (the name is written into rendered files)",
            file=leaf,
        )
    chain = _chain(path, profiles_dir)
    data = _locate({}, leaf)
    for _, layer in reversed(chain):  # root first, so each child wins over its parent
        data = _merge(data, layer)
    if overrides is not None:
        if not isinstance(overrides, Mapping) or "extends" in overrides:
            raise ProfileError("must be a mapping of profile keys (extends: only in files)", key=OVERRIDES)
        data = _merge(data, _locate(overrides, OVERRIDES))
    return Layers(data, tuple(p for p, _ in chain), leaf)


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
    raise LookupError(f"no profile named {ref!r} in {where}{hint(ref, names)}")


def _chain(path: Path, profiles_dir: Path) -> list[tuple[Path, _Located]]:
    """The profile at `path` and its `extends:` ancestors, leaf first."""
    chain = [(path, _read(path))]
    while "extends" in chain[-1][1]:
        here, data = chain[-1]
        parent = data.pop("extends")
        file, line = data.where.pop("extends")
        if not isinstance(parent, str) or not parent.strip():
            raise ProfileError("must be a profile name or a path", file=file, key="extends", line=line)
        try:
            path = _find(parent, here.parent, [here.parent, profiles_dir])
        except LookupError as exc:
            raise ProfileError(str(exc), file=file, key="extends", line=line) from None
        seen = [p for p, _ in chain]
        if path in seen:
            cycle = " -> ".join(_display(p) for p in seen[seen.index(path) :] + [path])
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
