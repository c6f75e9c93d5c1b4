"""The fleet's order across kinds of host.

pyinfra (3.x) orders a run's operations as a graph: each host's operations in the order its
deploy code called them, and operations of different hosts side by side, level by level. A
router's restart therefore ran beside the nodes' first steps, before any node served: on a
fresh fleet its gate waited for workers that had not started yet. An operation called from
one place on every host is one node of that graph: every host's earlier operations come
before it, every host's later ones after it.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import operation


@operation()
def fleet_barrier(what: str):
    """
    Nothing to run: every host's operations called before it end before any called after it.

    + what: what comes before it, for the run's output

    **Examples:**

    .. code:: python

        fleet_order.fleet_barrier(
            name="Every node's steps",
            what="the nodes' steps",
        )
    """
    host.noop(f"{what}: done on every host")
    return
    yield  # a generator, as every operation
