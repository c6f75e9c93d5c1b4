"""The node's hardware passport as a pyinfra fact: passport.py collect's result line (it keeps
the passport in the deploy's state dir only when it changed, so gathering it changes nothing
the deploy reports)."""

from __future__ import annotations

from sglang_deploy.facts.serving import ScriptResult


class HardwarePassport(ScriptResult):
    """
    ``{"passport": {...}, "path": where the node keeps it, "written": whether it changed,
    "status", "cause"}``; ``None`` before our scripts are on the node. The command is built by
    ``NodeScripts.passport``.
    """

    script = "passport.py"

    def command(self, scripts_dir, command):
        return self._guarded(scripts_dir, command)
