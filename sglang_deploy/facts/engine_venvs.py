"""pyinfra facts about the engine venvs: the interpreter's version (part of a venv's name) and
which venvs the node holds, which one the unit runs through its link, and the last known good's;
whether a venv built from a lock (a router's) still holds exactly its lock."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from sglang_deploy.facts.serving import ScriptResult
from sglang_deploy.node.venvs import MARKER
from sglang_deploy.plan.commands import exact_command, venvs_list_command, venvs_wheelhouses_command

_VERSION_PY = "import platform; print(platform.python_version())"


class PythonVersion(FactBase):
    """The full version of an interpreter on the node (``3.11.2``), or None without it."""

    def command(self, python):
        return f"{shlex.quote(python)} -c {shlex.quote(_VERSION_PY)} 2>/dev/null || true"

    def process(self, output):
        return output[0].strip() if output else None


class EngineVenvs(ScriptResult):
    """``venvs.py list``'s result line: ``{"venvs": [{"name", "built_at"}], "live", "pending",
    "last_good", "in_use": {name: [why]}}`` (``in_use``: what every service of the node runs or
    goes back to, from every last known good beside ``last_good_dir`` and every process); None
    before our scripts are on the node."""

    script = "venvs.py"

    def command(self, scripts_dir, venvs_dir, link, last_good_dir=None):
        return self._guarded(scripts_dir, venvs_list_command(scripts_dir, venvs_dir, link, last_good_dir))


class Wheelhouses(ScriptResult):
    """``venvs.py wheelhouses``'s result line: ``{"wheelhouses": [{"name", "bytes", "venvs",
    "age_s"}]}``, every lock under ``deploy_dir`` with the venvs still built from it; None
    before our scripts are on the node."""

    script = "venvs.py"

    def command(self, scripts_dir, deploy_dir):
        return self._guarded(scripts_dir, venvs_wheelhouses_command(scripts_dir, deploy_dir))


class VenvLock(ScriptResult):
    """exact.py's result line for ``venv`` against ``lock`` on the node (``{"status", "extra",
    "missing", "different", ...}``), run by the venv's interpreter; None when the venv is no
    finished build (venvs.py's marker), or the lock or our scripts are not on the node yet."""

    script = "exact.py"

    def command(self, venv, scripts_dir, lock):
        marker, python = shlex.quote(f"{venv}/{MARKER}"), f"{venv}/bin/python"
        return f"! test -f {marker} || ! test -f {shlex.quote(lock)} || " + self._guarded(
            scripts_dir, exact_command(python, scripts_dir, lock)
        )
