"""The recipes, one per kind of host, as pyinfra deploys another repository can import:

    from sglang_deploy.recipes import serving_node
    serving_node()                 # or serving_node(_sudo=True): pyinfra's global arguments apply

Each is a list of named steps (sglang_deploy/steps/). The fleet's order comes from deploy.py:
a router takes the rollout lock before any node restarts, and restarts its own service after
every node's steps; a monitoring host runs its recipe last.
"""

from pyinfra.api import deploy

from sglang_deploy import steps


@deploy("Serving node")
def serving_node():
    """A node that serves a profile, alone or as a member of a serving group."""
    plan = steps.profile_checked()
    steps.operating_system(plan)
    steps.deploy_lock(plan)
    steps.node_scripts(plan)
    steps.gpu_node_settings(plan)
    models = steps.models_staged(plan)
    steps.preflight(plan)
    steps.hardware_passport(plan)
    engine = steps.engine(plan)
    server_files = steps.server_files(plan)
    steps.restarted_if_changed(plan, [engine, *server_files, *models])
    steps.serving(plan)
    steps.metrics_textfile(plan)
    steps.old_venvs_pruned(plan)
    steps.engine_manifest(plan)
    steps.node_exporter()  # last: it never stands between a node and serving


def every_node_served():
    """Every host: the place in deploy.py after which the routers and the monitoring host go on,
    once every node's steps ended."""
    steps.every_node_served()


@deploy("Router, before the nodes")
def router_rollout_lock():
    """A router's first half: the fleet's rollout lock and what its service needs."""
    steps.router_planned()  # a bad fleet stops the run before the lock is taken
    steps.rollout_lock()
    steps.router_prerequisites()


@deploy("Router")
def router():
    """A router's second half, after every node's steps: SGLang's router in front of them."""
    steps.router_service(steps.router_planned())
    steps.node_exporter()


@deploy("Monitoring")
def monitoring():
    """Prometheus over the fleet: every serving node's engine, every router's exporter and the
    node exporter on every host as scrape targets, from the inventory; Grafana's dashboards
    where the host has Grafana."""
    plan = steps.monitoring_planned()  # a bad fleet stops the run before any host is touched
    steps.monitoring_prerequisites()
    steps.node_exporter()
    steps.prometheus(plan)
    steps.grafana(plan.grafana)
