"""The settings of monitoring: the node exporter, Prometheus, Grafana."""

from __future__ import annotations

from pydantic import Field

from sglang_deploy.plan.settings.values import AptPin, Group, Port, Seconds
from sglang_deploy.profile.fields import AbsPath


class Monitoring(Group):
    """Monitoring: Prometheus over the fleet, a node exporter on every host, Grafana's dashboards where it runs (sglang_deploy/plan/monitoring.py)"""

    node_exporter: bool = Field(
        True,
        description="Install and run Prometheus' node exporter (node_exporter_packages) on this host, after its "
        "other steps; the monitoring host scrapes it.",
    )
    node_exporter_packages: list[AptPin] = Field(
        ["prometheus-node-exporter=1.5.0-1+b6"],
        description="The node exporter's distribution package, pinned (`name=version`, Debian bookworm's).",
    )
    node_exporter_port: Port = Field(9100, description="The port the node exporter listens on.")
    prometheus_packages: list[AptPin] = Field(
        ["prometheus=2.42.0+ds-5+deb12u1"],
        description="Prometheus' distribution package on monitoring hosts, pinned (`name=version`, Debian "
        "bookworm's; its promtool checks every configuration before it is installed).",
    )
    prometheus_port: Port = Field(9090, description="The port Prometheus listens on (monitoring hosts).")
    prometheus_scrape_interval_s: int = Field(
        15, ge=1, description="Seconds between two scrapes of a target (and between two rule evaluations)."
    )
    prometheus_rule_files: list[str] = Field(
        ["templates/prometheus/sglang-alerts.rules.yml"],
        description="Alert rule files on the controller (relative: to the repository), installed under "
        "/etc/prometheus/rules/; one that does not exist is skipped, said in the run's output.",
    )
    prometheus_ready_timeout_s: Seconds = Field(
        60,
        description="After a restart or reload, how long Prometheus may take to answer /-/ready 200 (and to "
        "report the new configuration loaded); the node exporter gets as long to answer /metrics.",
    )
    grafana_provisioning_dir: AbsPath = Field(
        "/etc/grafana/provisioning",
        description="Where a monitoring host's Grafana reads its provisioning (Grafana's own package's "
        "default). Grafana is not in Debian's archive and the deploy never installs it: where this directory "
        "exists, it gets our Prometheus datasource and a dashboard provider (Grafana restarted if that changed "
        "and it runs); where it does not, the step says Grafana is not there and changes nothing.",
    )
    grafana_dashboards_dir: AbsPath = Field(
        "/var/lib/grafana/dashboards/sglang-deploy",
        description="Where the dashboards (grafana_dashboard_files) go on a monitoring host with Grafana; "
        "the provider reads them from there.",
    )
    grafana_dashboard_files: list[str] = Field(
        ["templates/grafana/sglang-deploy.json", "build/grafana/sglang-dashboard.json"],
        description="Grafana dashboards on the controller (relative: to the repository): ours, and SGLang's "
        "published one (`make grafana-dashboards` downloads it); each one's Prometheus queries are bound to "
        "our datasource. One that does not exist is skipped, said in the run's output where Grafana is.",
    )
