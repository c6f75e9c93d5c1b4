"""Monitoring, computed on the controller: what Prometheus scrapes (every serving node's engine,
every router's exporter, a node exporter on every host, Prometheus itself), its configuration
and rule files, the systemd drop-ins that say where Prometheus and the node exporter listen, and
the provisioning of Grafana where a monitoring host has it (a datasource, a dashboard provider,
the dashboards: plan/grafana.py).

Targets come from the whole inventory, never from what answers: a node that is down stays a
target (and shows as down), and a ``--limit`` run still renders the whole fleet. A serving node
whose profile lacks ``enable-metrics`` has no engine target; the plan says so in its warnings.
The settings (``prometheus_*``, ``node_exporter*``, ``grafana_*``) are in sglang_deploy/plan/settings/groups_monitoring.py.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from sglang_deploy.errors import DeployError
from sglang_deploy.plan.commands import prometheus_gate_command, prometheus_targets_command
from sglang_deploy.plan.fleet import address, is_monitoring, is_router, router_host
from sglang_deploy.plan.fleet_hosts import workers
from sglang_deploy.plan.grafana import GrafanaPlan, grafana_plan
from sglang_deploy.plan.hosts import REPO_ROOT
from sglang_deploy.plan.serving_group import profile_of
from sglang_deploy.plan.shared_nodes import node_of
from sglang_deploy.run_state import host_settings

PROMETHEUS_UNIT = "prometheus.service"
NODE_EXPORTER_UNIT = "prometheus-node-exporter.service"
CONFIG_DIR = "/etc/prometheus"
CONFIG_PATH = f"{CONFIG_DIR}/prometheus.yml"
RULES_DIR = f"{CONFIG_DIR}/rules"  # rule_files are relative to the configuration's directory
DROP_IN = "sglang-deploy.conf"  # <unit>.d/<this>: ours beside the package's unit, which stays as shipped
# The jobs, in the configuration's order.
JOBS = ("sglang", "sglang-router", "node", "prometheus")


@dataclass(frozen=True)
class Target:
    """One scrape target: its job, ``host:port`` and the labels every series of it gets."""

    job: str
    address: str
    labels: dict = field(default_factory=dict)

    @property
    def url(self) -> str:
        """The URL Prometheus scrapes (its /api/v1/targets ``scrapeUrl``)."""
        return f"http://{self.address}/metrics"


def host_port(host, port) -> str:
    return f"[{host}]:{int(port)}" if ":" in str(host) else f"{host}:{int(port)}"


def metrics_enabled(profile) -> bool:
    """Whether the profile's server exports /metrics (SGLang's --enable-metrics)."""
    return bool(profile.server_args.get("enable-metrics"))


def scrape_targets(hosts):
    """(targets, warnings) of a fleet's hosts ((name, data) pairs, in inventory order);
    DeployError when two targets share an address and port."""
    engines = {name: (addr, port) for name, addr, port in workers(hosts)}
    targets, warnings, exporters = [], [], {}
    for name, data in hosts:
        settings = host_settings(data, name)
        at = address(settings, name)
        labels = {"host": name}
        if is_router(data):
            labels["role"] = "router"
            router = router_host(name, data)
            port = router.settings.router_prometheus_port
            targets.append(Target("sglang-router", host_port(router.address, port), labels))
        elif is_monitoring(data):
            labels["role"] = "monitoring"
            targets.append(Target("prometheus", host_port(at, settings.prometheus_port), labels))
        else:
            profile = profile_of(data)
            labels.update(role="node", profile=profile.name)
            if settings.serving_group:
                labels["serving_group"] = settings.serving_group
            if name in engines and metrics_enabled(profile):
                targets.append(Target("sglang", host_port(*engines[name]), labels))
            elif name in engines:
                warnings.append(
                    f"{name} serves {profile.name} without enable-metrics: its engine is not scraped "
                    "(set server_args.enable-metrics: true)"
                )
        if settings.node_exporter:
            exporter = host_port(at, settings.node_exporter_port)
            # Hosts of one node (several services: plan/shared_nodes.py) share its one exporter.
            if exporters.get(node_of(name, data)) != exporter:
                exporters[node_of(name, data)] = exporter
                targets.append(Target("node", exporter, labels))
        else:
            warnings.append(f"{name}: node_exporter is false: no node exporter scraped there")
    check_addresses(targets)
    return sorted(targets, key=lambda t: JOBS.index(t.job)), warnings


def check_addresses(targets) -> None:
    seen = {}
    for target in targets:
        what = f"{target.labels['host']}'s {target.job} target"
        if target.address in seen:
            raise DeployError(
                f"{seen[target.address]} and {what} are both {target.address} (hosts that share an "
                "address need ports of their own: node_exporter_port, router_prometheus_port, prometheus_port)"
            )
        seen[target.address] = what


def controller_files(setting, paths, root=REPO_ROOT):
    """({file name: text}, warnings) of the files a setting lists on the controller (relative
    paths: to ``root``); a missing file is a warning, two of one name a DeployError."""
    found, warnings = {}, []
    for given in paths:
        path = Path(given) if Path(given).is_absolute() else Path(root) / given
        if not path.is_file():
            warnings.append(f"{setting}: {given} does not exist: not installed")
            continue
        if path.name in found:
            raise DeployError(f"{setting}: two files are named {path.name}")
        found[path.name] = path.read_text()
    return found, warnings


def rule_files(paths, root=REPO_ROOT):
    """The alert rule files (prometheus_rule_files), as controller_files reads them."""
    return controller_files("prometheus_rule_files", paths, root)


def render_config(targets, scrape_interval_s, rule_names) -> str:
    """prometheus.yml: one static job per kind of target, every target with its labels; the
    rule files by their path under the configuration's directory (so the copy promtool checks
    beside its staged rules is the file installed)."""
    config = {
        "global": {
            "scrape_interval": f"{int(scrape_interval_s)}s",
            "evaluation_interval": f"{int(scrape_interval_s)}s",
        },
        "rule_files": [
            posixpath.join(posixpath.relpath(RULES_DIR, CONFIG_DIR), n) for n in sorted(rule_names)
        ],
        "scrape_configs": [
            {
                "job_name": job,
                "metrics_path": "/metrics",
                "static_configs": [
                    {"targets": [t.address], "labels": dict(t.labels)} for t in targets if t.job == job
                ],
            }
            for job in JOBS
            if any(t.job == job for t in targets)
        ],
    }
    if not config["rule_files"]:
        del config["rule_files"]
    header = (
        f"# Rendered by sglang-deploy from the inventory: {len(targets)} target(s); "
        "changes here are overwritten by the next deploy.\n"
    )
    return header + yaml.safe_dump(config, sort_keys=False, default_flow_style=False)


def drop_in(executable, listen_port, *args) -> str:
    """A drop-in that runs the package's unit with our listen address (its ARGS kept)."""
    argv = " ".join([executable, f"--web.listen-address=:{int(listen_port)}", *args, "$ARGS"])
    return (
        "# Rendered by sglang-deploy: the package's unit, listening where the inventory says.\n"
        f"[Service]\nExecStart=\nExecStart={argv}\n"
    )


def drop_in_path(unit_dir, unit) -> str:
    return f"{unit_dir}/{unit}.d/{DROP_IN}"


@dataclass(frozen=True)
class NodeExporterPlan:
    port: int
    packages: tuple
    drop_in_text: str
    drop_in_path: str
    ready_timeout_s: float

    @property
    def unit(self):
        return NODE_EXPORTER_UNIT

    def gate(self, scripts_dir, timeout=None):
        """The node exporter answers /metrics 200 (``timeout`` 0: asked once)."""
        timeout = self.ready_timeout_s if timeout is None else timeout
        return prometheus_gate_command(
            scripts_dir, f"http://127.0.0.1:{self.port}", "/metrics", self.unit, timeout
        )


def node_exporter_plan(data, name=None) -> NodeExporterPlan:
    settings = host_settings(data, name)
    return NodeExporterPlan(
        port=settings.node_exporter_port,
        packages=tuple(settings.node_exporter_packages),
        drop_in_text=drop_in("/usr/bin/prometheus-node-exporter", settings.node_exporter_port),
        drop_in_path=drop_in_path(settings.unit_dir, NODE_EXPORTER_UNIT),
        ready_timeout_s=float(settings.prometheus_ready_timeout_s),
    )


@dataclass(frozen=True)
class MonitoringPlan:
    name: str
    port: int
    packages: tuple
    targets: tuple
    warnings: tuple
    config_text: str
    rules: dict  # {path on the node: text}
    drop_in_text: str
    drop_in_path: str
    staging_dir: str
    ready_timeout_s: float
    scrape_interval_s: int
    grafana: GrafanaPlan

    @property
    def unit(self):
        return PROMETHEUS_UNIT

    @property
    def local_url(self):
        return f"http://127.0.0.1:{self.port}"

    @property
    def files(self) -> dict:
        """{path on the node: text}: the rule files first, the configuration that names them last."""
        return {**self.rules, CONFIG_PATH: self.config_text}

    def gate(self, scripts_dir, timeout=None, reload=False):
        """Prometheus answers /-/ready 200 (``reload``: after loading its configuration again)."""
        timeout = self.ready_timeout_s if timeout is None else timeout
        return prometheus_gate_command(scripts_dir, self.local_url, "/-/ready", self.unit, timeout, reload)

    def targets_check(self, scripts_dir, settle_s=None):
        """Every target up in Prometheus (one not scraped yet is waited for up to ``settle_s``)."""
        settle_s = 2 * self.scrape_interval_s + 5 if settle_s is None else settle_s
        return prometheus_targets_command(
            scripts_dir, self.local_url, [t.url for t in self.targets], settle_s
        )


def monitoring_plan(name, hosts, root=REPO_ROOT) -> MonitoringPlan:
    """The plan of monitoring host ``name`` over the fleet ``hosts``; DeployError for a bad one."""
    data = dict(hosts)[name]
    settings = host_settings(data, name)
    targets, warnings = scrape_targets(hosts)
    rules, missing = rule_files(settings.prometheus_rule_files, root)
    return MonitoringPlan(
        name=name,
        port=settings.prometheus_port,
        packages=tuple(settings.prometheus_packages),
        targets=tuple(targets),
        warnings=tuple(warnings + missing),
        config_text=render_config(targets, settings.prometheus_scrape_interval_s, rules),
        rules={f"{RULES_DIR}/{file_name}": text for file_name, text in rules.items()},
        drop_in_text=drop_in("/usr/bin/prometheus", settings.prometheus_port, f"--config.file={CONFIG_PATH}"),
        drop_in_path=drop_in_path(settings.unit_dir, PROMETHEUS_UNIT),
        staging_dir=f"{settings.run_dir}/prometheus-staged",
        ready_timeout_s=float(settings.prometheus_ready_timeout_s),
        scrape_interval_s=settings.prometheus_scrape_interval_s,
        grafana=grafana_plan(
            settings,
            f"http://{host_port(address(settings, name), settings.prometheus_port)}",
            controller_files("grafana_dashboard_files", settings.grafana_dashboard_files, root),
        ),
    )


def unmet_pins(pins, installed) -> list:
    """The ``name=version`` pins dpkg does not list at that version (``installed``: pyinfra's
    DebPackages fact, {name: [versions]}), in their order."""
    return [pin for pin in pins if pin.partition("=")[2] not in (installed.get(pin.partition("=")[0]) or ())]
