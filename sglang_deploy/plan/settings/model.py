"""Settings: every group in one flat model (host data is flat), each group also a view of it;
the setting names."""

from __future__ import annotations

from functools import cached_property

from pydantic import ConfigDict

from sglang_deploy.plan.settings.groups_fleet import Connection, Fleet, Router
from sglang_deploy.plan.settings.groups_monitoring import Monitoring
from sglang_deploy.plan.settings.groups_node import (
    Deploys,
    EngineVenvs,
    Fanout,
    ModelStaging,
    NodePaths,
    ServingGroups,
    TheOs,
    WhatToServe,
)
from sglang_deploy.plan.settings.groups_rollout import Canary, RollingRestarts

# In docs/settings.md's order.
GROUPS = (
    WhatToServe,
    ServingGroups,
    NodePaths,
    TheOs,
    ModelStaging,
    Deploys,
    EngineVenvs,
    Connection,
    Fleet,
    Router,
    RollingRestarts,
    Canary,
    Monitoring,
    Fanout,
)


def _view(group):
    """A settings group read from the whole, as that group's model (its fields, their values)."""

    def read(self):
        return group.model_construct(**{name: getattr(self, name) for name in group.model_fields})

    read.__doc__ = group.__doc__
    return cached_property(read)


class Settings(*reversed(GROUPS)):
    """Every setting of one host (host data is flat: group_data/all.py, the inventory, --data).
    Each group is also a view of its own (``settings.router.router_port``), for code that takes
    one group: pass the view, never a hand copy of its fields."""

    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True, frozen=True)

    serve = _view(WhatToServe)
    groups = _view(ServingGroups)
    paths = _view(NodePaths)
    os = _view(TheOs)
    staging = _view(ModelStaging)
    deploys = _view(Deploys)
    venvs = _view(EngineVenvs)
    connection = _view(Connection)
    fleet = _view(Fleet)
    router = _view(Router)
    rolling = _view(RollingRestarts)
    canary = _view(Canary)
    monitoring = _view(Monitoring)
    fan_out = _view(Fanout)


FIELDS = tuple(Settings.model_fields)
# The keys a hosts file's `fleet:` section may set: settings of the whole fleet.
FLEET_KEYS = tuple(name for group in (Router, RollingRestarts, Canary) for name in group.model_fields)
