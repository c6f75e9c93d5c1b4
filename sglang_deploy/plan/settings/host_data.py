"""Reading host data: the settings of a host (every layer of pyinfra's host data checked, each
error naming where it was set), a mapping's, a setting's default."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from functools import cache
from typing import Any

from pydantic import ValidationError

from sglang_deploy.errors import DeployError
from sglang_deploy.plan.settings.groups_fleet import Connection
from sglang_deploy.plan.settings.model import FIELDS, Settings


def default(key: str) -> Any:
    """The default of setting ``key`` (where an operation needs one without host data)."""
    return Settings.model_fields[key].get_default(call_default_factory=True)


def group_defaults() -> dict[str, Any]:
    """What group_data/all.py gives pyinfra: every setting's default but pyinfra's own keys
    (Connection: pyinfra keeps its defaults for those)."""
    return {key: default(key) for key in FIELDS if key not in Connection.model_fields}


@cache
def pyinfra_keys() -> frozenset:
    """Host data keys pyinfra itself reads: its connectors' (ssh_*, docker_*, ...). Keys
    starting with ``_`` are its operation arguments (``_sudo``, ...) and are legal too."""
    from pyinfra.api.connectors import get_all_connectors

    return frozenset(key for connector in get_all_connectors().values() for key in connector.data_meta or {})


def check_keys(data: Mapping[str, Any], where: str, known: tuple | None = None, path: str = "") -> None:
    """DeployError naming the first key of ``data`` that is no setting (of ``known``; default:
    every setting) nor pyinfra's, where it was set, and the nearest known key. ``path``: the
    key path down to ``data`` in a file (``hosts.gpu1.``), written before the key."""
    choices = FIELDS if known is None else known
    legal = set(choices) if known is not None else set(FIELDS) | pyinfra_keys()
    for key in data:
        if isinstance(key, str) and (key in legal or (known is None and key.startswith("_"))):
            continue
        close = difflib.get_close_matches(str(key), sorted(legal), n=1)
        hint = f"did you mean {close[0]!r}?" if close else "the settings: docs/settings.md"
        raise DeployError(f"{where}: {path}{key}: unknown key ({hint})")


def validate(data: Mapping[str, Any], where: str = "host data", path: str = "") -> Settings:
    """The settings ``data`` (one mapping) sets, every other at its default; DeployError for
    an unknown key or a bad value, naming it and ``where`` (``path``: as for check_keys)."""
    return _validated([(where, data)], path)


def settings_of(data, who: str | None = None) -> Settings:
    """The settings of a host whose data is ``data``: pyinfra's host data (each of its layers
    checked: --data, the inventory's entry, group data, group_data/all.py) or a plain mapping
    ((name, data) pairs of plan/hosts.py and the tests; ``who`` names it in errors)."""
    if isinstance(data, Settings):
        return data
    if isinstance(data, Mapping):
        return _validated([(who or "host data", data)])
    return _validated(_pyinfra_layers(data))


def _pyinfra_layers(data) -> list[tuple[str, Mapping]]:
    """pyinfra's host data as (where, mapping), first the one that wins (pyinfra's order)."""
    host = data.host
    inventory = host.inventory
    layers = [
        (f"data host {host.name} was given during the deploy", data.override_datas),
        ("--data", inventory.get_override_data()),
        (f"host {host.name} in the inventory", inventory.get_host_data(host.name)),
    ]
    layers += [
        (f"group {group}'s data (group_data/{group}.py or the inventory)", inventory.get_group_data(group))
        for group in reversed(host.groups)  # the last group's value wins, as in pyinfra
    ]
    layers += [
        ("group all's data (group_data/all.py)", inventory.get_data()),
        ("a @deploy's data defaults", host.get_deploy_data()),
    ]
    return layers


def _validated(layers: list[tuple[str, Mapping]], path: str = "") -> Settings:
    for where, layer in layers:
        check_keys(layer, where, path=path)
    merged: dict[str, Any] = {}
    for _, layer in reversed(layers):
        merged.update((key, value) for key, value in layer.items() if key in Settings.model_fields)
    try:
        return Settings.model_validate(merged)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = err["loc"][0]
        where = next(where for where, layer in layers if key in layer)
        raise DeployError(f"{where}: {path}{key}: {reason(err)}") from None


def reason(err: Mapping[str, Any]) -> str:
    """One pydantic error as the operator reads it (the value it got, where it is plain)."""
    if err["type"] == "value_error":
        return str(err["ctx"]["error"])
    value = err["input"]
    if value is None or isinstance(value, (str, int, float)):
        return f"{err['msg']} (got {value!r})"
    return err["msg"]
