"""A serving group's lifecycle across its hosts (multi-node servers, sglang_deploy/plan/serving_group.py).

pyinfra runs each operation on every host at once, operation by operation. A group's restart
must be ordered across hosts (rank 0 stops first; every member starts; rank 0 is gated while
the followers are watched), so rank 0's operation drives the whole group in one
FunctionCommand, reaching the other members through their own connections
(``state.inventory``); each follower's operation waits for rank 0's verdict and reports it as
its own. The restart itself is operations/group_restart.py's; this module holds the operations and
what they share across hosts in one run. docs/architecture.md ("Serving groups") says why this
and not ordered operations.
"""

from __future__ import annotations

import shlex
from contextlib import contextmanager
from typing import TYPE_CHECKING

import gevent
from pyinfra import host, logger
from pyinfra.api import FunctionCommand, operation
from pyinfra.context import ctx_host

from sglang_deploy import run_state
from sglang_deploy.facts.fleet import DistInitReach
from sglang_deploy.facts.serving import LastGood, Serving, UnitState, WorkerEnvironment
from sglang_deploy.node import dist_reach
from sglang_deploy.node.lib import status
from sglang_deploy.operations.group_restart import Group, member_hook_paths, real_host, run_on, unit_show
from sglang_deploy.operations.service import fail_with, script_cause
from sglang_deploy.operations.streamed import run_streamed
from sglang_deploy.plan import serving_group
from sglang_deploy.plan.commands import dist_reach_command
from sglang_deploy.plan.settings import default
from sglang_deploy.rollout.waves import GROUPS, GROUPS_REPAIRED, node_facts, restarts, rollout, turn

if TYPE_CHECKING:
    from sglang_deploy.plan.fleet_hosts import Rotation
    from sglang_deploy.plan.serving_group import Member

# The settings' defaults (a caller passes the host's: steps/node.py)
ROLLBACK, STOP_S = default("rollback"), float(default("group_follower_stop_s"))


def member_of(pyinfra_host):
    """This host's Member, or None; the inventory's groups are checked (serving_group) before
    anything changes, once per run."""
    from pyinfra import state

    run = run_state.of(state)
    if run.members is None:
        hosts = [(h.name, h.data) for h in state.inventory]
        limited = {h.name for h in state.inventory if state.is_host_in_limit(h)}
        run.members = serving_group.resolve_checked(hosts, serving_group.profile_of, limited)
    return run.members.get(pyinfra_host.name)


def join(member, pyinfra_host, plan, changes):
    """Register this member's plan and the operations whose change restarts the group; rank 0
    may restart the group in group_serving's waves (when the group does not serve)."""
    run = run_state.of()
    run.group_plans.setdefault(member.group, {})[pyinfra_host.name] = plan
    run.group_changes.setdefault(member.group, []).extend(changes)
    run.group_notes[pyinfra_host.name] = member.label()
    if member.is_leader:
        restarts(GROUPS_REPAIRED, pyinfra_host.name)


def changed(member):
    """An `_if` for the group's restart: did any member's configuration change? Rank 0's
    restarts in the waves of the groups that changed."""
    changes = run_state.of().group_changes

    def any_member_changed():
        return any(meta.is_complete() and meta.did_change() for meta in changes[member.group])

    if member.is_leader:
        restarts(GROUPS, member.leader, any_member_changed)
    return any_member_changed


def _note(run, group, text):
    """The group's verdict, in every member's outcome line."""
    members = run.members or {}
    for name in run.group_plans.get(group, {}):
        run.group_notes[name] = f"{members[name].label()}: {text}" if name in members else text


def _fact_on(member_host, fact, **kwargs):
    """A fact of another member, read from this greenlet (pyinfra's host context set to it)."""
    member_host = real_host(member_host)
    with ctx_host.use(member_host):
        return member_host.get_fact(fact, **kwargs)


@contextmanager
def _turn(state, host, member, rotation, key):
    """Wait for this group's turn in ``key``'s waves (rollout/waves.py, units named by their
    rank 0); yield why it must not restart, or None. Without routers, no turn."""
    if rotation is None:
        yield None
        return

    def facts():
        return node_facts(host, run_state.of(state).group_plans[member.group][host.name].scripts, rotation)

    with turn(state, host, key, rotation, facts) as (_, refusal):
        yield refusal


def _lead(state, host, member, rollback, stop_wait_s, rotation=None, key=GROUPS):
    ok, text = False, "rank 0's restart of the group ended unexpectedly (see above)"
    shared = run_state.of(state)
    try:
        group = Group(state, member, shared.group_plans[member.group], stop_wait_s, rotation)
        run = rollout(state, rotation.rolling) if rotation else None
        with _turn(state, host, member, rotation, key) as turn_refusal:
            refusal = (run and run.refusal(host.name)) or turn_refusal  # read once this group's turn came
            if refusal:
                group.restore()
                text = f"not restarted: {refusal}; every member's files went back to its last known good"
            else:
                ok, text = group.cycle(rollback)
                if run:
                    run.succeeded(host.name) if ok else run.failed(host.name, f"group {member.group}: {text}")
    finally:  # the followers wait for this verdict, whatever happens here
        shared.group_verdicts[member.group] = (ok, text)
    _note(shared, member.group, "group serves" if ok else f"group failed: {text}")
    if not ok:
        host.log_styled(f"group {member.group} failed: {text}", fg="red", log_func=logger.error)
    return ok


def _follow(state, host, member):
    leader = state.inventory.get_host(member.leader)
    verdicts = run_state.of(state).group_verdicts
    while member.group not in verdicts:
        if leader in state.failed_hosts:
            host.log_styled(
                f"{member.label()}: rank 0 {member.leader} failed before the group's "
                "restart: nothing was restarted",
                fg="red",
                log_func=logger.error,
            )
            return False
        gevent.sleep(0.2)
    ok, text = verdicts[member.group]
    if not ok:
        host.log_styled(f"{member.label()}: the group failed: {text}", fg="red", log_func=logger.error)
    return ok


@operation(is_idempotent=False)
def group_restarted(
    member: Member, rollback: bool = ROLLBACK, stop_wait_s: float = STOP_S, rotation: Rotation | None = None
):
    """
    Restart a serving group as one, driven by rank 0.

    Rank 0 drives it (preflight on every member, rank 0 stopped first, every member started, rank 0
    gated while the followers are watched, workers on every member, last known good recorded on
    every member, all rolled back together on failure); a follower waits for rank 0's verdict and
    fails with it.

    + member: serving_group.Member of this host
    + rollback: restore every member's last known good when the group fails its gate
    + stop_wait_s: seconds a follower has to end on rank 0's shutdown before it is killed
    + rotation: rank 0's ``plan.fleet_hosts.Rotation``: out of its routers around the restart, one
      ``rolling_batch`` of groups at a time, none once the rollout stopped

    **Examples:**

    .. code:: python

        group.group_restarted(name="Restart serving group", member=plan.group, rotation=plan.rotation)
    """
    if member.is_leader:
        yield FunctionCommand(_lead, (member, rollback, stop_wait_s), {"rotation": rotation})
    else:
        yield FunctionCommand(_follow, (member,), {})


def _check_and_record(state, host, member, ranks, rollback, stop_wait_s):
    """Members that serve a configuration other than their last known good: judged from the
    gate on like any restart (gate, workers, decode check), then recorded or rolled back, as a
    single node's is (node/cycle.py --running)."""
    run = run_state.of(state)
    group = Group(state, member, run.group_plans[member.group], stop_wait_s)
    group.say(
        "serving a configuration other than the last known good on "
        + ", ".join(group.who(r) for r in ranks)
        + ": checking it before recording it"
    )
    ok, text = group.cycle(rollback, running=True)
    if not ok:
        _note(run, member.group, f"group failed: {text}")
        return fail_with(state, host, f"group {member.group} failed: {text}")
    group.say("recorded as last known good on every member")
    return True


def _restart_because(state, host, member, why, rollback, stop_wait_s, rotation=None):
    host.log(f"group {member.group}: {'; '.join(why)}: restarting the group", logger.warning)
    return _lead(state, host, member, rollback, stop_wait_s, rotation=rotation, key=GROUPS_REPAIRED)


def _problems(member, stop_wait_s):
    """What is wrong with a group that should serve: (restart?, [why], ranks to record). Every
    member's state is read through facts: nothing runs on a member while the run is planned."""
    from pyinfra import state

    group = Group(state, member, run_state.of(state).group_plans[member.group], stop_wait_s)
    restart, why, record = False, [], []
    for rank, (member_host, plan) in enumerate(zip(group.hosts, group.plans)):
        show = _fact_on(member_host, UnitState, unit=plan.unit)
        if show.get("ActiveState") != "active":
            restart = True
            why.append(f"{group.who(rank)} is {show.get('ActiveState')}")
            continue
        if rank == 0:
            serving_now = host.get_fact(
                Serving,
                port=plan.profile.service.port,
                health_path="/ping",
                served_name=plan.profile.model.served_name,
                host=plan.profile.service.probe_host,
                auth=tuple(plan.scripts.api_key_args()),
            )
            if not (serving_now and serving_now["ready"]):
                restart = True
                why.append(f"rank 0 {member_host.name} does not serve {plan.profile.model.served_name}")
                continue
        report = (
            _fact_on(
                member_host,
                WorkerEnvironment,
                scripts_dir=plan.scripts.directory,
                unit=plan.unit,
                expect=plan.profile.hook_vars(),
            )
            or {}
        )
        if report.get("status") != status.READY:
            why.append(
                f"{group.who(rank)}: worker environment: "
                f"{report.get('cause') or report.get('message') or 'workers.py printed no result'}"
            )
        paths = member_hook_paths(member_host, plan.hook_python)
        if paths:
            found = _fact_on(
                member_host,
                LastGood,
                scripts_dir=plan.scripts.directory,
                command=plan.scripts.compare_last_good(paths),
            )
            if found and found.get("status") == status.READY and found["differs"]:
                if found["not_running"]:
                    restart = True
                    why.append(f"{group.who(rank)}: {found['not_running']}")
                else:
                    record.append(rank)
    return restart, why, record


@operation()
def group_serving(
    member: Member, rollback: bool = ROLLBACK, stop_wait_s: float = STOP_S, rotation: Rotation | None = None
):
    """
    A serving group that serves is left alone; one that does not is restarted.

    Serving is: every member's unit enabled and active, rank 0 serving the model (a follower's dummy
    /health is never readiness), every member's workers carrying the profile's environment, what
    runs recorded as every member's last known good. A member down, or one not running what is
    installed, restarts the group through rank 0; a group that runs what is installed but not what
    is recorded is judged from the gate on (decode check included) before it is recorded, or rolled
    back.

    + member: serving_group.Member of this host
    + rollback: restore every member's last known good when such a restart or check fails
    + stop_wait_s: seconds a follower has to end on rank 0's shutdown before it is killed
    + rotation: rank 0's ``plan.fleet_hosts.Rotation``, for such a restart

    **Examples:**

    .. code:: python

        group.group_serving(name="Serving group", member=plan.group, rotation=plan.rotation)
    """
    plan = run_state.of().group_plans[member.group][host.name]
    show = host.get_fact(UnitState, unit=plan.unit)
    if show.get("UnitFileState") != "enabled":
        yield f"systemctl enable {shlex.quote(plan.unit)}"
    if not member.is_leader:
        host.noop(f"{member.label()}: rank 0 {member.leader} serves for the group")
        return
    restart, why, record = _problems(member, stop_wait_s)
    if restart:
        yield FunctionCommand(_restart_because, (member, why, rollback, stop_wait_s), {"rotation": rotation})
    elif why:
        yield FunctionCommand(fail_with, (f"group {member.group}: {'; '.join(why)}",), {})
    elif record:
        yield FunctionCommand(_check_and_record, (member, record, rollback, stop_wait_s), {})
    else:
        host.noop(
            f"group {member.group} serves {plan.profile.model.served_name}: rank 0 "
            f"{member.leader}, followers {', '.join(member.followers)} active"
        )


def _probe(scripts_dir, dist_init_addr, rank, timeout_s, listening_port=None):
    return dist_reach_command(scripts_dir, dist_init_addr, rank, timeout_s, listening_port)


def _running_argv(leader, leader_unit):
    """Rank 0's main process's argv, or None when it cannot be read."""
    pid = unit_show(leader, leader_unit).get("MainPID", "0")
    if not pid.isdigit() or pid == "0":
        return None
    ok, output = run_on(leader, f"tr '\\0' '\\n' < /proc/{int(pid)}/cmdline")
    return output.stdout_lines if ok and output.stdout_lines else None


def _reach(state, host, member, scripts_dir, dist_init_addr, leader_unit, timeout_s):
    """The follower's probe failed: skipped while rank 0 is not running or serves alone (the
    group forms at this restart: its gate names a follower that cannot join); while it runs on
    another port than this change's (the change moves it), that port is probed instead; else
    again, to say why it fails."""
    leader = state.inventory.get_host(member.leader)
    if unit_show(leader, leader_unit).get("ActiveState") != "active":
        host.log(
            f"{member.label()}: rank 0 {member.leader} is not running: its dist-init port "
            "is checked once it runs (skipped)",
            logger.warning,
        )
        return True
    planned = dist_reach.split_addr(dist_init_addr)[1]
    running = _running_argv(leader, leader_unit)
    now = dist_reach.dist_init_port_of(running) if running else None
    if running and now is None:  # serving alone: the group forms at this restart
        host.log(
            f"{member.label()}: rank 0 {member.leader} serves alone (no --dist-init-addr): its "
            "dist-init port is checked once the group starts (skipped)",
            logger.warning,
        )
        return True
    moved = now if now and now != planned else None
    ok, output = run_streamed(host, _probe(scripts_dir, dist_init_addr, member.rank, timeout_s, moved))
    if ok:
        if moved:
            host.log(
                f"{member.label()}: rank 0 {member.leader} listens on port {moved} until the group "
                f"restarts onto {planned}: reached on {moved}",
                logger.warning,
            )
        return True
    host.log_styled(f"group preflight failed: {script_cause(output)}", fg="red", log_func=logger.error)
    return False


@operation()
def group_preflight(
    member: Member, scripts_dir: str, dist_init_addr: str, leader_unit: str, timeout_s: float = 2.0
):
    """
    From a follower, before anything changes: can it reach rank 0's --dist-init-addr?

    A TCP connect, node/dist_reach.py run on the follower. Only meaningful while rank 0 runs: on a
    first converge, skipped with a note. When this change moves the dist-init port, rank 0 still
    listens on the old one: that port on rank 0's host is probed instead, and said so. Rank 0 has
    nothing to check here.

    + member: serving_group.Member of this host
    + scripts_dir: where our on-node scripts are
    + dist_init_addr: the group's --dist-init-addr (rank 0's cluster address and port)
    + leader_unit: rank 0's unit
    + timeout_s: how long the connect may take

    **Examples:**

    .. code:: python

        group.group_preflight(
            name="Group preflight", member=plan.group, scripts_dir=plan.scripts.directory,
            dist_init_addr="10.0.0.1:5000", leader_unit=plan.unit,
        )
    """
    if member.is_leader:
        host.noop(f"{member.label()}: the followers check that they reach {dist_init_addr}")
        return
    reached = host.get_fact(
        DistInitReach, command=_probe(scripts_dir, dist_init_addr, member.rank, timeout_s)
    )
    if reached and reached.get("status") == status.READY:
        host.noop(f"node-rank {member.rank} reaches rank 0 {member.leader} at {dist_init_addr}")
        return
    yield FunctionCommand(_reach, (member, scripts_dir, dist_init_addr, leader_unit, timeout_s), {})
