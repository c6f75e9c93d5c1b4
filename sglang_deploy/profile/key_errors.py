"""A profile's validation errors as `file:line: key: reason`, each located at the line that set
the key (the loader's Layers remember every key's file and line), with the nearest known key
for an unknown one."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, get_args, get_origin

from pydantic import BaseModel, ValidationError

from sglang_deploy.errors import ProfileError

if TYPE_CHECKING:  # the loader imports hint() from here
    from sglang_deploy.profile.loader import Layers


class KeyProblem(ValueError):
    """A whole-profile check that fails because of one key: errors point at that key's line."""

    def __init__(self, loc: tuple, message: str):
        super().__init__(message)
        self.loc = loc


def located_error(exc: ValidationError, layers: Layers, schema: type[BaseModel]) -> ProfileError:
    """`exc` (from validating `layers.data` against `schema`) as one ProfileError, one line per
    problem, each naming the file, line and key path that set the value."""
    errors = [_one_error(err, layers, schema) for err in exc.errors()]
    first = errors[0]
    if len(errors) == 1:
        return first
    more = "".join(f"\n{err}" for err in errors[1:])
    return ProfileError(first.reason + more, file=first.file, key=first.key, line=first.line)


def _one_error(err: Mapping[str, Any], layers: Layers, schema: type[BaseModel]) -> ProfileError:
    loc = tuple(part for part in err["loc"] if part != "[key]")
    kind, value = err["type"], err["input"]
    if kind == "extra_forbidden":
        reason = "unknown key" + hint(loc[-1], _known_keys(schema, loc[:-1]))
    elif kind == "missing":
        reason = "required key is missing"
    elif kind == "value_error":
        reason = str(err["ctx"]["error"])
        loc = getattr(err["ctx"]["error"], "loc", loc)  # a KeyProblem names its key
    elif kind in ("model_type", "dict_type"):
        reason = "must be a mapping"
    elif value is None or isinstance(value, (str, int, float)):
        reason = f"{err['msg']} (got {value!r})"
    else:
        reason = err["msg"]
    file, line = _where(layers.data, loc)
    key = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    return ProfileError(reason, file=file or layers.leaf, key=key or None, line=line)


def _where(data: Any, loc: tuple) -> tuple[str | None, int | None]:
    """(file, line) of the deepest key along `loc` whose location is known."""
    found = (None, None)
    for part in loc:
        where = getattr(data, "where", {})
        if part not in where:
            break
        found = where[part] or found
        data = data[part]
    return found


def _known_keys(schema: type[BaseModel], loc: tuple) -> list[str]:
    """The keys `schema` allows in the mapping at `loc` (at the top, `extends` too)."""
    tp: Any = schema
    for part in loc:
        if isinstance(tp, type) and issubclass(tp, BaseModel) and part in tp.model_fields:
            tp = tp.model_fields[part].annotation
        elif get_origin(tp) is dict:
            tp = get_args(tp)[1]
        else:
            return []
    if not (isinstance(tp, type) and issubclass(tp, BaseModel)):
        return []
    return ["extends", *tp.model_fields] if tp is schema else list(tp.model_fields)


def hint(word: Any, choices: list[str]) -> str:
    """` (did you mean 'x'?)` naming the choice nearest ``word``, else the choices."""
    close = difflib.get_close_matches(str(word), choices, n=1)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return f" (expected one of: {', '.join(choices)})" if choices else ""
