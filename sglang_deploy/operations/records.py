"""Records kept on the controller."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from pyinfra import host, logger
from pyinfra.api import operation

from sglang_deploy.facts.passport import HardwarePassport
from sglang_deploy.facts.serving import EngineManifest
from sglang_deploy.node.lib import gpu_links
from sglang_deploy.report import manifest, passports
from sglang_deploy.verify.passport_compare import summary

if TYPE_CHECKING:
    from sglang_deploy.plan.commands.unit import NodeScripts
    from sglang_deploy.profile.schema import Profile


@operation()
def manifest_recorded(scripts: NodeScripts, profile: Profile):
    """
    Record on the controller what the node's engine holds.

    Each distribution, version and RECORD digest, so two nodes or two dates can be diffed. Writes
    only local files: never a change.

    + scripts: ``NodeScripts`` for this node
    + profile: the host's profile (its pins and the drift-checked distributions are recorded:
      scripts.manifest_names, every locked distribution for a locked engine)

    **Examples:**

    .. code:: python

        sglang.manifest_recorded(
            name="Engine manifest",
            scripts=plan.scripts,
            profile=plan.profile,
        )
    """
    from pyinfra.context import state

    if state.is_executing:  # not while planning a --dry run
        _record_manifest(scripts, profile)
    yield from ()  # writes on the controller only: no command for the node


def _record_manifest(scripts, profile):
    names = scripts.manifest_names
    found = host.get_fact(
        EngineManifest, venv=scripts.venv, scripts_dir=scripts.directory, distributions=names
    )
    if not found:
        host.noop("no engine manifest: the venv or our scripts are missing")
        return
    path = manifest.record(host.name, profile.name, found)
    host.noop(f"engine manifest recorded in {path.relative_to(manifest.REPO_ROOT)}")


@operation()
def passport_recorded(scripts: NodeScripts):
    """
    Collect the node's hardware passport and keep its copy on the controller.

    node/passport.py keeps it on the node only when it changed; the controller's copy is
    reports/passport/<host>.json. Read through a fact: never a change, so a re-run reports none. A
    degraded PCIe link is said here; `make verify` fails on it.

    + scripts: ``NodeScripts`` for this node

    **Examples:**

    .. code:: python

        sglang.passport_recorded(
            name="Hardware passport",
            scripts=plan.scripts,
        )
    """
    from pyinfra.context import state

    if state.is_executing:  # not while planning a --dry run
        _record_passport(scripts)
    yield from ()  # a fact on the node, a file on the controller: no command to count


def _record_passport(scripts):
    found = host.get_fact(HardwarePassport, scripts_dir=scripts.directory, command=scripts.passport())
    if not found or "passport" not in found:
        host.noop("no hardware passport: our scripts are missing, or passport.py printed no result")
        return
    path = passports.record(host.name, found["passport"])
    if found.get("cause"):
        host.log(f"hardware passport not kept on the node: {found['cause']}", logger.warning)
    for line in gpu_links.problems(found["passport"]):
        host.log(f"degraded PCIe link: {line}", logger.warning)
    host.noop(
        f"hardware passport ({summary(found['passport'])}) in {os.path.relpath(path, passports.REPO_ROOT)}"
    )
