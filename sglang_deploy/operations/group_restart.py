"""A serving group's restart, driven from the controller across its members' connections
(operations/group.py runs it inside rank 0's operation; docs/architecture.md "Serving groups").

The cycle's decisions are the single node's, run by the same function (node/cycle.py's
decide(): preflight, venv switch, restart, readiness gate, workers, decode check, last known good
saved; on failure the last known good restored and restarted); this module gives it steps that
act across the members: rank 0 stops first and the followers end on its shutdown; every member
starts; rank 0 alone is gated (it serves the API) while the followers' units are watched; the
decode check is rank 0's; every other step runs on every member at once. Failures are named
with node/cycle.py's step labels.
"""

from __future__ import annotations

import posixpath
import time

import gevent
from pyinfra import logger
from pyinfra.api import StringCommand
from pyinfra.context import ContextObject, ctx_config, ctx_host

from sglang_deploy.facts.serving import UnitState
from sglang_deploy.node import group_join
from sglang_deploy.node.cycle import LABELS, decide, restored_decode
from sglang_deploy.node.lib import result
from sglang_deploy.operations import remote
from sglang_deploy.operations.files import hook_paths
from sglang_deploy.operations.service import script_cause
from sglang_deploy.operations.streamed import run_streamed
from sglang_deploy.plan.settings import default
from sglang_deploy.report import throughput_log as throughput

POLL_S = 0.5  # how often the followers' units are read while rank 0 is gated


def real_host(member_host):
    """The Host itself, never pyinfra's `host` context proxy (which cannot be set as its own
    context)."""
    return member_host._get_module() if isinstance(member_host, ContextObject) else member_host


def member_hook_paths(member_host, python):
    """files.hook_paths, asked of another member."""
    with ctx_host.use(real_host(member_host)):
        return hook_paths(python)


def run_on(member_host, command, print_output=False):
    """A command on another member, from this greenlet (pyinfra's host context set to it)."""
    member_host = real_host(member_host)
    with ctx_host.use(member_host):
        return remote.run(member_host, StringCommand(command), print_output=print_output)


def unit_show(member_host, unit):
    """A member's unit (facts/serving.py UnitState, read afresh each call), {} unread."""
    fact = UnitState()
    ok, output = run_on(member_host, fact.command(unit))
    return fact.process(output.stdout_lines) if ok else {}


def _ended(show, base):
    """Why a follower's start ended since ``base`` (its state right after the start), or None."""
    if show.get("ActiveState") not in ("active", "activating") or show.get("SubState") == "auto-restart":
        return f"unit {show.get('ActiveState')}/{show.get('SubState')}"
    if show.get("MainPID") != base.get("MainPID") or show.get("NRestarts") != base.get("NRestarts"):
        return "systemd restarted it"
    return None


# node/cycle.py's steps that run on every member at once, by their command line
EVERYWHERE = {
    "preflight": lambda plan: plan.scripts.preflight(f"{plan.venv}/bin/python"),
    "switch": lambda plan: plan.scripts.switch(),
    "workers": lambda plan: plan.scripts.workers(),
}


class Group:
    """One serving group's members, by rank, and the steps of its coordinated restart."""

    def __init__(self, state, member, plans, stop_wait_s, rotation=None):
        """plans: {host name: NodePlan} of every member; rotation: rank 0's fleet_plan.Rotation
        (its routers: the followers are no router's workers)."""
        self.state, self.member, self.stop_wait_s = state, member, stop_wait_s
        self.rotation = rotation if rotation is not None and rotation.router_urls else None
        self.taken_out = None  # rotation.py --only out's report while rank 0 is out of rotation
        self.hosts = [state.inventory.get_host(name) for name in member.hosts]
        self.plans = [plans[name] for name in member.hosts]
        self.config = ctx_config.get()  # pyinfra's context, for the greenlets of `on`
        self.t0 = time.monotonic()
        self.said = set()  # what say() said already (a follower's death, said as it is seen)
        self.failures = []  # why each step of the cycle that failed did, in order
        self.decoded = {}  # rank 0's decode check's result line

    @property
    def followers(self):
        return range(1, len(self.hosts))

    def who(self, rank):
        return f"{self.hosts[rank].name} (node-rank {rank})"

    def say(self, text, fg=None, error=False):
        self.said.add(text)
        self.hosts[0].log_styled(
            f"[{time.monotonic() - self.t0:6.1f}s] group {self.member.group}: {text}",
            fg=fg,
            log_func=logger.error if error else logger.info,
        )

    def run(self, rank, command, print_output=True):
        member_host = self.hosts[rank]
        with ctx_config.use(self.config), ctx_host.use(member_host):
            if print_output:
                return run_streamed(member_host, command)
            return remote.run(member_host, StringCommand(command))

    def on(self, ranks, command_of, print_output=True):
        """Run a command on several members at once: {rank: (ok, output)}."""
        jobs = {rank: gevent.spawn(self.run, rank, command_of(rank), print_output) for rank in ranks}
        gevent.joinall(list(jobs.values()))
        return {rank: job.get() for rank, job in jobs.items()}

    def first_failure(self, found, what):
        for rank, (ok, output) in sorted(found.items()):
            if not ok:
                return f"{what} failed on {self.who(rank)}: {script_cause(output)}"
        return None

    def all_ranks(self):
        return range(len(self.hosts))

    # -- The cycle: node/cycle.py's decisions (decide()), with steps across the members ---------

    def cycle(self, rollback=default("rollback"), running=False):
        """node/cycle.py's cycle across the members (step()), rank 0 out of its routers' rotation
        from its switch until it serves again (the new configuration, or the previous one after
        a rollback). ``running``: the group runs what is installed: the cycle starts at the gate."""
        gone = [h.name for h in self.hosts if h in self.state.failed_hosts]
        engines = {h.name: posixpath.basename(plan.venv or "") for h, plan in zip(self.hosts, self.plans)}
        if gone:
            refused = f"{', '.join(gone)} failed before the restart (its cause is above): nothing was stopped"
        elif len(set(engines.values())) > 1:  # the same pins, wheels and Python on every member
            refused = (
                "members would run different engine venvs: "
                + ", ".join(f"{name} {venv}" for name, venv in engines.items())
                + "; nothing was stopped"
            )
        else:
            refused = None
        if refused:
            if not running:  # what this run installed goes back; a running group keeps its files
                self.restore()
            return False, refused
        outcome, details = decide(self.step, rollback, running)
        text = self.verdict(outcome, details.get("profile") or "?", details.get("restored"))
        back = self.put_back()
        return (outcome == "served" and not back), (f"{text}; {back}" if back else text)

    def step(self, name, profile=None):
        """decide()'s runner: node/cycle.py's step ``name`` across the members: (ok, rank 0's
        result line)."""
        if name == "remeasure":
            return self.remeasure(profile), {}
        reads = {"decode": self.decode_check, "restore": self.restored, "rollback": self.roll_back}
        if name in reads:  # the steps whose result decide() reads
            failure, found = reads[name]()
        elif name in EVERYWHERE:
            command = EVERYWHERE[name]
            failure = self.first_failure(
                self.on(self.all_ranks(), lambda r: command(self.plans[r])), LABELS[name]
            )
            # The last step before anything stops: rank 0 out of rotation.
            failure, found = (failure or (self.take_out() if name == "switch" else None)), {}
        else:
            steps = {"restart": self.restart, "gate": self.gate, "recheck": self.recheck, "save": self.record}
            failure, found = steps[name](), {}
        if failure:
            self.failures.append(failure)
        return not failure, found

    def said_failure(self):
        """The first failure, said once (a follower's death is said as it is seen)."""
        why = self.failures[0]
        if why not in self.said:
            self.say(why, fg="red", error=True)
        return why

    def verdict(self, outcome, previous, restored):
        """decide()'s outcome in the group's words."""
        if outcome == "served":
            return f"serving ({self.plans[0].profile.name})"
        if outcome == "preflight_failed":
            return f"{self.failures[0]}; nothing was stopped"
        if outcome == "regressed":
            policy = self.decoded.get("on_regression")
            unless = "" if policy == "fail" else "; rollback disabled"
            return f"decode check regressed (on_regression: {policy}{unless}): the group serves, not recorded"
        why = self.said_failure()
        if outcome == "failed":
            return f"{why}; rollback disabled: the group is left as it is"
        if outcome == "rolled_back":
            self.say(f"rolled back: serving {previous} again", fg="yellow", error=True)
            return f"{why}; rolled back: serving {previous} again"
        if restored:
            return f"{why}; rollback to {previous} failed too: {self.failures[-1]}"
        return f"{why}; rollback failed: {self.failures[-1]}"

    def take_out(self):
        """Rank 0 out of every router and drained before the group stops (the routers then send
        its requests to the fleet's other workers). None, or why nothing was stopped."""
        if not self.rotation:
            return None
        ok, output = self.run(0, self.rotation.out(self.plans[0].scripts.directory))
        if not ok:
            return f"rotation: {script_cause(output)}"
        self.taken_out = (result.parse(output.stdout_lines) or {}).get("rotation") or {}
        return None

    def put_back(self):
        """Rank 0 back in every router once it serves again; None, or why not."""
        if not (self.taken_out and self.taken_out.get("was_serving")):
            return None
        ok, output = self.run(0, self.rotation.back(self.plans[0].scripts.directory))
        return None if ok else f"back in rotation failed: {script_cause(output)}"

    def decode_check(self):
        """Rank 0's decode check (it serves the API), when the profile has one: (None, or why
        it failed; its result line)."""
        command = self.plans[0].scripts.decode_check()
        if not command:
            return None, {}
        ok, output = self.run(0, command)
        self.decoded = found = result.parse(output.stdout_lines) or {}
        said = throughput.took_note(self.hosts[0].name, found)
        if said:
            self.say(said[0], fg={"warning": "yellow", "error": "red"}.get(said[1]))
        return (None if ok else f"{LABELS['decode']}: {script_cause(output)}"), found

    def remeasure(self, profile):
        """After a rollback, rank 0's restored decode rate, recorded under its own profile; it
        never fails the cycle."""
        command = self.plans[0].scripts.decode_check()
        if command and profile:
            found = result.parse(self.run(0, restored_decode(command, profile))[1].stdout_lines) or {}
            said = throughput.took_restored_note(
                self.hosts[0].name, {"restored_throughput": found.get("throughput")}
            )
            if said:
                self.say(said)
        return True

    def restore(self):
        ranks = [r for r in self.all_ranks() if self.hosts[r] not in self.state.failed_hosts]
        return self.on(ranks, lambda r: self.plans[r].scripts.restore_last_good())

    def restored(self):
        """Every member's last known good files back: (None, or why not; rank 0's result)."""
        found = self.restore()
        rank0 = found.get(0)
        return (
            self.first_failure(found, "restoring the last known good"),
            (result.parse(rank0[1].stdout_lines) or {}) if rank0 else {},
        )

    def roll_back(self):
        self.said_failure()
        self.say("rolling back every member to its last known good", fg="yellow")
        return self.restored()

    def recheck(self):
        """Rank 0 still the server its gate saw ready (gate.py --recheck): None, or why not."""
        ok, output = self.run(0, self.plans[0].scripts.recheck())
        return None if ok else f"{LABELS['recheck']} on rank 0 {self.hosts[0].name}: {script_cause(output)}"

    def record(self):
        def save(rank):
            paths = member_hook_paths(self.hosts[rank], self.plans[rank].hook_python) or {}
            return self.plans[rank].scripts.save_last_good(paths)

        commands = {rank: save(rank) for rank in self.all_ranks()}
        return self.first_failure(self.on(self.all_ranks(), commands.get), LABELS["save"])

    def stop(self):
        """Rank 0 first (the followers end without it: its broadcast, or the peer lost), then
        each follower's end, killed after stop_wait_s; None or why it failed."""
        started = time.monotonic()
        self.say(f"stopping rank 0 {self.hosts[0].name} first")
        ok, output = self.run(0, self.plans[0].scripts.stop())
        if not ok:
            return f"stopping rank 0 {self.hosts[0].name} failed: {script_cause(output)}"
        rank0_s = time.monotonic() - started
        self.say(
            f"rank 0 stopped in {rank0_s:.1f}s; the followers end on its shutdown "
            f"(killed after {self.stop_wait_s:g}s)"
        )
        found = self.on(self.followers, lambda r: self.plans[r].scripts.follower_stop(self.stop_wait_s))
        failure = self.first_failure(found, "stopping a follower")
        if failure:
            return failure
        for rank, (_, output) in sorted(found.items()):
            said = result.parse(output.stdout_lines) or {}
            if said.get("killed"):
                self.say(
                    f"{self.who(rank)} did not end on rank 0's shutdown: killed after {self.stop_wait_s:g}s",
                    fg="yellow",
                )
        # Port and GPU memory released on the followers too (nothing left to stop there).
        failure = self.first_failure(
            self.on(self.followers, lambda r: self.plans[r].scripts.stop(), print_output=False),
            "stopping a follower",
        )
        if failure:
            return failure
        self.say(
            f"group stopped in {time.monotonic() - started:.1f}s (rank 0 {rank0_s:.1f}s, "
            f"followers {time.monotonic() - started - rank0_s:.1f}s after it)"
        )
        return None

    def restart(self):
        """Stop, then start every member: None, or why not."""
        failure = self.stop()
        if failure:
            return failure
        self.say("starting every member")
        return self.first_failure(self.on(self.all_ranks(), lambda r: self.plans[r].scripts.start()), "start")

    def gate(self):
        """Rank 0's readiness gate (the served name, /ping, "fired up") while every follower's
        unit is watched: a follower that dies fails the gate at once, with its host and cause.
        A follower's own /health is a dummy that always answers 200: never readiness."""
        units = [plan.unit for plan in self.plans]
        base = {rank: unit_show(self.hosts[rank], units[rank]) for rank in self.followers}
        gating = gevent.spawn(self.run, 0, self.plans[0].scripts.gate())
        while not gating.ready():
            for rank in self.followers:
                ended = _ended(unit_show(self.hosts[rank], units[rank]), base[rank])
                if ended:
                    return self.follower_died(rank, ended, gating)
            gating.join(timeout=POLL_S)
        ok, output = gating.get()
        if not ok:
            why = f"rank 0 {self.hosts[0].name} failed its gate: {script_cause(output)}"
            missing = self.not_joined()
            return f"{missing}; {why}" if missing else why
        for rank in self.followers:
            ended = _ended(unit_show(self.hosts[rank], units[rank]), base[rank])
            if ended:
                return self.follower_died(rank, ended, gating)
        self.say(
            f"rank 0 {self.hosts[0].name} serves; followers "
            f"{', '.join(self.who(r) for r in self.followers)} running"
        )
        return None

    def not_joined(self):
        """Which follower never joined rank 0's rendezvous, from every member's journal of this
        start (node/group_join.py's reading), or None when the rendezvous is not the cause."""

        def journal(rank):
            ok, output = self.run(rank, self.plans[rank].scripts.journal(), print_output=False)
            return (result.parse(output.stdout_lines) or {}).get("lines") if ok else None

        profile = self.plans[0].profile
        found = group_join.assess(
            journal(0), len(self.hosts), profile.tp_size, {rank: journal(rank) for rank in self.followers}
        )
        if found["state"] in ("joined", "not-started") or not found["cause"]:
            return None
        if found["missing"]:
            return (
                ", ".join(self.who(rank) for rank in found["missing"])
                + f" never joined rank 0: {found['cause']}"
            )
        return found["cause"]

    def follower_died(self, rank, ended, gating):
        ok, output = self.run(rank, self.plans[rank].scripts.follower_cause())
        cause = (result.parse(output.stdout_lines) or {}).get("cause") or ended
        why = f"{self.who(rank)} died while the group started: {cause}"
        self.say(why, fg="red", error=True)
        self.stop()  # rank 0 (its gate ends with it), then what is left of the followers
        gating.join(timeout=30)
        return why
