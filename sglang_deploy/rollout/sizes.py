"""How many nodes a rolling setting means: a count (``2``) or a percentage of the run's serving
nodes (``"25%"``), resolved against the fleet of the run once its nodes are known.

A percentage rounds down (25% of 6 nodes is 1 node), never up: a batch is a promise about how
much capacity may leave at once. A percentage that rounds down to no node is refused, never
clamped to one, naming the setting, the value, the fleet and the least percentage that works:
an operator who wrote 10% for a fleet of 4 meant something the fleet cannot give.
"""

from __future__ import annotations

import math
import re
from typing import Any

from sglang_deploy.errors import DeployError

_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")
_COUNT = re.compile(r"^\s*\d+\s*$")


def count_or_percent(value: Any, minimum: int = 1) -> int | str:
    """A setting's value as a count (int, at least ``minimum``) or a percentage string
    (``"25%"``, above 0 and at most 100); ValueError saying what was expected."""
    if isinstance(value, bool):
        raise ValueError(f"a count or a percentage such as '25%', got {value!r}")
    if isinstance(value, int) or (isinstance(value, str) and _COUNT.match(value)):
        count = int(value)
        if count < minimum:
            raise ValueError(f"a count of at least {minimum} or a percentage such as '25%', got {value!r}")
        return count
    match = _PERCENT.match(value) if isinstance(value, str) else None
    if not match:
        raise ValueError(f"a count (e.g. 2) or a percentage of the run's nodes (e.g. '25%'), got {value!r}")
    percent = float(match[1])
    if not 0 < percent <= 100:
        raise ValueError(f"a percentage above 0% and at most 100%, got {value!r}")
    return f"{match[1]}%"


def percent_of(value) -> float | None:
    """The percentage of a value count_or_percent returned; None for a count."""
    return float(value[:-1]) if isinstance(value, str) else None


def nodes(setting: str, value, fleet: int, noun: str = "nodes") -> int:
    """How many of ``fleet`` nodes ``value`` (count_or_percent's) means: a count as it is, a
    percentage rounded down. DeployError for a percentage that rounds to no node of a fleet
    that has some."""
    percent = percent_of(value)
    if percent is None:
        return int(value)
    found = math.floor(percent * fleet / 100 + 1e-9)
    if found == 0 and fleet > 0:
        least = math.ceil(100 / fleet)
        raise DeployError(
            f"{setting}: {value} of {fleet} {noun} is 0 {noun}; use at least {least}% or a count"
        )
    return found


def batch_size(value, fleet: int, noun: str = "nodes") -> int:
    """``rolling_batch`` for a run of ``fleet`` serving nodes (or serving groups): at least 1."""
    return max(1, nodes("rolling_batch", value, fleet, noun))


def canary_count(value, serving: int) -> int:
    """``rolling_canary`` for a run of ``serving`` serving nodes: 0 when off. DeployError when
    the canaries would be the whole fleet (no node left on the old configuration to compare
    them with) or a percentage rounds to none."""
    if value in (0, None):
        return 0
    count = nodes("rolling_canary", value, serving)
    if count >= serving:
        raise DeployError(
            f"rolling_canary: {value} is {count} canar{'y' if count == 1 else 'ies'} of {serving} "
            f"serving node{'' if serving == 1 else 's'}: none would be left on the old configuration "
            "to compare them with (a canary needs at least one node that does not restart in its wave)"
        )
    return count


def too_many_failures(failed: int, run_nodes: int, max_failures: int, max_fail_percent=None) -> bool:
    """Whether ``failed`` nodes of a run of ``run_nodes`` stop the rollout: more than
    ``max_fail_percent`` percent of the run's nodes when it is set, else more than
    ``max_failures`` nodes."""
    if max_fail_percent is None:
        return failed > max_failures
    return failed * 100 > max_fail_percent * max(run_nodes, 1)
