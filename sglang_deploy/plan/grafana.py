"""Grafana, where a monitoring host has it (plan/monitoring.py's MonitoringPlan.grafana): the
deploy provisions it, never installs it (Grafana is not in Debian's archive): a datasource (the
monitoring host's Prometheus), a dashboard provider, and the dashboards bound to that datasource.
The settings (``grafana_*``) are in sglang_deploy/plan/settings/groups_monitoring.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import yaml

from sglang_deploy.errors import DeployError

GRAFANA_UNIT = "grafana-server.service"  # Grafana's own package's unit
GRAFANA_DATASOURCE_UID = "sglang-deploy-prometheus"
GRAFANA_FILE = "sglang-deploy.yaml"  # ours, under <provisioning>/datasources/ and dashboards/
GRAFANA_RESCAN_S = 30  # how often the provider reads the dashboards again: no restart for them


def render_datasource(prometheus_url) -> str:
    """Grafana's datasource provisioning: the monitoring host's Prometheus, under a uid of ours
    the dashboards are bound to; not the default (another provisioned default would stop Grafana
    from starting)."""
    datasource = {
        "name": "sglang-deploy Prometheus",
        "uid": GRAFANA_DATASOURCE_UID,
        "type": "prometheus",
        "access": "proxy",
        "url": prometheus_url,
        "editable": False,
    }
    header = (
        "# Rendered by sglang-deploy: the monitoring host's Prometheus; overwritten by the next deploy.\n"
    )
    return header + yaml.safe_dump({"apiVersion": 1, "datasources": [datasource]}, sort_keys=False)


def render_provider(dashboards_dir) -> str:
    """Grafana's dashboard provisioning: the JSON files under ``dashboards_dir``, in a folder of
    their own, read again every GRAFANA_RESCAN_S seconds, not editable in the UI (the next
    deploy would overwrite an edit)."""
    provider = {
        "name": "sglang-deploy",
        "orgId": 1,
        "folder": "sglang-deploy",
        "type": "file",
        "disableDeletion": False,
        "allowUiUpdates": False,
        "updateIntervalSeconds": GRAFANA_RESCAN_S,
        "options": {"path": dashboards_dir},
    }
    header = f"# Rendered by sglang-deploy: the dashboards under {dashboards_dir}; overwritten by the next deploy.\n"
    return header + yaml.safe_dump({"apiVersion": 1, "providers": [provider]}, sort_keys=False)


def bound_to_datasource(node, uid):
    """A dashboard's JSON with each Prometheus datasource reference that names no template
    variable pointing at ``uid``: an exported dashboard names the datasource of the Grafana it
    was exported from (SGLang's: one of theirs), which no other Grafana has."""
    if isinstance(node, list):
        return [bound_to_datasource(value, uid) for value in node]
    if not isinstance(node, dict):
        return node
    bound = {}
    for key, value in node.items():
        if (
            key == "datasource"
            and isinstance(value, dict)
            and value.get("type") == "prometheus"
            and not str(value.get("uid", "")).startswith("$")
        ):
            value = {"type": "prometheus", "uid": uid}
        bound[key] = bound_to_datasource(value, uid)
    return bound


def render_dashboard(file_name, text, uid=GRAFANA_DATASOURCE_UID) -> str:
    """The dashboard as provisioned: bound to our datasource, and where that changed it, saying
    so in its description (the file it came from is not ours to change: SGLang's is Apache-2.0,
    whose changed copies say they were changed). DeployError for a file that is no dashboard."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise DeployError(f"grafana_dashboard_files: {file_name} is not JSON: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("panels"), list):
        raise DeployError(f"grafana_dashboard_files: {file_name} is not a Grafana dashboard (no panels)")
    bound = bound_to_datasource(doc, uid)
    if bound != doc:
        note = f"Provisioned by sglang-deploy from {file_name}, its Prometheus queries bound to datasource {uid}."
        bound["description"] = f"{doc['description']} ({note})" if doc.get("description") else note
    return json.dumps(bound, indent=2, ensure_ascii=False) + "\n"


@dataclass(frozen=True)
class GrafanaPlan:
    provisioning_dir: str
    datasource_text: str
    provider_text: str
    dashboards: dict  # {path on the node: text}
    warnings: tuple  # said only where Grafana is

    @property
    def unit(self):
        return GRAFANA_UNIT

    @property
    def datasource_path(self):
        return f"{self.provisioning_dir}/datasources/{GRAFANA_FILE}"

    @property
    def provider_path(self):
        return f"{self.provisioning_dir}/dashboards/{GRAFANA_FILE}"

    @property
    def read_at_start(self) -> tuple:
        """The files Grafana reads only when it starts (the dashboards: every GRAFANA_RESCAN_S)."""
        return (self.datasource_path, self.provider_path)

    @property
    def files(self) -> dict:
        """{path on the node: text}: the dashboards first, the provider that reads them last."""
        return {
            **self.dashboards,
            self.datasource_path: self.datasource_text,
            self.provider_path: self.provider_text,
        }


def grafana_plan(settings, prometheus_url, dashboard_files) -> GrafanaPlan:
    """What a monitoring host's Grafana is given; ``dashboard_files``: ({file name: text},
    warnings) of grafana_dashboard_files, as monitoring.controller_files reads them. DeployError
    for a dashboard that is none."""
    found, missing = dashboard_files
    return GrafanaPlan(
        provisioning_dir=settings.grafana_provisioning_dir,
        datasource_text=render_datasource(prometheus_url),
        provider_text=render_provider(settings.grafana_dashboards_dir),
        dashboards={
            f"{settings.grafana_dashboards_dir}/{name}": render_dashboard(name, text)
            for name, text in found.items()
        },
        warnings=tuple(missing),
    )
