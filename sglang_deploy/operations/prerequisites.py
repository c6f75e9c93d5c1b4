"""What the recipe needs from the OS: Debian or Ubuntu, with its packages installed by apt."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyinfra import host
from pyinfra.api import FunctionCommand, operation
from pyinfra.facts.deb import DebPackages
from pyinfra.operations import apt

from sglang_deploy.facts.os_release import OsRelease, missing_packages, unsupported_os
from sglang_deploy.operations.service import fail_with

if TYPE_CHECKING:
    from collections.abc import Sequence


@operation()
def os_prerequisites(packages: Sequence[str]):
    """
    Debian or Ubuntu, with the packages the recipe needs.

    Stop a node whose OS is not Debian or Ubuntu (``unsupported OS: <name>``) before anything
    on it changes; install the ``packages`` dpkg does not list. The package index is refreshed
    only when one is missing, so a re-run makes no apt call at all.

    + packages: Debian package names the recipe needs on the node

    **Examples:**

    .. code:: python

        prerequisites.os_prerequisites(
            name="OS prerequisites",
            packages=list(plan.settings.os_packages),
        )
    """
    name = unsupported_os(host.get_fact(OsRelease))
    if name is not None:
        yield FunctionCommand(
            fail_with, (f"unsupported OS: {name} (Debian or Ubuntu needed; nothing was changed)",), {}
        )
        return
    missing = missing_packages(packages, host.get_fact(DebPackages))
    if not missing:
        host.noop(f"installed: {', '.join(packages)}")
        return
    # A fresh install may have no package lists at all: refresh them, then install.
    yield from apt.update._inner()
    yield from apt.packages._inner(packages=missing, no_recommends=True)
