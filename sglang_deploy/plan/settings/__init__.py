"""Deploy and host settings: the schema of pyinfra's host data, and `settings_of`.

This is the one place for their defaults: a setting no host data gives gets the default written
next to its field in the groups_*.py modules (group_data/all.py hands them to pyinfra as group
`all`'s data). Any of them can be set for a host (its inventory entry: inventory/hosts.yml, the
sandbox inventory), for a group (group_data/<group>.py) or for a run (`pyinfra ... --data
rollback=false`). A key that is neither a setting nor pyinfra's own stops the deploy before any
host is touched, naming the key, where it was set and the nearest setting. What the server runs is
not here: that is the profile's (sglang_deploy/profile/schema.py). docs/settings.md lists every
setting (`make docs`).
"""

from sglang_deploy.plan.settings.groups_fleet import Connection, Fleet, Router, RouterPins
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
from sglang_deploy.plan.settings.host_data import (
    check_keys,
    default,
    group_defaults,
    pyinfra_keys,
    reason,
    settings_of,
    validate,
)
from sglang_deploy.plan.settings.model import FIELDS, FLEET_KEYS, GROUPS, Settings
from sglang_deploy.plan.settings.values import (
    APT_PIN,
    AptPin,
    Group,
    NodeCount,
    NodeCountOrOff,
    Port,
    Seconds,
    Words,
)

__all__ = [
    "APT_PIN",
    "FIELDS",
    "FLEET_KEYS",
    "GROUPS",
    "AptPin",
    "Canary",
    "Connection",
    "Deploys",
    "EngineVenvs",
    "Fanout",
    "Fleet",
    "Group",
    "ModelStaging",
    "Monitoring",
    "NodeCount",
    "NodeCountOrOff",
    "NodePaths",
    "Port",
    "RollingRestarts",
    "Router",
    "RouterPins",
    "Seconds",
    "ServingGroups",
    "Settings",
    "TheOs",
    "WhatToServe",
    "Words",
    "check_keys",
    "default",
    "group_defaults",
    "pyinfra_keys",
    "reason",
    "settings_of",
    "validate",
]
