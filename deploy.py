"""Provision SGLang nodes and their routers from their profiles.

    pyinfra inventory/gpu.py deploy.py        # real nodes (inventory/hosts.yml)
    pyinfra inventory/sandbox.py deploy.py    # local sandbox nodes

A serving node (sglang_deploy/recipes.py, serving_node): profile checked, operating system,
deploy lock, node scripts, GPU node settings, models staged, preflight, engine, server files,
restarted if changed, serving, old venvs pruned, engine manifest (sglang_deploy/steps/).
A router: the rollout lock before any node restarts, its service after every node's steps.
A monitoring host: Prometheus over all of them, last; a failure there (unreachable, a rule
that does not parse) is its own host's, and stops no other host (pyinfra runs hosts apart).
Every host also runs Prometheus' node exporter (`node_exporter`), after its own steps.

The server restarts only when something it runs changed; a re-run with nothing changed
reports no changes.
"""

from pyinfra import config, host

from sglang_deploy import run_state
from sglang_deploy.cli import exit_on_deploy_error
from sglang_deploy.plan.fleet import is_monitoring, is_router
from sglang_deploy.plan.hosts import check_sudo_applies
from sglang_deploy.recipes import every_node_served, monitoring, router, router_rollout_lock, serving_node
from sglang_deploy.report.outcome import report_at_exit

# Every run ends with one line per host: deployed, unchanged, failed or unreachable (and why).
report_at_exit()

# The host's settings (sglang_deploy/plan/settings/), read once for the run: a key that is no
# setting, or a bad value, stops the run here, before any host is touched.
with exit_on_deploy_error(host.name):
    run_state.host_settings(host)
    check_sudo_applies(host.data, sudo_everywhere=config.SUDO)

# The fleet's order: a router's lock before any node restarts; every host then waits at
# every_node_served (pyinfra runs different hosts' operations side by side, level by level);
# the routers' services and the monitoring host after it.
if is_router(host):
    router_rollout_lock()
elif not is_monitoring(host):
    serving_node()
every_node_served()
if is_router(host):
    router()
if is_monitoring(host):
    monitoring()
