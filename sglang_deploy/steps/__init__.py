"""The named steps of the recipes (sglang_deploy/recipes.py): each one idea, a few operations.

A step takes the host's plan (plan/host_plan.py: everything computed on the controller from host
data and profile) and returns the operations whose changes later steps react to. Steps run in
the order a recipe calls them; pyinfra orders every host's operations by where they are called,
so the recipes' order is the run's order on every host.

By job: a serving node's (node.py), its engine venv's (venvs.py), a router's and the fleet's
order (router.py), monitoring's (monitoring.py).
"""

from sglang_deploy.steps.monitoring import (
    grafana,
    monitoring_planned,
    monitoring_prerequisites,
    node_exporter,
    prometheus,
)
from sglang_deploy.steps.node import (
    deploy_lock,
    gpu_node_settings,
    hardware_passport,
    metrics_textfile,
    models_staged,
    node_scripts,
    node_units,
    operating_system,
    preflight,
    profile_checked,
    restarted_if_changed,
    server_files,
    serving,
)
from sglang_deploy.steps.router import (
    every_node_served,
    rollout_lock,
    router_planned,
    router_prerequisites,
    router_service,
)
from sglang_deploy.steps.venvs import (
    engine,
    engine_manifest,
    fanout_cleanup,
    lock_python_checked,
    locked_wheels_and_uv,
    old_venvs_pruned,
)

__all__ = [
    "deploy_lock",
    "engine",
    "engine_manifest",
    "every_node_served",
    "fanout_cleanup",
    "gpu_node_settings",
    "grafana",
    "hardware_passport",
    "lock_python_checked",
    "locked_wheels_and_uv",
    "metrics_textfile",
    "models_staged",
    "monitoring_planned",
    "monitoring_prerequisites",
    "node_exporter",
    "node_scripts",
    "node_units",
    "old_venvs_pruned",
    "operating_system",
    "preflight",
    "profile_checked",
    "prometheus",
    "restarted_if_changed",
    "rollout_lock",
    "router_planned",
    "router_prerequisites",
    "router_service",
    "server_files",
    "serving",
]
