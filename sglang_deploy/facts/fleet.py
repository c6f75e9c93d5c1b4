"""pyinfra facts about a fleet's hosts that our on-node scripts read: whether the router passes
its gate now, whether a serving group's follower reaches rank 0's dist-init port. Each is the
script's result line (node/lib/result.py), or None when it printed none."""

from __future__ import annotations

from sglang_deploy.facts.serving import ScriptResult


class RouterGate(ScriptResult):
    """
    router_gate.py's result line, asked once (``--timeout 0``): ``{"status", "cause",
    "workers", "readiness"}``. The command is built by ``RouterPlan.gate``.
    """

    def command(self, command):
        return f"{command} || true"


class DistInitReach(ScriptResult):
    """
    dist_reach.py's result line from a serving group's follower: ``{"status", "cause", ...}``,
    status 0 when it reached rank 0's ``--dist-init-addr``. The command is built by
    operations/group.py.
    """

    def command(self, command):
        return f"{command} || true"
