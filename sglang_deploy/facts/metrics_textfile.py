"""Whether the node exporter's textfile of the deploy's figures would change: metrics_textfile.py
--check's result line (it writes nothing)."""

from __future__ import annotations

from sglang_deploy.facts.serving import ScriptResult


class MetricsTextfileCheck(ScriptResult):
    """
    ``{"path", "samples", "changed": whether the file's figures differ, "status", "cause"}``;
    ``None`` before our scripts are on the node. The command is built by
    ``NodeScripts.metrics_textfile(check=True)``.
    """

    script = "metrics_textfile.py"

    def command(self, scripts_dir, command):
        return self._guarded(scripts_dir, command)
