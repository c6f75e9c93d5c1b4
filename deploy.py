"""Provision an SGLang node from its profile.

    pyinfra inventory/gpu.py deploy.py        # real nodes (inventory/hosts.yml)
    pyinfra inventory/sandbox.py deploy.py    # local sandbox nodes

The server restarts only when something it runs changed; a re-run with nothing changed
reports no changes.
"""

from pyinfra import host, inventory
from pyinfra.operations import files, server
from pyinfra.operations.util import any_changed

from sglang_deploy import operations as sglang
from sglang_deploy.cli import exit_on_deploy_error
from sglang_deploy.facts.engine_venvs import PythonVersion
from sglang_deploy.facts.gpu import ACS_UNIT, acs_unit_text
from sglang_deploy.operations import group as serving_group
from sglang_deploy.operations.gpu_node import persistence_mode, unit_absent, unit_active
from sglang_deploy.operations.prerequisites import os_prerequisites
from sglang_deploy.plan.fleet import is_router
from sglang_deploy.plan.fleet_hosts import fleet_hosts, rotation_for, router_plan
from sglang_deploy.plan.host_plan import node_script_files, plan_for, plan_holder, print_lint_warnings
from sglang_deploy.plan.settings import settings_of
from sglang_deploy.report.outcome import report_at_exit

# Every run ends with one line per host: deployed, unchanged, failed or unreachable (and why).
report_at_exit()

# The host's settings (sglang_deploy/plan/settings.py): a key that is no setting, or a bad value,
# stops the run here, before any host is touched.
with exit_on_deploy_error(host.name):
    settings = settings_of(host.data)

# A router host (the inventory's `routers` group) runs SGLang's router in front of the nodes:
# its lock first (one rollout of the fleet at a time), its service after the nodes' steps.
if is_router(host):
    with exit_on_deploy_error(host.name):
        router = router_plan(host.name, fleet_hosts(inventory))
    sglang.deploy_lock(
        name="Rollout lock",
        path=f"{settings.run_dir}/rollout.lock",
        wait_s=float(settings.deploy_lock_wait_s),
        holder=plan_holder(),
    )
    os_prerequisites(name="OS prerequisites", packages=list(settings.os_packages))
    sglang.node_scripts(name="On-node scripts (router)", files=node_script_files(settings.sglang_deploy_dir))
else:
    # 1. Read this host's profile and lint it; a bad profile or a lint error stops the run before
    #    any host is touched. Lint warnings are printed once per profile.
    with exit_on_deploy_error(host.name):
        # A serving group's member (a multi-node server) runs its rank's flags (serving_group.py).
        plan = plan_for(settings, member=serving_group.member_of(host))
        rotation = rotation_for(host.name, settings, fleet_hosts(inventory), plan.profile.service.port)
    print_lint_warnings(plan)

    # 2. The OS: Debian or Ubuntu (any other stops this host here, with nothing changed), with
    #    the packages the recipe needs (the os_packages setting); apt only for a missing one.
    os_prerequisites(name="OS prerequisites", packages=plan.os_packages)

    # 3. One deploy at a time per node: wait for another operator's to end, or fail saying whose.
    sglang.deploy_lock(
        name="Deploy lock", path=plan.lock_path, wait_s=plan.lock_wait_s, holder=plan.lock_holder
    )

    # 4. Our on-node scripts (readiness gate, restart sequence, worker check, ...), as one set.
    sglang.node_scripts(name="On-node scripts", files=plan.node_scripts)

    # 5. GPU node settings (profile `gpu:`, `pcie:`): persistence mode (skipped without an NVIDIA
    #    driver); with pcie.disable_acs, a boot-time unit that clears ACS on every PCI bridge.
    persistence_mode(name="GPU persistence mode", enabled=plan.profile.gpu.persistence_mode)
    if plan.profile.pcie.disable_acs:
        acs_unit = sglang.unit_file(
            name="ACS unit",
            unit=ACS_UNIT,
            staging_dir=plan.run_dir,
            unit_dir=plan.unit_dir,
            content=acs_unit_text(plan.scripts.directory, plan.unit),
        )
        server.shell(
            name="Clear ACS now (unit changed)",
            commands=[f"systemctl restart {ACS_UNIT}"],
            _if=acs_unit.did_change,
        )
        unit_active(name="ACS cleared at every boot", unit=ACS_UNIT)
    else:
        unit_absent(name="No ACS unit", unit=ACS_UNIT, unit_dir=plan.unit_dir)

    # 6. The model (and draft model) from its source: copied into a staging sibling, verified
    #    against its manifest, swapped into place whole; nothing when the node's manifest matches.
    #    A Hub source is downloaded on the node by the pinned huggingface_hub, in its own venv.
    if any(target.source.kind == "huggingface" for target in plan.models):
        sglang.tool_venv(
            name="Hugging Face Hub client venv", venv=plan.hf_venv, python="python3", packages=[plan.hf_pin]
        )
    staged_models = [
        sglang.model_staged(
            name=f"Model {target.path} ({target.source.kind})",
            target=target,
            scripts_dir=plan.scripts.directory,
            repairing=bool(plan.repair),
            hub=plan.hub_client,
        )
        for target in plan.models
    ]

    # 7. Preflight, before anything the server runs from changes: can this configuration start
    #    here (and is there room for its engine venv, when it is a new one)? The venv of this pin
    #    set is named after the pins, the wheels and this node's Python (sglang_deploy/plan/venv_names.py).
    plan.bind_venv(host.get_fact(PythonVersion, python=plan.profile.engine.python))
    sglang.preflight(
        name="Preflight",
        scripts=plan.scripts,
        repairing=bool(plan.repair),
        engine_ready=sglang.engine_matches(plan.venv, plan.profile.engine.packages),
    )
    if plan.group:  # every follower reaches rank 0's dist-init port (once rank 0 runs)
        serving_group.group_preflight(
            name="Group preflight (rank 0's dist-init port)",
            member=plan.group,
            scripts_dir=plan.scripts.directory,
            leader_unit=plan.unit,
            dist_init_addr=plan.group.dist_init_addr(plan.profile.service.dist_init_port),
        )

    # 8. Wheels the profile installs from (the sandbox's stand-in engine, or none).
    for wheel in plan.wheels:
        sglang.binary_file(name=f"Wheel {wheel.name}", src=str(wheel), dest=f"{plan.wheels_dir}/{wheel.name}")

    # 9. The engine: this pin set's venv, built beside the live one (which keeps serving), and
    #    the unit's link staged to point at it at the restart.
    engine = sglang.engine(
        name="Engine venv and pinned packages",
        venv=plan.venv,
        link=plan.profile.engine.venv,
        python=plan.profile.engine.python,
        packages=plan.profile.engine.packages,
        scripts_dir=plan.scripts.directory,
        wheels_dir=plan.wheels_dir,
        repair=plan.repair,
    )

    # 10. The environment file the unit loads (root only: it may hold secrets).
    files.directory(name="Env directory", path=plan.env_dir, user="root", group="root", mode="0700")
    env_file = sglang.secret_file(
        name="Env file", dest=plan.env_path, content=plan.env_text, secret_values=plan.secret_values
    )

    # 11. The start-up hook: the same variables in any Python started by hand from the venv.
    hook = sglang.startup_hook(
        name="Start-up hook", python=plan.hook_python, module_text=plan.hook_module, pth_text=plan.hook_pth
    )

    # 12. The systemd unit, verified before it is installed; daemon-reload only when it changed.
    unit = sglang.unit_file(
        name="systemd unit",
        unit=plan.unit,
        content=plan.unit_text,
        staging_dir=plan.run_dir,
        unit_dir=plan.unit_dir,
    )

    # 13. Restart only when what the server runs changed, then gate until it serves; a start
    #     that fails its gate is rolled back to the last configuration that passed. Out of every
    #     router's rotation, `rolling_batch` nodes at a time (sglang_deploy/plan/fleet.py). A serving
    #     group restarts as one when any member changed, driven by rank 0 (operations/group.py),
    #     rank 0 out of rotation, `rolling_batch` groups at a time.
    if plan.group:
        serving_group.join(plan.group, host, plan, [engine, env_file, hook, unit, *staged_models])
        stop_wait_s = float(settings.group_follower_stop_s)
        serving_group.group_restarted(
            name="Restart serving group (configuration changed)",
            member=plan.group,
            rollback=plan.rollback,
            stop_wait_s=stop_wait_s,
            rotation=rotation,
            _if=serving_group.changed(plan.group),
        )
    else:
        sglang.rolled_restart(
            name="Restart (configuration changed)",
            scripts=plan.scripts,
            hook_python=plan.hook_python,
            rotation=rotation,
            profile_name=plan.profile.name,
            rollback=plan.rollback,
            _parallel=rotation.rolling.batch,
            _if=any_changed(engine, env_file, hook, unit, *staged_models),
        )

    # 14. Enabled and serving, with every worker carrying the profile's environment (for a
    #     group: every member, its readiness judged on rank 0).
    if plan.group:
        serving_group.group_serving(
            name="Serving group",
            member=plan.group,
            rollback=plan.rollback,
            stop_wait_s=stop_wait_s,
            rotation=rotation,
        )
    else:
        sglang.serving(
            name="Serving", scripts=plan.scripts, hook_python=plan.hook_python, rollback=plan.rollback
        )

    # 15. Old engine venvs: the newest `venvs_keep` stay, and the live and last known good ones.
    sglang.old_venvs_pruned(
        name="Old engine venvs",
        venvs_dir=plan.venvs_dir,
        link=plan.profile.engine.venv,
        keep=plan.venvs_keep,
        wanted=plan.venv,
        scripts_dir=plan.scripts.directory,
        last_good_dir=plan.scripts.last_good_dir,
    )

    # 16. A record on the controller of what the engine holds, to diff nodes or dates.
    sglang.manifest_recorded(name="Engine manifest", scripts=plan.scripts, profile=plan.profile)


# The router: its pinned venv, its unit (worker URLs, policy, health checks), a restart only
# when either changed, then its gate (/readiness 200, every expected worker healthy).
if is_router(host):
    router_dir = f"{settings.sglang_deploy_dir}/router-wheels"
    for wheel in router.wheels:
        sglang.binary_file(
            name=f"Router wheel {wheel.name}", src=str(wheel), dest=f"{router_dir}/{wheel.name}"
        )
    router_venv = sglang.tool_venv(
        name="Router venv",
        venv=router.settings.venv,
        python=router.settings.python,
        packages=list(router.settings.packages),
        wheels_dir=router_dir if router.wheels else None,
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
        scripts_dir=f"{settings.sglang_deploy_dir}/node",
        _if=any_changed(router_venv, router_unit),
    )
    sglang.router_serving(
        name="Router serving", plan=router, scripts_dir=f"{settings.sglang_deploy_dir}/node"
    )
