"""A serving group's lifecycle across its hosts (multi-node servers, sglang_deploy/serving_group.py).

pyinfra runs each operation on every host at once, operation by operation. A group's restart
must be ordered across hosts (rank 0 stops first; every member starts; rank 0 is gated while
the followers are watched), so rank 0's operation drives the whole group in one
FunctionCommand, reaching the other members through their own connections
(``state.inventory``); each follower's operation waits for rank 0's verdict and reports it as
its own. docs/architecture.md ("Serving groups") says why this and not ordered operations.
"""

from __future__ import annotations

import posixpath
import shlex
import time

import gevent
from pyinfra import host, logger
from pyinfra.api import FunctionCommand, StringCommand, operation
from pyinfra.context import ContextObject, ctx_config, ctx_host

from .. import serving_group, throughput
from ..facts import LastGood, Serving
from ..node import group_join, result, status
from .files import hook_paths
from .service import _cause, _fail

_MEMBERS = None   # {host name: Member} of this run, resolved and checked once
MEMBERS = {}      # group -> {host name: NodePlan}
CHANGES = {}      # group -> the operations whose change restarts the group (every member's)
VERDICTS = {}     # group -> (ok, text): rank 0's restart of the group
NOTES = {}        # host name -> what the outcome line says of its group
POLL_S = 0.5      # how often the followers' units are read while rank 0 is gated


def member_of(pyinfra_host):
    """This host's Member, or None; the inventory's groups are checked (serving_group) before
    anything changes, once per run."""
    global _MEMBERS
    if _MEMBERS is None:
        from pyinfra import state

        hosts = [(h.name, h.data) for h in state.inventory]
        limited = {h.name for h in state.inventory if state.is_host_in_limit(h)}
        _MEMBERS = serving_group.resolve_checked(hosts, serving_group.profile_of, limited)
    return _MEMBERS.get(pyinfra_host.name)


def join(member, pyinfra_host, plan, changes):
    """Register this member's plan and the operations whose change restarts the group."""
    MEMBERS.setdefault(member.group, {})[pyinfra_host.name] = plan
    CHANGES.setdefault(member.group, []).extend(changes)
    NOTES[pyinfra_host.name] = member.label()


def changed(member):
    """An `_if` for the group's restart: did any member's configuration change?"""
    def any_member_changed():
        return any(meta.is_complete() and meta.did_change() for meta in CHANGES[member.group])
    return any_member_changed


def _note(group, text):
    """The group's verdict, in every member's outcome line."""
    for name in MEMBERS.get(group, {}):
        NOTES[name] = f"{_MEMBERS[name].label()}: {text}" if _MEMBERS and name in _MEMBERS else text


def _real(member_host):
    """The Host itself, never pyinfra's `host` context proxy (which cannot be set as its own
    context)."""
    return member_host._get_module() if isinstance(member_host, ContextObject) else member_host


def _hook_paths(member_host, python):
    """files.hook_paths, asked of another member."""
    with ctx_host.use(_real(member_host)):
        return hook_paths(python)


def _run(member_host, command, print_output=False):
    """A command on another member, from this greenlet (pyinfra's host context set to it)."""
    member_host = _real(member_host)
    with ctx_host.use(member_host):
        return member_host.run_shell_command(StringCommand(command), print_output=print_output)


def _unit_show(member_host, unit):
    ok, output = _run(member_host, f"systemctl show -p ActiveState -p SubState -p MainPID "
                                   f"-p NRestarts -p UnitFileState {shlex.quote(unit)}")
    return dict(line.split("=", 1) for line in output.stdout_lines if "=" in line) if ok else {}


def _ended(show, base):
    """Why a follower's start ended since ``base`` (its state right after the start), or None."""
    if show.get("ActiveState") not in ("active", "activating") or show.get("SubState") == "auto-restart":
        return f"unit {show.get('ActiveState')}/{show.get('SubState')}"
    if show.get("MainPID") != base.get("MainPID") or show.get("NRestarts") != base.get("NRestarts"):
        return "systemd restarted it"
    return None


class Group:
    """One serving group's members, by rank, and the steps of its coordinated restart."""

    def __init__(self, state, member, stop_wait_s):
        self.state, self.member, self.stop_wait_s = state, member, stop_wait_s
        self.hosts = [state.inventory.get_host(name) for name in member.hosts]
        self.plans = [MEMBERS[member.group][name] for name in member.hosts]
        self.config = ctx_config.get()  # pyinfra's context, for the greenlets of `on`
        self.t0 = time.monotonic()
        self.said = set()  # what say() said already (a follower's death, said as it is seen)

    @property
    def followers(self):
        return range(1, len(self.hosts))

    def who(self, rank):
        return f"{self.hosts[rank].name} (node-rank {rank})"

    def say(self, text, fg=None, error=False):
        self.said.add(text)
        self.hosts[0].log_styled(f"[{time.monotonic() - self.t0:6.1f}s] group {self.member.group}: {text}",
                                 fg=fg, log_func=logger.error if error else logger.info)

    def run(self, rank, command, print_output=True):
        member_host = self.hosts[rank]
        with ctx_config.use(self.config), ctx_host.use(member_host):
            return member_host.run_shell_command(StringCommand(command), print_output=print_output)

    def on(self, ranks, command_of, print_output=True):
        """Run a command on several members at once: {rank: (ok, output)}."""
        jobs = {rank: gevent.spawn(self.run, rank, command_of(rank), print_output) for rank in ranks}
        gevent.joinall(list(jobs.values()))
        return {rank: job.get() for rank, job in jobs.items()}

    def first_failure(self, found, what):
        for rank, (ok, output) in sorted(found.items()):
            if not ok:
                return f"{what} failed on {self.who(rank)}: {_cause(output)}"
        return None

    def all_ranks(self):
        return range(len(self.hosts))

    # -- The cycle ------------------------------------------------------------------------------

    def cycle(self, rollback=True, preflight=True):
        """Preflight everywhere; stop rank 0 first, then the followers; start every member;
        gate rank 0 while watching the followers; workers everywhere; record the last known good
        everywhere. A failure after the stop rolls every member back together."""
        gone = [h.name for h in self.hosts if h in self.state.failed_hosts]
        if gone:
            self.restore()
            return False, (f"{', '.join(gone)} failed before the restart (its cause is above): "
                           "nothing was stopped")
        engines = {h.name: posixpath.basename(plan.venv or "") for h, plan in zip(self.hosts, self.plans)}
        if len(set(engines.values())) > 1:  # the same pins, wheels and Python on every member
            self.restore()
            return False, ("members would run different engine venvs: " + ", ".join(
                f"{name} {venv}" for name, venv in engines.items()) + "; nothing was stopped")
        if preflight:
            failure = (self.first_failure(self.on(self.all_ranks(), lambda r: self.plans[r].scripts.preflight(
                f"{self.plans[r].venv}/bin/python")), "preflight")
                or self.first_failure(self.on(self.all_ranks(), lambda r: self.plans[r].scripts.switch()),
                                      "engine venv switch"))
            if failure:
                self.restore()
                return False, f"{failure}; nothing was stopped"
        why = self.restart_and_gate() or self.first_failure(
            self.on(self.all_ranks(), lambda r: self.plans[r].scripts.workers()), "worker environment check")
        if not why:
            why = self.decode_check()
            if why is False:  # on_regression: fail: it serves, unrecorded
                return False, "decode check regressed (on_regression: fail): the group serves, not recorded"
        if not why:
            why = self.record()
            if not why:
                return True, f"serving ({self.plans[0].profile.name})"
        if why not in self.said:
            self.say(why, fg="red", error=True)
        if not rollback:
            return False, f"{why}; rollback disabled: the group is left as it is"
        self.say("rolling back every member to its last known good", fg="yellow")
        found = self.restore()
        failure = self.first_failure(found, "restoring the last known good")
        if failure:
            return False, f"{why}; rollback failed: {failure}"
        previous = (result.parse(found[0][1].stdout_lines) or {}).get("profile") or "?"
        again = self.restart_and_gate()
        if again:
            return False, f"{why}; rollback to {previous} failed too: {again}"
        self.say(f"rolled back: serving {previous} again", fg="yellow", error=True)
        return False, f"{why}; rolled back: serving {previous} again"

    def decode_check(self):
        """Rank 0's decode check (it serves the API), when the profile has one: None when it
        passed or only warns, False under on_regression: fail, why under rollback."""
        command = self.plans[0].scripts.decode_check()
        if not command:
            return None
        ok, output = self.run(0, command)
        found = result.parse(output.stdout_lines) or {}
        said = throughput.took_note(self.hosts[0].name, found)
        if said:
            self.say(said[0], fg={"warning": "yellow", "error": "red"}.get(said[1]))
        if ok or found.get("on_regression") == "warn" or not found.get("throughput"):
            return None
        return False if found.get("on_regression") == "fail" else f"decode check: {_cause(output)}"

    def restore(self):
        ranks = [r for r in self.all_ranks() if self.hosts[r] not in self.state.failed_hosts]
        return self.on(ranks, lambda r: self.plans[r].scripts.restore_last_good())

    def record(self):
        def save(rank):
            paths = _hook_paths(self.hosts[rank], self.plans[rank].hook_python) or {}
            return self.plans[rank].scripts.save_last_good(paths)
        commands = {rank: save(rank) for rank in self.all_ranks()}
        return self.first_failure(self.on(self.all_ranks(), commands.get), "recording last known good")

    def stop(self):
        """Rank 0 first (its shutdown broadcast ends the followers), then each follower's end,
        killed after stop_wait_s; None or why it failed."""
        started = time.monotonic()
        self.say(f"stopping rank 0 {self.hosts[0].name} first")
        ok, output = self.run(0, self.plans[0].scripts.restart() + " --no-start")
        if not ok:
            return f"stopping rank 0 {self.hosts[0].name} failed: {_cause(output)}"
        rank0_s = time.monotonic() - started
        self.say(f"rank 0 stopped in {rank0_s:.1f}s; the followers end on its shutdown "
                 f"(killed after {self.stop_wait_s:g}s)")
        found = self.on(self.followers, lambda r: (
            f"python3 {shlex.quote(self.plans[r].scripts.directory)}/follower.py stop "
            f"--unit {shlex.quote(self.plans[r].unit)} --wait {self.stop_wait_s:g}"))
        failure = self.first_failure(found, "stopping a follower")
        if failure:
            return failure
        for rank, (_, output) in sorted(found.items()):
            said = result.parse(output.stdout_lines) or {}
            if said.get("killed"):
                self.say(f"{self.who(rank)} did not end on rank 0's shutdown: killed after "
                         f"{self.stop_wait_s:g}s", fg="yellow")
        # Port and GPU memory released on the followers too (nothing left to stop there).
        failure = self.first_failure(self.on(self.followers, lambda r: self.plans[r].scripts.restart()
                                             + " --no-start", print_output=False), "stopping a follower")
        if failure:
            return failure
        self.say(f"group stopped in {time.monotonic() - started:.1f}s (rank 0 {rank0_s:.1f}s, "
                 f"followers {time.monotonic() - started - rank0_s:.1f}s after it)")
        return None

    def restart_and_gate(self):
        """Stop, start every member, gate rank 0 watching the followers: None, or why not."""
        failure = self.stop()
        if failure:
            return failure
        self.say("starting every member")
        failure = self.first_failure(self.on(self.all_ranks(), lambda r: self.plans[r].scripts.start()),
                                     "start")
        return failure or self.gate()

    def gate(self):
        """Rank 0's readiness gate (the served name, /ping, "fired up") while every follower's
        unit is watched: a follower that dies fails the gate at once, with its host and cause.
        A follower's own /health is a dummy that always answers 200: never readiness."""
        units = [plan.unit for plan in self.plans]
        base = {rank: _unit_show(self.hosts[rank], units[rank]) for rank in self.followers}
        gating = gevent.spawn(self.run, 0, self.plans[0].scripts.gate())
        while not gating.ready():
            for rank in self.followers:
                ended = _ended(_unit_show(self.hosts[rank], units[rank]), base[rank])
                if ended:
                    return self.follower_died(rank, ended, gating)
            gating.join(timeout=POLL_S)
        ok, output = gating.get()
        if not ok:
            why = f"rank 0 {self.hosts[0].name} failed its gate: {_cause(output)}"
            missing = self.not_joined()
            return f"{missing}; {why}" if missing else why
        for rank in self.followers:
            ended = _ended(_unit_show(self.hosts[rank], units[rank]), base[rank])
            if ended:
                return self.follower_died(rank, ended, gating)
        self.say(f"rank 0 {self.hosts[0].name} serves; followers "
                 f"{', '.join(self.who(r) for r in self.followers)} running")
        return None

    def not_joined(self):
        """Which follower never joined rank 0's rendezvous, from every member's journal of this
        start (node/group_join.py's reading), or None when the rendezvous is not the cause."""
        def journal(rank):
            ok, output = self.run(rank, f"python3 {shlex.quote(self.plans[rank].scripts.directory)}/systemd.py "
                                        f"journal {shlex.quote(self.plans[rank].unit)}", print_output=False)
            return [line for line in output.stdout_lines if not line.startswith("-- cursor:")] if ok else None
        profile = self.plans[0].profile
        found = group_join.assess(journal(0), len(self.hosts), profile.tp_size,
                                  {rank: journal(rank) for rank in self.followers})
        if found["state"] in ("joined", "not-started") or not found["cause"]:
            return None
        if found["missing"]:
            return (", ".join(self.who(rank) for rank in found["missing"])
                    + f" never joined rank 0: {found['cause']}")
        return found["cause"]

    def follower_died(self, rank, ended, gating):
        ok, output = self.run(rank, f"python3 {shlex.quote(self.plans[rank].scripts.directory)}/follower.py "
                                    f"cause --unit {shlex.quote(self.plans[rank].unit)}")
        cause = (result.parse(output.stdout_lines) or {}).get("cause") or ended
        why = f"{self.who(rank)} died while the group started: {cause}"
        self.say(why, fg="red", error=True)
        self.stop()  # rank 0 (its gate ends with it), then what is left of the followers
        gating.join(timeout=30)
        return why


# -- Operations -------------------------------------------------------------------------------

def _lead(state, host, member, rollback, stop_wait_s, preflight=True):
    ok, text = False, "rank 0's restart of the group ended unexpectedly (see above)"
    try:
        ok, text = Group(state, member, stop_wait_s).cycle(rollback, preflight)
    finally:  # the followers wait for this verdict, whatever happens here
        VERDICTS[member.group] = (ok, text)
    _note(member.group, "group serves" if ok else f"group failed: {text}")
    if not ok:
        host.log_styled(f"group {member.group} failed: {text}", fg="red", log_func=logger.error)
    return ok


def _follow(state, host, member):
    leader = state.inventory.get_host(member.leader)
    while member.group not in VERDICTS:
        if leader in state.failed_hosts:
            host.log_styled(f"{member.label()}: rank 0 {member.leader} failed before the group's "
                            "restart: nothing was restarted", fg="red", log_func=logger.error)
            return False
        gevent.sleep(0.2)
    ok, text = VERDICTS[member.group]
    if not ok:
        host.log_styled(f"{member.label()}: the group failed: {text}", fg="red", log_func=logger.error)
    return ok


@operation(is_idempotent=False)
def group_restarted(member, rollback=True, stop_wait_s=20.0):
    """
    Restart a serving group as one: rank 0 drives it (preflight on every member, rank 0 stopped
    first, every member started, rank 0 gated while the followers are watched, workers on every
    member, last known good recorded on every member, all rolled back together on failure); a
    follower waits for rank 0's verdict and fails with it.

    + member: serving_group.Member of this host
    + rollback: restore every member's last known good when the group fails its gate
    + stop_wait_s: seconds a follower has to end on rank 0's shutdown before it is killed
    """
    if member.is_leader:
        yield FunctionCommand(_lead, (member, rollback, stop_wait_s), {})
    else:
        yield FunctionCommand(_follow, (member,), {})


def _record(state, host, member, ranks, stop_wait_s):
    group = Group(state, member, stop_wait_s)
    failure = group.record()
    if failure:
        return _fail(state, host, failure)
    group.say("recorded as last known good on " + ", ".join(group.who(r) for r in ranks))
    return True


def _restart_because(state, host, member, why, rollback, stop_wait_s):
    host.log(f"group {member.group}: {'; '.join(why)}: restarting the group", logger.warning)
    return _lead(state, host, member, rollback, stop_wait_s)


def _problems(member, stop_wait_s):
    """What is wrong with a group that should serve: (restart?, [why], ranks to record)."""
    from pyinfra import state

    group = Group(state, member, stop_wait_s)
    restart, why, record = False, [], []
    for rank, (member_host, plan) in enumerate(zip(group.hosts, group.plans)):
        show = _unit_show(member_host, plan.unit)
        if show.get("ActiveState") != "active":
            restart = True
            why.append(f"{group.who(rank)} is {show.get('ActiveState')}")
            continue
        if rank == 0:
            serving_now = host.get_fact(Serving, port=plan.profile.service.port, health_path="/ping",
                                        served_name=plan.profile.model.served_name)
            if not (serving_now and serving_now["ready"]):
                restart = True
                why.append(f"rank 0 {member_host.name} does not serve {plan.profile.model.served_name}")
                continue
        ok, output = _run(member_host, plan.scripts.workers_report())
        report = result.parse(output.stdout_lines) or {}
        if report.get("status") != status.READY:
            why.append(f"{group.who(rank)}: worker environment: "
                       f"{report.get('cause') or report.get('message') or _cause(output)}")
        paths = _hook_paths(member_host, plan.hook_python)
        if paths:
            ok, output = _run(member_host, plan.scripts.compare_last_good(paths))
            found = LastGood().process(output.stdout_lines) if ok else None
            if found and found["differs"]:
                if found["not_running"]:
                    restart = True
                    why.append(f"{group.who(rank)}: {found['not_running']}")
                else:
                    record.append(rank)
    return restart, why, record


@operation()
def group_serving(member, rollback=True, stop_wait_s=20.0):
    """
    A serving group that serves is left alone: every member's unit enabled and active, rank 0
    serving the model (a follower's dummy /health is never readiness), every member's workers
    carrying the profile's environment, what runs recorded as every member's last known good.
    A member down, or one not running what is installed, restarts the group through rank 0.

    + member: serving_group.Member of this host
    + rollback: restore every member's last known good when such a restart fails its gate
    + stop_wait_s: seconds a follower has to end on rank 0's shutdown before it is killed
    """
    plan = MEMBERS[member.group][host.name]
    show = _unit_show(host, plan.unit)
    if show.get("UnitFileState") != "enabled":
        yield f"systemctl enable {shlex.quote(plan.unit)}"
    if not member.is_leader:
        host.noop(f"{member.label()}: rank 0 {member.leader} serves for the group")
        return
    restart, why, record = _problems(member, stop_wait_s)
    if restart:
        yield FunctionCommand(_restart_because, (member, why, rollback, stop_wait_s), {})
    elif why:
        yield FunctionCommand(_fail, (f"group {member.group}: {'; '.join(why)}",), {})
    elif record:
        yield FunctionCommand(_record, (member, record, stop_wait_s), {})
    else:
        host.noop(f"group {member.group} serves {plan.profile.model.served_name}: rank 0 "
                  f"{member.leader}, followers {', '.join(member.followers)} active")


def _reach(state, host, member, command, leader_unit):
    ok, output = host.run_shell_command(StringCommand(command), print_output=True)
    if ok:
        return True
    leader = state.inventory.get_host(member.leader)
    show = _unit_show(leader, leader_unit)
    if show.get("ActiveState") != "active":
        host.log(f"{member.label()}: rank 0 {member.leader} is not running: its dist-init port "
                 "is checked once it runs (skipped)", logger.warning)
        return True
    host.log_styled(f"group preflight failed: {_cause(output)}", fg="red", log_func=logger.error)
    return False


@operation()
def group_preflight(member, scripts_dir, dist_init_addr, leader_unit, timeout_s=2.0):
    """
    From a follower, before anything changes: can it reach rank 0's --dist-init-addr (a TCP
    connect, node/dist_reach.py run on the follower)? Only meaningful while rank 0 runs: on a
    first converge, skipped with a note. Rank 0 has nothing to check here.

    + member: serving_group.Member of this host
    + scripts_dir: where our on-node scripts are
    + dist_init_addr: the group's --dist-init-addr (rank 0's cluster address and port)
    + leader_unit: rank 0's unit
    """
    if member.is_leader:
        host.noop(f"{member.label()}: the followers check that they reach {dist_init_addr}")
        return
    command = (f"python3 {shlex.quote(scripts_dir)}/dist_reach.py --addr {shlex.quote(dist_init_addr)} "
               f"--node-rank {member.rank} --timeout {timeout_s:g}")
    ok, output = host.run_shell_command(StringCommand(command))
    if ok:
        host.noop(f"node-rank {member.rank} reaches rank 0 {member.leader} at {dist_init_addr}")
        return
    yield FunctionCommand(_reach, (member, command, leader_unit), {})
