"""A serving node's steps (alone, or a member of a serving group): its plan, the OS, the deploy
lock, the GPU settings, its model, preflight, the server's files, the restart and serving."""

from pyinfra import host, inventory
from pyinfra.operations import files, server
from pyinfra.operations.util import any_changed

from sglang_deploy import operations as sglang
from sglang_deploy import run_state
from sglang_deploy.cli import exit_on_deploy_error
from sglang_deploy.facts.engine_venvs import PythonVersion
from sglang_deploy.facts.gpu import ACS_UNIT, acs_unit_text
from sglang_deploy.operations import group as serving_group
from sglang_deploy.operations.gpu_node import persistence_mode, unit_absent, unit_active
from sglang_deploy.operations.prerequisites import os_prerequisites
from sglang_deploy.plan import shared_nodes
from sglang_deploy.plan.fleet_hosts import fleet_hosts, rotation_for
from sglang_deploy.plan.host_plan import plan_for, print_lint_warnings
from sglang_deploy.plan.serving_group import profile_of
from sglang_deploy.rollout.waves import NODES, restarts


def profile_checked():
    """The host's plan from its profile, linted: a bad profile or a lint error stops the run
    before any host is touched; lint warnings are printed once per profile. A serving group's
    member runs its rank's flags (plan/serving_group.py)."""
    with exit_on_deploy_error(host.name):
        plan = plan_for(run_state.host_settings(host), member=serving_group.member_of(host))
        plan.node_units = node_units() or (plan.unit,)
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


def node_units():
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
