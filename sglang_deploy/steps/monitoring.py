"""Monitoring: the node exporter on every host; Prometheus and Grafana on a monitoring host."""

from pyinfra import host, inventory, logger
from pyinfra.operations.util import any_changed

from sglang_deploy import operations as sglang
from sglang_deploy import run_state
from sglang_deploy.cli import exit_on_deploy_error
from sglang_deploy.operations import monitoring as monitoring_ops
from sglang_deploy.operations.prerequisites import os_prerequisites
from sglang_deploy.plan.fleet_hosts import fleet_hosts
from sglang_deploy.plan.host_plan import node_script_files
from sglang_deploy.plan.monitoring import CONFIG_PATH, monitoring_plan, node_exporter_plan


def node_exporter():
    """Prometheus' node exporter, the distribution's pinned package, on node_exporter_port (a
    drop-in written before the package installs, so it starts there); restarted only when
    either changed, then its gate (/metrics 200). Nothing with `node_exporter: false`."""
    settings = run_state.host_settings(host)
    if not settings.node_exporter:
        return
    exporter = node_exporter_plan(settings)
    scripts_dir = f"{settings.sglang_deploy_dir}/node"
    unit = monitoring_ops.drop_in(
        name="Node exporter drop-in (listen port)", path=exporter.drop_in_path, content=exporter.drop_in_text
    )
    package = monitoring_ops.pinned_packages(name="Node exporter package", packages=list(exporter.packages))
    monitoring_ops.restarted(
        name="Node exporter restart (package or drop-in changed)",
        unit=exporter.unit,
        gate=exporter.gate(scripts_dir),
        _if=any_changed(unit, package),
    )
    monitoring_ops.serving(
        name="Node exporter serving",
        unit=exporter.unit,
        gate=exporter.gate(scripts_dir),
        gate_once=exporter.gate(scripts_dir, timeout=0),
    )


def monitoring_planned():
    """What Prometheus scrapes, from the whole inventory (a bad fleet stops the run before any
    host is touched); a serving node whose engine is not scraped is said here."""
    with exit_on_deploy_error(host.name):
        plan = monitoring_plan(host.name, fleet_hosts(inventory))
    for line in plan.warnings:
        host.log(f"monitoring: {line}", logger.warning)
    return plan


def monitoring_prerequisites():
    """The OS packages and our on-node scripts (Prometheus' gate and target check)."""
    settings = run_state.host_settings(host)
    os_prerequisites(name="OS prerequisites", packages=list(settings.os_packages))
    sglang.node_scripts(
        name="On-node scripts (monitoring)", files=node_script_files(settings.sglang_deploy_dir)
    )


def prometheus(plan):
    """Prometheus, the distribution's pinned package, listening on prometheus_port; its
    configuration and rules from the inventory, installed only once promtool accepted them
    (one that does not parse stops here: the running Prometheus keeps its own). A restart when
    the package or its drop-in changed, a reload when only the configuration did, each gated
    (/-/ready 200, the new configuration loaded); nothing when nothing changed."""
    scripts_dir = f"{run_state.host_settings(host).sglang_deploy_dir}/node"
    unit = monitoring_ops.drop_in(
        name="Prometheus drop-in (listen port, configuration)",
        path=plan.drop_in_path,
        content=plan.drop_in_text,
    )
    package = monitoring_ops.pinned_packages(name="Prometheus package", packages=list(plan.packages))
    config = monitoring_ops.checked_configuration(
        name="Prometheus configuration and rules (promtool check config)",
        files=plan.files,
        config_path=CONFIG_PATH,
        staging_dir=plan.staging_dir,
    )
    restart = any_changed(unit, package)
    monitoring_ops.restarted(
        name="Prometheus restart (package or drop-in changed)",
        unit=plan.unit,
        gate=plan.gate(scripts_dir),
        _if=restart,
    )
    monitoring_ops.reloaded(
        name="Prometheus reload (configuration changed)",
        unit=plan.unit,
        gate=plan.gate(scripts_dir, reload=True),
        _if=lambda: config.did_change() and not restart(),
    )
    monitoring_ops.serving(
        name="Prometheus serving",
        unit=plan.unit,
        gate=plan.gate(scripts_dir),
        gate_once=plan.gate(scripts_dir, timeout=0),
    )


def grafana(plan):
    """Grafana's provisioning where the monitoring host has Grafana (not in Debian's archive: the
    deploy never installs it): our Prometheus as a datasource, a dashboard provider and the
    dashboards (ours, SGLang's), each written only when it changed; Grafana restarted only when
    its datasource or provider did. Where Grafana is not there, the step says so, and nothing
    fails."""
    monitoring_ops.grafana_provisioned(
        name="Grafana provisioning (datasource, dashboards)",
        provisioning_dir=plan.provisioning_dir,
        files=plan.files,
        read_at_start=list(plan.read_at_start),
        unit=plan.unit,
        warnings=list(plan.warnings),
    )
