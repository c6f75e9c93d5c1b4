"""What a monitoring host (or any host's node exporter) says of itself, as pyinfra facts."""

from sglang_deploy.facts.serving import ScriptResult


class PrometheusGate(ScriptResult):
    """
    prometheus_gate.py's result line, asked once (``--timeout 0``): ``{"status", "cause",
    "code", "active"}``. The command is built by plan/monitoring.py (``gate``).
    """

    def command(self, command):
        return f"{command} || true"
