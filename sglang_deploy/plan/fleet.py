"""A fleet behind SGLang's router, computed on the controller: which hosts are routers, the
routers' settings (validated before anything changes), their systemd unit, the URLs routers and
nodes know each other by, and the order of a rolling restart.

The settings (``router_*``, ``rolling_*``), their defaults and checks are in
sglang_deploy/plan/settings.py; a router host is a host of the inventory's ``routers`` group
(its data has ``role: router``), a monitoring host one of its ``monitoring`` group (``role:
monitoring``): neither serves.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sglang_deploy.errors import DeployError
from sglang_deploy.plan import rolling_sizes
from sglang_deploy.plan.locked_engine import LockedEngine, locked_router
from sglang_deploy.plan.locks import router_lock_problems, router_pins
from sglang_deploy.plan.router_flags import gateway_pin, pinned_options
from sglang_deploy.plan.settings import settings_of

ROUTERS_GROUP = "routers"
MONITORING_GROUP = "monitoring"
# One unit name whichever gateway runs (smg or sglang-router): moving a host from one to the
# other is a changed unit, replaced and restarted like any other change.
ROUTER_UNIT = "sglang-router.service"


def is_router(host) -> bool:
    """A pyinfra host (or a (name, data) pair's data) that is one of the fleet's routers."""
    return _has_role(host, ROUTERS_GROUP, "router")


def is_monitoring(host) -> bool:
    """A pyinfra host (or a host's data) that runs Prometheus over the fleet (plan/monitoring.py)."""
    return _has_role(host, MONITORING_GROUP, "monitoring")


def serves(host) -> bool:
    """A host that serves a profile: neither a router nor a monitoring host."""
    return not is_router(host) and not is_monitoring(host)


def _has_role(host, group, role) -> bool:
    groups = getattr(host, "groups", None)
    if groups is not None and any(getattr(g, "name", g) == group for g in groups):
        return True
    data = getattr(host, "data", host)
    return settings_of(data).role == role


def address(data, name=None) -> str:
    """How other hosts reach this one: ``fleet_address``, else its SSH hostname."""
    settings = settings_of(data, name)
    return str(settings.fleet_address or settings.ssh_hostname or name)


@dataclass(frozen=True)
class CanaryLimits:
    """What a canary may do worse than the nodes on the old configuration (report/canary.py)."""

    max_error_rate: float = 0.01
    max_ttft_regression_pct: float = 20.0
    max_decode_regression_pct: float = 10.0
    min_requests: int = 10
    require_gateway_metrics: bool = False  # unread gateway figures fail the bake (else: said)


@dataclass(frozen=True)
class Rolling:
    batch: int | str  # a count or a percentage of the run's serving nodes (plan/rolling_sizes.py)
    max_failures: int
    drain_timeout_s: float
    healthy_timeout_s: float
    without_routers: bool  # roll even when a router does not answer
    first_wave: bool = True  # nodes that serve nothing start together, before the others roll
    max_fail_percent: float | None = None  # set: replaces max_failures, of the run's nodes
    canary: int | str = 0  # a count or percentage; 0: no canary wave
    canary_bake_s: float = 300.0
    canary_limits: CanaryLimits = field(default_factory=CanaryLimits)

    def batch_of(self, fleet, noun="nodes") -> int:
        """rolling_batch for a run of ``fleet`` serving nodes (or groups); DeployError when a
        percentage rounds to none."""
        return rolling_sizes.batch_size(self.batch, fleet, noun)


def rolling_settings(data) -> Rolling:
    """The run's rolling settings; DeployError naming the bad one."""
    settings = settings_of(data)
    return Rolling(
        batch=settings.rolling_batch,
        max_failures=settings.rolling_max_failures,
        drain_timeout_s=settings.rolling_drain_timeout_s,
        healthy_timeout_s=settings.rolling_healthy_timeout_s,
        without_routers=settings.rolling_without_routers,
        first_wave=settings.rolling_first_wave,
        max_fail_percent=settings.rolling_max_fail_percent,
        canary=settings.rolling_canary,
        canary_bake_s=float(settings.rolling_canary_bake_s),
        canary_limits=CanaryLimits(
            max_error_rate=settings.rolling_canary_max_error_rate,
            max_ttft_regression_pct=settings.rolling_canary_max_ttft_regression_pct,
            max_decode_regression_pct=settings.rolling_canary_max_decode_regression_pct,
            min_requests=settings.rolling_canary_min_requests,
            require_gateway_metrics=settings.rolling_canary_require_gateway_metrics,
        ),
    )


@dataclass(frozen=True)
class RouterSettings:
    name: str
    address: str
    bind: str
    port: int
    prometheus_port: int
    policy: str
    venv: str  # named after the gateway's pin and what its lock installs
    python: str
    packages: tuple
    health_check_interval_s: int
    health_failure_threshold: int
    health_success_threshold: int
    health_check_timeout_s: int
    gate_timeout_s: float
    unit_dir: str  # where its unit is installed
    extra_args: tuple = field(default=())
    health_check_port: int | None = None  # smg's dedicated probe port
    retry: tuple = ()  # (max_retries, initial_backoff_ms, max_backoff_ms, multiplier, jitter)
    circuit_breaker: tuple = ()  # (failure_threshold, success_threshold, timeout_s, window_s)
    drain_settle_s: int = 5
    shutdown_grace_s: int = 60
    worker_startup_check_interval_s: int = 2
    locked: LockedEngine | None = field(default=None, compare=False, repr=False)  # its lock and wheels

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"

    @property
    def local_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        """Its Prometheus exporter, as the nodes reach it (a canary's bake reads it there)."""
        return f"http://{self.address}:{self.prometheus_port}/metrics"

    @property
    def probe_url(self) -> str | None:
        """Where /readiness is asked on the router host: its dedicated probe port, if any."""
        return f"http://127.0.0.1:{self.health_check_port}" if self.health_check_port else None


def router_settings(name, data) -> RouterSettings:
    """One router's settings from its host data; DeployError naming the bad one (a gateway pin
    set without a lock among them)."""
    settings = settings_of(data, name)
    packages = tuple(settings.router_packages)
    check_policy(name, settings.router_policy, packages)
    locked = router_locked(name, settings)
    return RouterSettings(
        name=name,
        address=address(settings, name),
        bind=settings.router_bind,
        port=settings.router_port,
        prometheus_port=settings.router_prometheus_port,
        policy=settings.router_policy,
        venv=router_venv(settings.router_venvs_dir, locked),
        python=settings.router_python,
        packages=packages,
        health_check_interval_s=settings.router_health_check_interval_s,
        health_failure_threshold=settings.router_health_failure_threshold,
        health_success_threshold=settings.router_health_success_threshold,
        health_check_timeout_s=settings.router_health_check_timeout_s,
        worker_startup_check_interval_s=settings.router_worker_startup_check_interval_s,
        gate_timeout_s=float(settings.router_gate_timeout_s),
        unit_dir=settings.unit_dir,
        extra_args=tuple(settings.router_extra_args),
        health_check_port=settings.router_health_check_port,
        retry=(
            settings.router_retry_max_retries,
            settings.router_retry_initial_backoff_ms,
            settings.router_retry_max_backoff_ms,
            settings.router_retry_backoff_multiplier,
            settings.router_retry_jitter_factor,
        ),
        circuit_breaker=(
            settings.router_cb_failure_threshold,
            settings.router_cb_success_threshold,
            settings.router_cb_timeout_s,
            settings.router_cb_window_s,
        ),
        drain_settle_s=settings.router_drain_settle_s,
        shutdown_grace_s=settings.router_shutdown_grace_s,
        locked=locked,
    )


def router_locked(name, settings) -> LockedEngine:
    """The router's lock (locks/) for its pin set and platform; DeployError when there is none
    or it does not hold the pins, naming the command that makes it."""
    pins = router_pins(
        settings.router_packages,
        settings.router_platform,
        settings.router_python_version,
        settings.router_install_from,
    )
    problems = router_lock_problems(pins)
    if problems:
        raise DeployError("\n".join(f"{name}: {problem}" for problem in problems))
    return locked_router(pins, settings.sglang_deploy_dir)


def check_policy(name, policy, packages) -> None:
    """DeployError unless ``policy`` is one of the pinned gateway version's --policy choices."""
    options = pinned_options(packages)
    known = options.choices.get(options.flag("policy"), ())
    if policy not in known:
        raise DeployError(
            f"{name}: router_policy: unknown policy {policy!r} "
            f"({options.distribution} {options.version} knows {', '.join(known)})"
        )


def router_venv(venvs_dir: str, locked: LockedEngine) -> str:
    """One venv per lock, named after the gateway's pin and what the lock installs (for the
    lock's Python, which the router step checks the host runs): a new pin or a re-lock builds
    beside the running router's venv, and the unit moves to it on restart."""
    dist, version = gateway_pin(locked.engine.packages)
    return f"{venvs_dir}/{locked.venv_name([f'{dist}=={version}'], locked.lock.header['python'])}"


def check_ports(routers, workers, ssh_ports) -> None:
    """A router's port must not be a worker's or another router's port on the same address,
    nor its host's SSH port. ``workers``: [(name, address, port)]; ``ssh_ports``: {name: port}."""
    taken = {(addr, port): f"{name}'s server port" for name, addr, port in workers}
    for router in routers:
        ports = [("router_port", router.port), ("router_prometheus_port", router.prometheus_port)]
        if router.health_check_port:
            ports.append(("router_health_check_port", router.health_check_port))
        for i, (key_name, port) in enumerate(ports):
            same = next((other for other, p in ports[:i] if p == port), None)
            if same:
                raise DeployError(f"{router.name}: {same} and {key_name} are both {port}")
        for key_name, port in ports:
            key = (router.address, port)
            if port == ssh_ports.get(router.name):
                raise DeployError(f"{router.name}: {key_name} {port} is its SSH port")
            if key in taken:
                raise DeployError(
                    f"{router.name}: {key_name} {port} clashes with {taken[key]} on {router.address}"
                )
            taken[key] = f"router {router.name}'s {key_name}"


def worker_url(address_, port) -> str:
    host = f"[{address_}]" if ":" in str(address_) else address_
    return f"http://{host}:{int(port)}"


def render_router_unit(router: RouterSettings, worker_urls) -> str:
    """The router's systemd unit: what it runs is all here, so a changed setting or worker list
    is a changed unit (and a restart). The gateway and its flag names: plan/router_unit.py."""
    from sglang_deploy.plan.router_unit import render_unit

    return render_unit(router, worker_urls)


def batches(names, size):
    """A rolling restart's batches: ``names`` in their order, ``size`` at a time (pyinfra's
    ``_parallel`` slices its active hosts the same way; router hosts, which have no restart,
    count in a slice, so a batch restarts at most ``size`` nodes)."""
    if size < 1:
        raise ValueError("batch size must be at least 1")
    names = list(names)
    return [names[i : i + size] for i in range(0, len(names), size)]


def idle_reason(unit, view, with_routers) -> str | None:
    """Why a node serves nothing, from what was read before any restart (``unit``: UnitState;
    ``view``: facts/fleet.ServingView, None when unread); None when it serves, or may: a router
    that did not answer, or nothing read, leaves the node with the ones that roll."""
    active = unit.get("ActiveState")
    if unit.get("LoadState") == "not-found" or (view and not view.get("last_good") and active != "active"):
        return "not installed"  # no configuration ever passed its gate here
    if active == "failed" or unit.get("SubState") == "auto-restart":
        return "unit failed"
    if active in ("inactive", "deactivating"):
        return "unit stopped"
    if view is None:
        return None
    if with_routers:
        seen = (view.get("routers") or {}).values()
        if seen and all(state in ("absent", "unhealthy") for state in seen):
            return "not healthy in any router"
        return None
    return None if view.get("ping") else "not answering /ping"


def by_host_name(name):
    """A sort key that puts node2 before node10: the order the run's output says waves in (pyinfra
    lists active hosts as they connected, which differs between runs)."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


@dataclass(frozen=True)
class NodeFacts:
    """One node of a restart, as read before any restart: ``idle`` says why it serves nothing
    (idle_reason), None when it serves."""

    name: str
    model: str
    idle: str | None = None


@dataclass(frozen=True)
class Waves:
    """A restart's order: ``first`` start together (they serve nothing: ``idle`` says why),
    then ``batches`` one after the other."""

    first: tuple = ()
    batches: tuple = ()
    idle: tuple = ()  # (name, why) of every node that serves nothing
    cut: tuple = ()  # models whose nodes a batch was cut for, so one stays in rotation
    size: int = 1
    canary: tuple = ()  # the canary wave (also batches[0]): restarted, baked, compared

    def wave_of(self, name) -> int:
        """0 for the first wave, 1 for the first batch, ..."""
        if name in self.first:
            return 0
        return 1 + next(i for i, names in enumerate(self.batches) if name in names)

    def lines(self) -> list:
        """What the run's output says of the order."""
        why = dict(self.idle)
        said = []
        if self.first:
            reasons = ", ".join(f"{name} {why[name]}" for name in self.first)
            together = "starts" if len(self.first) == 1 else "start together"
            said.append(f"first wave (serving nothing: {reasons}): {', '.join(self.first)} {together}")
        elif self.idle:
            said.append(
                "no first wave (rolling_first_wave: false): serving nothing, rolled like the others: "
                + ", ".join(f"{name} {reason}" for name, reason in self.idle)
            )
        batches = self.batches[1:] if self.canary else self.batches
        if self.canary:
            said.append(
                ("then " if self.first else "")
                + f"canary wave: {', '.join(self.canary)} alone, then a bake compared with the nodes "
                "still on the old configuration"
            )
        if batches:
            said.append(
                ("then rolling" if self.first or self.canary else "rolling")
                + f" {self.size} at a time: "
                + " | ".join(", ".join(names) for names in batches)
                + (f" (batches cut so {', '.join(self.cut)} keep(s) a node in rotation)" if self.cut else "")
            )
        return said


def plan_waves(nodes, batch, first_wave=True, others=None, canary=0) -> Waves:
    """The order of a restart over ``nodes`` (NodeFacts, in pyinfra's order): the nodes that
    serve nothing in a first wave (they have no capacity to protect), then ``canary`` serving
    nodes alone (a canary wave, when above 0), then the serving ones ``batch`` at a time. No
    batch takes the last node serving a model out of rotation while that model has another
    node: ``others`` {model: nodes of it in the fleet that do not restart here (counted as
    serving)}; a first-wave node of the model counts too, as it serves before the batches start
    (the rollout refuses a later node when it did not: last_in_rotation). Every canary's model
    keeps a node on the old configuration in a later batch to be compared with, or DeployError.
    With ``first_wave`` false, every node rolls in batches, as before there was a first wave."""
    if batch < 1:
        raise ValueError("batch size must be at least 1")
    others = others or {}
    nodes = list(nodes)
    first = [n for n in nodes if n.idle] if first_wave else []
    pending = [n for n in nodes if n not in first]
    serving = {}
    for n in nodes:
        if n.idle is None or n in first:
            serving[n.model] = serving.get(n.model, 0) + 1

    def darkens(names):
        for model in {n.model for n in names}:
            out = sum(1 for n in names if n.model == model and n.idle is None)
            total = serving.get(model, 0) + others.get(model, 0)
            if out and total > 1 and out >= total:
                return model
        return None

    cut = []

    def take(size, eligible=lambda node: True):
        current = []
        for node in list(pending):
            if len(current) == size:
                break
            if not eligible(node):
                continue
            model = darkens([*current, node])
            if model:
                if model not in cut:
                    cut.append(model)
                continue
            current.append(node)
            pending.remove(node)
        return tuple(n.name for n in current)

    batches = []
    canaries = take(canary, lambda node: node.idle is None) if canary else ()
    if canaries:
        batches.append(canaries)
        _check_comparable(canaries, nodes, pending)
    while pending:
        batches.append(take(batch))
    waves = Waves(
        first=tuple(n.name for n in first),
        batches=tuple(batches),
        idle=tuple((n.name, n.idle) for n in nodes if n.idle),
        cut=tuple(cut),
        size=batch,
        canary=canaries,
    )
    check_waves(waves, nodes, others)
    return waves


def _check_comparable(canaries, nodes, later):
    """DeployError when a canary's model has no serving node left on the old configuration
    (in a later batch) to compare the canary with."""
    models = {n.name: n.model for n in nodes}
    for model in dict.fromkeys(models[name] for name in canaries):
        if not any(n.model == model and n.idle is None for n in later):
            mine = ", ".join(name for name in canaries if models[name] == model)
            raise DeployError(
                f"rolling_canary: refused: canary {mine} would leave no node serving {model} on the old "
                "configuration to compare with (lower rolling_canary, or add nodes of that model to the run)"
            )


def check_waves(waves, nodes, others=None) -> None:
    """DeployError when a wave would take the last node serving a model out of rotation while
    the model has another node: the first wave may hold only nodes that serve nothing, and no
    batch every node that serves a model of several nodes."""
    others = others or {}
    facts = {n.name: n for n in nodes}
    serving = [n for n in nodes if n.idle is None]
    busy = [name for name in waves.first if facts[name].idle is None]
    if busy:
        raise DeployError(f"refused: {', '.join(busy)} serve(s): not in a first wave, which nothing drains")
    for names in waves.batches:
        for model in {facts[name].model for name in names}:
            ours = [n.name for n in serving if n.model == model]
            total = (
                len(ours)
                + others.get(model, 0)
                + sum(1 for name in waves.first if facts[name].model == model)
            )
            out = [name for name in names if name in ours]
            if out and total > 1 and len(out) >= total:
                raise DeployError(
                    f"refused: restarting {', '.join(out)} together would take every node serving "
                    f"{model} out of rotation"
                )


def last_in_rotation(name, nodes, waves, done, failed, others=None) -> str | None:
    """Why ``name`` must not leave rotation now: every other node of its model is out (failed
    in this run, or a first-wave node that never came up) while the model has several; None
    when another one serves. ``done``/``failed``: names restarted and back / failed so far."""
    others = others or {}
    facts = {n.name: n for n in nodes}
    me = facts.get(name)
    if me is None or me.idle is not None:
        return None  # serves nothing: takes nothing out of rotation
    mine = waves.wave_of(name)
    peers = [n for n in nodes if n.model == me.model and n.name != name]
    if not peers or others.get(me.model, 0):
        return None
    for peer in peers:
        if peer.name in done:
            return None
        if peer.idle is None and peer.name not in failed and waves.wave_of(peer.name) != mine:
            return None
    out = ", ".join(p.name for p in peers)
    return f"it is the last node serving {me.model} in rotation ({out} not serving)"


class Rollout:
    """One run's rolling restart, shared by every node's restart (pyinfra marks failed hosts
    only after all batches of an operation: stopping at the first failure needs this).

    A node may start while no more than ``max_failures`` nodes failed (with
    ``max_fail_percent``: while failed nodes are no more than that percentage of the run's
    ``size`` nodes); after that, or once ``stop`` was called (a canary failed its bake), the
    rollout is stopped and every later node keeps its previous configuration. ``notes`` says,
    per node, what it serves at the end."""

    def __init__(self, max_failures=0, max_fail_percent=None, size=0):
        self.max_failures = max_failures
        self.max_fail_percent = max_fail_percent
        self.size = size  # nodes (and groups) of the run's restart, once known
        self.failures = []  # (node, why), in order
        self.done = []  # nodes restarted and back in rotation
        self.notes = {}  # node -> what it serves now (for the per-host report)
        self.stopped = None  # why the rollout stopped other than by failures (a canary's bake)

    def refusal(self, name):
        """Why ``name`` must not restart (the rollout stopped), or None."""
        if self.stopped:
            return f"rollout stopped: {self.stopped}"
        if rolling_sizes.too_many_failures(
            len(self.failures), self.size, self.max_failures, self.max_fail_percent
        ):
            first, why = self.failures[0]
            done = ", ".join(self.done) or "none"
            limit = (
                f"; more than {self.max_fail_percent:g}% of {self.size} nodes failed"
                if self.max_fail_percent is not None
                else ""
            )
            return f"rollout stopped at {first} ({why}){limit}; restarted before it: {done}"
        return None

    def stop(self, why):
        self.stopped = self.stopped or why

    def failed(self, name, why):
        self.failures.append((name, why))

    def succeeded(self, name):
        self.done.append(name)

    def note(self, name, text):
        self.notes[name] = text


def _num(value):
    return str(int(value)) if float(value).is_integer() else str(value)
