"""The deploy's figures in the node exporter's textfile directory (node/metrics_textfile.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyinfra import host, logger
from pyinfra.api import operation

from sglang_deploy.facts.metrics_textfile import MetricsTextfileCheck
from sglang_deploy.node.lib import status

if TYPE_CHECKING:
    from sglang_deploy.plan.commands.unit import NodeScripts


@operation()
def metrics_textfile_written(scripts: NodeScripts, routers: bool = True):
    """
    Write the node's textfile of the deploy's figures when a figure in it changed.

    The figures: the latest decode check, the last known good's figure, the profile's expectations,
    the passport's GPU links; a re-run with nothing changed reports no change. The node's own
    samples (rotation, drift) are in files of their own, which this never compares or writes; behind
    no router a rotation file left from routers is removed. A check that cannot run is said as a
    warning, never a failure: the node serves already.

    + scripts: ``NodeScripts`` for this node
    + routers: whether the inventory names any router

    **Examples:**

    .. code:: python

        sglang.metrics_textfile_written(
            name="Metrics textfile",
            scripts=plan.scripts,
            routers=bool(plan.rotation.router_urls),
        )
    """
    found = host.get_fact(
        MetricsTextfileCheck,
        scripts_dir=scripts.directory,
        command=scripts.metrics_textfile(routers=routers, check=True),
    )
    if found is not None and found.get("status") != status.READY:
        host.log(f"metrics textfile not written: {found.get('cause')}", logger.warning)
        host.noop("metrics textfile not written")
        return
    if found is not None and not found.get("changed"):
        host.noop(f"{found.get('path')} is up to date")
        return
    yield scripts.metrics_textfile(routers=routers)
