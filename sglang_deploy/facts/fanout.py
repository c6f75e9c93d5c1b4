"""What a fan-out left on a node (node/fanout_access.py leftovers): our authorized_keys lines
and key directories, ``{"lines": n, "key_dirs": n}``; ``None`` before our scripts exist."""

from sglang_deploy.facts.serving import ScriptResult
from sglang_deploy.plan.commands import fanout_access_command


class FanoutLeftovers(ScriptResult):
    script = "fanout_access.py"

    def command(self, scripts_dir, user, run_dir):
        return self._guarded(
            scripts_dir, fanout_access_command(scripts_dir, "leftovers", user, run_dir=run_dir)
        )
