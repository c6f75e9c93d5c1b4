"""A fleet behind SGLang's router, computed on the controller: which hosts are routers, the
routers' settings (validated before anything changes), their systemd unit, the URLs routers and
nodes know each other by. The order of a rolling restart: sglang_deploy/rollout/.

The settings (``router_*``, ``rolling_*``), their defaults and checks are in
sglang_deploy/plan/settings/ (groups_fleet.py, groups_rollout.py); a router host is a host of
the inventory's ``routers`` group (its data has ``role: router``), a monitoring host one of its
``monitoring`` group (``role: monitoring``): neither serves.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sglang_deploy.errors import DeployError
from sglang_deploy.plan.locked_engine import LockedEngine, locked_router
from sglang_deploy.plan.locks import router_lock_problems, router_pins
from sglang_deploy.plan.router_flags import gateway_pin, pinned_options
from sglang_deploy.plan.settings import Router
from sglang_deploy.run_state import host_settings

ROUTERS_GROUP = "routers"
MONITORING_GROUP = "monitoring"
# The gateway's unit keeps the name it had when the gateway was called sglang-router (smg's
# former name), so hosts that ran it have one unit, replaced and restarted like any change.
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
    return host_settings(data).role == role


def address(data, name=None) -> str:
    """How other hosts reach this one: ``fleet_address``, else its SSH hostname."""
    settings = host_settings(data, name)
    return str(settings.fleet_address or settings.ssh_hostname or name)


@dataclass(frozen=True)
class RouterHost:
    """A router host as the fleet knows it: its settings as they are (``settings.router``), the
    address other hosts reach it at, and the lock its pins name."""

    name: str
    address: str
    settings: Router
    unit_dir: str  # where its unit is installed
    locked: LockedEngine = field(compare=False, repr=False)  # its lock and wheels

    @property
    def venv(self) -> str:
        """Named after the gateway's pin and what its lock installs (router_venv)."""
        return router_venv(self.settings.router_venvs_dir, self.locked)

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.settings.router_port}"

    @property
    def local_url(self) -> str:
        return f"http://127.0.0.1:{self.settings.router_port}"

    @property
    def metrics_url(self) -> str:
        """Its Prometheus exporter, as the nodes reach it (a canary's bake reads it there)."""
        return f"http://{self.address}:{self.settings.router_prometheus_port}/metrics"

    @property
    def probe_url(self) -> str | None:
        """Where /readiness is asked on the router host: its dedicated probe port, if any."""
        port = self.settings.router_health_check_port
        return f"http://127.0.0.1:{port}" if port else None


def router_host(name, data) -> RouterHost:
    """One router host from its host data; DeployError naming a bad setting (a gateway pin set
    without a lock among them)."""
    settings = host_settings(data, name)
    check_policy(name, settings.router_policy, settings.router_packages)
    return RouterHost(
        name=name,
        address=address(settings, name),
        settings=settings.router,
        unit_dir=settings.unit_dir,
        locked=router_locked(name, settings),
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
        keys = ("router_port", "router_prometheus_port", "router_health_check_port")
        ports = [(key, getattr(router.settings, key)) for key in keys if getattr(router.settings, key)]
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


def render_router_unit(router: RouterHost, worker_urls) -> str:
    """The router's systemd unit: what it runs is all here, so a changed setting or worker list
    is a changed unit (and a restart). The gateway and its flag names: plan/router_unit.py."""
    from sglang_deploy.plan.router_unit import render_unit

    return render_unit(router, worker_urls)
