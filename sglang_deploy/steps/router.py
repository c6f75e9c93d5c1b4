"""A router host's steps (its plan, the rollout lock, its venv and unit) and the fleet's order."""

from pyinfra import host, inventory
from pyinfra.operations.util import any_changed

from sglang_deploy import operations as sglang
from sglang_deploy import run_state
from sglang_deploy.cli import exit_on_deploy_error
from sglang_deploy.operations import fleet_order
from sglang_deploy.operations.prerequisites import os_prerequisites
from sglang_deploy.plan.fleet_hosts import fleet_hosts, router_plan
from sglang_deploy.plan.host_plan import node_script_files, plan_holder
from sglang_deploy.steps.venvs import lock_python_checked, locked_wheels_and_uv


def router_planned():
    """The router's plan: every serving node of the inventory as a worker."""
    with exit_on_deploy_error(host.name):
        return router_plan(host.name, fleet_hosts(inventory))


def rollout_lock():
    """One rollout of the fleet at a time: taken before any node restarts."""
    settings = run_state.host_settings(host)
    sglang.deploy_lock(
        name="Rollout lock",
        path=f"{settings.run_dir}/rollout.lock",
        wait_s=float(settings.deploy_lock_wait_s),
        holder=plan_holder(),
    )


def router_prerequisites():
    """The OS packages and our on-node scripts (the router's gate)."""
    settings = run_state.host_settings(host)
    os_prerequisites(name="OS prerequisites", packages=list(settings.os_packages))
    sglang.node_scripts(name="On-node scripts (router)", files=node_script_files(settings.sglang_deploy_dir))


def router_service(router):
    """The router's venv, exactly its lock, and its unit (worker URLs, policy, health checks); a
    restart only when either changed, then its gate (/readiness 200, every expected worker
    healthy). The lock and the wheels the host lacks come from the controller's wheelhouse
    (`make router-wheels`), and uv builds the venv with hashes required, no index, as a node's
    locked engine; a host whose router_python is not the lock's Python stops here."""
    settings = run_state.host_settings(host)
    scripts_dir = f"{settings.sglang_deploy_dir}/node"
    locked = router.locked
    with exit_on_deploy_error(host.name):
        wheels = locked.wheels()
    python = router.router.settings.router_python
    lock_python_checked(locked, python)
    locked_wheels_and_uv(locked, wheels, "Router", settings.sglang_deploy_dir, python)
    router_venv = sglang.locked_venv(
        name="Router venv (exactly its lock)",
        venv=router.router.venv,
        python=python,
        lock=locked.remote_lock,
        uv=locked.uv,
        scripts_dir=scripts_dir,
        wheels_dir=locked.remote_wheelhouse,
    )
    router_unit = sglang.unit_file(
        name="Router unit",
        unit=router.unit,
        content=router.unit_text,
        staging_dir=settings.run_dir,
        unit_dir=settings.unit_dir,
    )
    sglang.router_restarted(
        name="Router restart (configuration changed)",
        plan=router,
        scripts_dir=scripts_dir,
        _if=any_changed(router_venv, router_unit),
    )
    sglang.router_serving(name="Router serving", plan=router, scripts_dir=scripts_dir)


def every_node_served():
    """Called on every host at one place in deploy.py: a router's service and a monitoring host
    come after every node's steps (pyinfra runs different hosts' operations side by side)."""
    fleet_order.fleet_barrier(name="Every node's steps", what="the nodes' steps")
