"""The named steps of the recipes (sglang_deploy/recipes.py): each one idea, a few operations.

A step takes the host's plan (plan/host_plan.py: everything computed on the controller from host
data and profile) and returns the operations whose changes later steps react to. Steps run in
the order a recipe calls them; pyinfra orders every host's operations by where they are called,
so the recipes' order is the run's order on every host.
"""

from pyinfra import host, inventory, logger
from pyinfra.operations import files, server
from pyinfra.operations.util import any_changed

from sglang_deploy import operations as sglang
from sglang_deploy import run_state
from sglang_deploy.cli import exit_on_deploy_error
from sglang_deploy.errors import DeployError
from sglang_deploy.facts.engine_venvs import PythonVersion
from sglang_deploy.facts.gpu import ACS_UNIT, acs_unit_text
from sglang_deploy.operations import fleet_order
from sglang_deploy.operations import group as serving_group
from sglang_deploy.operations import monitoring as monitoring_ops
from sglang_deploy.operations.gpu_node import persistence_mode, unit_absent, unit_active
from sglang_deploy.operations.prerequisites import os_prerequisites
from sglang_deploy.plan import shared_nodes
from sglang_deploy.plan.fleet_hosts import fleet_hosts, rotation_for, router_plan
from sglang_deploy.plan.host_plan import node_script_files, plan_for, plan_holder, print_lint_warnings
from sglang_deploy.plan.monitoring import CONFIG_PATH, monitoring_plan, node_exporter_plan
from sglang_deploy.plan.serving_group import profile_of
from sglang_deploy.rollout.waves import NODES, restarts

# --- a serving node (alone, or a member of a serving group) ---------------------------------


def profile_checked():
    """The host's plan from its profile, linted: a bad profile or a lint error stops the run
    before any host is touched; lint warnings are printed once per profile. A serving group's
    member runs its rank's flags (plan/serving_group.py)."""
    with exit_on_deploy_error(host.name):
        plan = plan_for(run_state.host_settings(host), member=serving_group.member_of(host))
        plan.node_units = _node_units() or (plan.unit,)
        plan.rotation = rotation_for(
            host.name,
            host.data,
            fleet_hosts(inventory),
            plan.profile.service.port,
            textfile=plan.scripts.textfile_flags(),
            auth=plan.scripts.api_key_args(),
        )
    print_lint_warnings(plan)
    return plan


def _node_units():
    """The units of every service on this host's node (None: it serves one); the inventory's
    nodes that serve several are checked once per run (plan/shared_nodes.py)."""
    from pyinfra import state

    run = run_state.of(state)
    if run.node_units is None:
        limited = {h.name for h in inventory if state.is_host_in_limit(h)}
        run.node_units = shared_nodes.checked(fleet_hosts(inventory), profile_of, limited)
    return run.node_units.get(host.name)


def operating_system(plan):
    """Debian or Ubuntu (any other stops this host, nothing changed), with the packages the
    recipe needs (`os_packages`); apt runs only for a missing one."""
    os_prerequisites(name="OS prerequisites", packages=list(plan.settings.os_packages))


def deploy_lock(plan):
    """One deploy at a time per node: wait for another operator's to end, or fail saying whose."""
    sglang.deploy_lock(
        name="Deploy lock",
        path=plan.lock_path,
        wait_s=float(plan.settings.deploy_lock_wait_s),
        holder=plan.lock_holder,
    )


def node_scripts(plan):
    """Our on-node scripts (readiness gate, restart cycle, worker check, ...), as one set."""
    sglang.node_scripts(name="On-node scripts", files=plan.node_scripts)


def gpu_node_settings(plan):
    """The profile's `gpu:` and `pcie:`: persistence mode (skipped without an NVIDIA driver) and,
    with pcie.disable_acs, a boot-time unit that clears ACS on every PCI bridge."""
    persistence_mode(
        name="GPU persistence mode",
        enabled=plan.profile.gpu.persistence_mode,
        scripts_dir=plan.scripts.directory,
        unit_dir=plan.settings.unit_dir,
    )
    if plan.profile.pcie.disable_acs:
        acs_unit = sglang.unit_file(
            name="ACS unit",
            unit=ACS_UNIT,
            staging_dir=plan.settings.run_dir,
            unit_dir=plan.settings.unit_dir,
            content=acs_unit_text(plan.scripts.directory, *plan.node_units),
        )
        server.shell(
            name="Clear ACS now (unit changed)",
            commands=[f"systemctl restart {ACS_UNIT}"],
            _if=acs_unit.did_change,
        )
        unit_active(name="ACS cleared at every boot", unit=ACS_UNIT)
    else:
        unit_absent(name="No ACS unit", unit=ACS_UNIT, unit_dir=plan.settings.unit_dir)


def models_staged(plan):
    """The model (and draft model) from its source, copied into a staging sibling, checked
    against its manifest and swapped in whole; nothing when the node's manifest matches. A Hub
    source is downloaded on the node by the pinned huggingface_hub, in its own venv."""
    if any(target.source.kind == "huggingface" for target in plan.models):
        sglang.tool_venv(
            name="Hugging Face Hub client venv",
            venv=plan.hf_venv,
            python="python3",
            packages=[plan.settings.huggingface_hub_pin],
        )
    return [
        sglang.model_staged(
            name=f"Model {target.path} ({target.source.kind})",
            target=target,
            scripts_dir=plan.scripts.directory,
            repairing=bool(plan.repair),
            hub=plan.hub_client,
            in_group=plan.group is not None,
        )
        for target in plan.models
    ]


def preflight(plan):
    """Can this configuration start here, before anything the server runs from changes (and is
    there room for its engine venv, named after the pins, the wheels and this node's Python)?
    A follower of a serving group also reaches rank 0's dist-init port."""
    plan.bind_venv(host.get_fact(PythonVersion, python=plan.profile.engine.python))
    sglang.preflight(
        name="Preflight",
        scripts=plan.scripts,
        repairing=bool(plan.repair),
        engine_ready=sglang.engine_matches(plan.venv, plan.profile.engine.packages),
    )
    if plan.group:
        serving_group.group_preflight(
            name="Group preflight (rank 0's dist-init port)",
            member=plan.group,
            scripts_dir=plan.scripts.directory,
            leader_unit=plan.unit,
            dist_init_addr=plan.group.dist_init_addr(plan.profile.service.dist_init_port),
        )


def hardware_passport(plan):
    """The node's hardware passport (GPUs, PCIe links, NUMA, driver and CUDA, ACS, IOMMU, Xid
    events, remapped rows, clocks-event reasons), kept on the node and the controller; one
    call, and no change a re-run would report."""
    sglang.passport_recorded(name="Hardware passport", scripts=plan.scripts)


def lock_python_checked(locked, python):
    """A host whose ``python`` (the interpreter that builds the venv) is another X.Y than
    ``locked``'s lock was made for stops here, while the run is planned: before any upload, and
    not when uv fails on the host once the whole wheelhouse is there. The engine's and the
    router's alike."""
    with exit_on_deploy_error(host.name):
        problem = locked.python_problem(python, host.get_fact(PythonVersion, python=python))
        if problem:
            raise DeployError(problem)


def locked_wheels_and_uv(locked, wheels, what, deploy_dir, python, **wheelhouse_args):
    """A locked venv's sources on the host, for the engine and the router alike: its lock, the
    wheels the host lacks (``wheels``) and uv, from the wheelhouse."""
    sglang.wheelhouse(
        name=f"{what} wheelhouse ({locked.local_lock.name})",
        wheels=wheels,
        remote_dir=locked.remote_wheelhouse or f"{deploy_dir}/wheelhouse",
        lock=locked.local_lock,
        remote_lock=locked.remote_lock,
        **wheelhouse_args,
    )
    sglang.tool_venv(
        name="uv", venv=locked.uv_venv, python=python, packages=[locked.uv_pin],
        wheels_dir=locked.remote_wheelhouse,
    )  # fmt: skip


def engine(plan):
    """This pin set's venv, built beside the live one (which keeps serving); the unit's link is
    staged to point at it at the restart. A locked engine (locks/) gets the lock and the wheels
    the node lacks from the controller's wheelhouse, and uv builds the venv with exactly the
    lock, hashes required, no index; an unlocked one, the profile's find-links wheels and pip."""
    locked = plan.locked
    if locked is not None:
        lock_python_checked(locked, plan.profile.engine.python)
        with exit_on_deploy_error(host.name):
            wheels = locked.wheels()
        locked_wheels_and_uv(
            locked,
            wheels,
            "Engine",
            plan.settings.sglang_deploy_dir,
            "python3",
            scripts_dir=plan.scripts.directory,
        )
    for wheel in plan.wheels:
        sglang.binary_file(name=f"Wheel {wheel.name}", src=str(wheel), dest=f"{plan.wheels_dir}/{wheel.name}")
    fanout_cleanup(plan)
    return sglang.engine(
        name="Engine venv and pinned packages",
        venv=plan.venv,
        link=plan.profile.engine.venv,
        python=plan.profile.engine.python,
        packages=plan.profile.engine.packages,
        scripts_dir=plan.scripts.directory,
        wheels_dir=locked.remote_wheelhouse if locked else plan.wheels_dir,
        repair=plan.repair,
        lock=locked.remote_lock if locked else None,
        uv=locked.uv if locked else None,
    )


def fanout_cleanup(plan):
    """What a fan-out (models, wheelhouse) left when its run died: our keys in the login user's
    authorized_keys, key directories; nothing when none is left (operations/fanout_keys.py)."""
    sglang.fanout_cleanup(
        name="Fan-out keys removed",
        scripts_dir=plan.scripts.directory,
        run_dir=plan.settings.run_dir,
        user=str(host.data.get("ssh_user") or "root"),
    )


def server_files(plan):
    """What the unit starts from: the env file (root only: it may hold secrets), the start-up
    hook (the same variables in any Python started from the venv) and the systemd unit,
    verified before it is installed (daemon-reload only when it changed)."""
    files.directory(name="Env directory", path=plan.settings.env_dir, user="root", group="root", mode="0700")
    env_file = sglang.secret_file(
        name="Env file", dest=plan.env_path, content=plan.env_text, secret_values=plan.secret_values
    )
    hook = sglang.startup_hook(
        name="Start-up hook", python=plan.hook_python, module_text=plan.hook_module, pth_text=plan.hook_pth
    )
    unit = sglang.unit_file(
        name="systemd unit",
        unit=plan.unit,
        content=plan.unit_text,
        staging_dir=plan.settings.run_dir,
        unit_dir=plan.settings.unit_dir,
    )
    return [env_file, hook, unit]


def restarted_if_changed(plan, changes):
    """A restart only when what the server runs changed, through the readiness gate; a start
    that fails is rolled back to the last configuration that passed. The nodes that serve
    nothing start together first; the others roll out of every router's rotation,
    `rolling_batch` at a time (operations/rollout.py, rollout/). A serving group restarts
    as one when any member changed, driven by rank 0 (operations/group.py)."""
    if plan.group:
        serving_group.join(plan.group, host, plan, changes)
        serving_group.group_restarted(
            name="Restart serving group (configuration changed)",
            member=plan.group,
            rollback=plan.settings.rollback,
            stop_wait_s=float(plan.settings.group_follower_stop_s),
            rotation=plan.rotation,
            _if=serving_group.changed(plan.group),
        )
    else:
        sglang.rolled_restart(
            name="Restart (configuration changed)",
            scripts=plan.scripts,
            hook_python=plan.hook_python,
            rotation=plan.rotation,
            profile_name=plan.profile.name,
            rollback=plan.settings.rollback,
            _if=restarts(NODES, host.name, any_changed(*changes)),
        )


def serving(plan):
    """Enabled and serving, every worker carrying the profile's environment (a group: every
    member, its readiness judged on rank 0); a server found unrecorded is judged like a restart."""
    if plan.group:
        serving_group.group_serving(
            name="Serving group",
            member=plan.group,
            rollback=plan.settings.rollback,
            stop_wait_s=float(plan.settings.group_follower_stop_s),
            rotation=plan.rotation,
        )
    else:
        sglang.serving(
            name="Serving",
            scripts=plan.scripts,
            hook_python=plan.hook_python,
            rollback=plan.settings.rollback,
        )


def metrics_textfile(plan):
    """The deploy's figures (the decode check just judged, the last known good's, the passport's
    GPU links) for the node exporter's textfile collector, so the alert rules judge what the
    deploy judged; written only when a figure changed. Rotation and drift are the node's own
    samples, written by rotation.py and the drift checks as they run. Nothing with
    `node_exporter: false`."""
    if not plan.settings.node_exporter:
        return
    sglang.metrics_textfile_written(
        name="Metrics textfile (the deploy's figures)",
        scripts=plan.scripts,
        routers=bool(plan.rotation.router_urls),
    )


def old_venvs_pruned(plan):
    """The newest `venvs_keep` engine venvs stay, and the live and last known good ones; the
    wheelhouses no venv left was built from go with them."""
    sglang.old_venvs_pruned(
        name="Old engine venvs",
        venvs_dir=plan.venvs_dir,
        link=plan.profile.engine.venv,
        keep=plan.settings.venvs_keep,
        wanted=plan.venv,
        scripts_dir=plan.scripts.directory,
        last_good_dir=plan.scripts.last_good_dir,
        deploy_dir=plan.settings.sglang_deploy_dir,
        lock=plan.locked.remote_lock if plan.locked else None,
    )


def engine_manifest(plan):
    """A record on the controller of what the engine holds, to diff nodes or dates."""
    sglang.manifest_recorded(name="Engine manifest", scripts=plan.scripts, profile=plan.profile)


# --- a router ---------------------------------------------------------------------------------


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


# --- the fleet's order ----------------------------------------------------------------------


def every_node_served():
    """Called on every host at one place in deploy.py: a router's service and a monitoring host
    come after every node's steps (pyinfra runs different hosts' operations side by side)."""
    fleet_order.fleet_barrier(name="Every node's steps", what="the nodes' steps")


# --- monitoring (a monitoring host; the node exporter on every host) --------------------------


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
