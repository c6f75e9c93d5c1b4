"""A fleet behind SGLang's router, computed on the controller: which hosts are routers, the
routers' settings (validated before anything changes), their systemd unit, the URLs routers and
nodes know each other by, and the order of a rolling restart.

The settings (``router_*``, ``rolling_*``), their defaults and checks are in
sglang_deploy/plan/settings.py; a router host is a host of the inventory's ``routers`` group
(its data has ``role: router``).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from sglang_deploy.errors import DeployError
from sglang_deploy.plan.settings import settings_of

ROUTERS_GROUP = "routers"
ROUTER_UNIT = "sglang-router.service"


def is_router(host) -> bool:
    """A pyinfra host (or a (name, data) pair's data) that is one of the fleet's routers."""
    groups = getattr(host, "groups", None)
    if groups is not None and any(getattr(g, "name", g) == ROUTERS_GROUP for g in groups):
        return True
    data = getattr(host, "data", host)
    return settings_of(data).role == "router"


def address(data, name=None) -> str:
    """How other hosts reach this one: ``fleet_address``, else its SSH hostname."""
    settings = settings_of(data, name)
    return str(settings.fleet_address or settings.ssh_hostname or name)


@dataclass(frozen=True)
class Rolling:
    batch: int
    max_failures: int
    drain_timeout_s: float
    healthy_timeout_s: float
    without_routers: bool  # roll even when a router does not answer


def rolling_settings(data) -> Rolling:
    """The run's rolling settings; DeployError naming the bad one."""
    settings = settings_of(data)
    return Rolling(
        batch=settings.rolling_batch,
        max_failures=settings.rolling_max_failures,
        drain_timeout_s=settings.rolling_drain_timeout_s,
        healthy_timeout_s=settings.rolling_healthy_timeout_s,
        without_routers=settings.rolling_without_routers,
    )


@dataclass(frozen=True)
class RouterSettings:
    name: str
    address: str
    bind: str
    port: int
    prometheus_port: int
    policy: str
    venv: str
    python: str
    packages: tuple
    find_links: str | None
    health_check_interval_s: int
    health_failure_threshold: int
    health_success_threshold: int
    health_check_timeout_s: int
    gate_timeout_s: float
    unit_dir: str  # where its unit is installed
    extra_args: tuple = field(default=())

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"

    @property
    def local_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def router_settings(name, data) -> RouterSettings:
    """One router's settings from its host data; DeployError naming the bad one."""
    settings = settings_of(data, name)
    return RouterSettings(
        name=name,
        address=address(settings, name),
        bind=settings.router_bind,
        port=settings.router_port,
        prometheus_port=settings.router_prometheus_port,
        policy=settings.router_policy,
        venv=settings.router_venv,
        python=settings.router_python,
        packages=tuple(settings.router_packages),
        find_links=settings.router_find_links,
        health_check_interval_s=settings.router_health_check_interval_s,
        health_failure_threshold=settings.router_health_failure_threshold,
        health_success_threshold=settings.router_health_success_threshold,
        health_check_timeout_s=settings.router_health_check_timeout_s,
        gate_timeout_s=float(settings.router_gate_timeout_s),
        unit_dir=settings.unit_dir,
        extra_args=tuple(settings.router_extra_args),
    )


def check_ports(routers, workers, ssh_ports) -> None:
    """A router's port must not be a worker's or another router's port on the same address,
    nor its host's SSH port. ``workers``: [(name, address, port)]; ``ssh_ports``: {name: port}."""
    taken = {(addr, port): f"{name}'s server port" for name, addr, port in workers}
    for router in routers:
        if router.port == router.prometheus_port:
            raise DeployError(f"{router.name}: router_port and router_prometheus_port are both {router.port}")
        for key_name, port in (
            ("router_port", router.port),
            ("router_prometheus_port", router.prometheus_port),
        ):
            key = (router.address, port)
            if port == ssh_ports.get(router.name):
                raise DeployError(f"{router.name}: {key_name} {port} is its SSH port")
            if key in taken:
                raise DeployError(
                    f"{router.name}: {key_name} {port} clashes with {taken[key]} on {router.address}"
                )
            taken[key] = f"router {router.name}'s {key_name}"


def worker_url(address_, port) -> str:
    return f"http://{address_}:{int(port)}"


def render_router_unit(router: RouterSettings, worker_urls) -> str:
    """The router's systemd unit: what it runs is all here, so a changed setting or worker list
    is a changed unit (and a restart)."""
    argv = [
        f"{router.venv}/bin/python",
        "-m",
        "sglang_router.launch_router",
        "--host",
        router.bind,
        "--port",
        str(router.port),
        "--policy",
        router.policy,
        "--prometheus-host",
        router.bind,
        "--prometheus-port",
        str(router.prometheus_port),
        "--health-check-endpoint",
        "/health",
        "--health-check-interval-secs",
        _num(router.health_check_interval_s),
        "--health-check-timeout-secs",
        _num(router.health_check_timeout_s),
        "--health-failure-threshold",
        str(router.health_failure_threshold),
        "--health-success-threshold",
        str(router.health_success_threshold),
        *router.extra_args,
    ]
    urls = sorted(worker_urls)
    if urls:
        argv += ["--worker-urls", *urls]
    exec_start = " ".join(shlex.quote(a) for a in argv)
    pins = ", ".join(router.packages)
    return (
        f"# Rendered by sglang-deploy: SGLang's router ({pins}) in front of "
        f"{len(urls)} worker(s).\n"
        "[Unit]\n"
        f"Description=SGLang router on port {router.port} ({router.policy})\n"
        "After=network-online.target\nWants=network-online.target\n\n"
        "[Service]\nType=simple\n"
        f"ExecStart={exec_start}\n"
        "Restart=on-failure\nRestartSec=2\n\n"
        "[Install]\nWantedBy=multi-user.target\n"
    )


def batches(names, size):
    """A rolling restart's batches: ``names`` in their order, ``size`` at a time (pyinfra's
    ``_parallel`` slices its active hosts the same way; router hosts, which have no restart,
    count in a slice, so a batch restarts at most ``size`` nodes)."""
    if size < 1:
        raise ValueError("batch size must be at least 1")
    names = list(names)
    return [names[i : i + size] for i in range(0, len(names), size)]


class Rollout:
    """One run's rolling restart, shared by every node's restart (pyinfra marks failed hosts
    only after all batches of an operation: stopping at the first failure needs this).

    A node may start while no more than ``max_failures`` nodes failed; after that the rollout
    is stopped and every later node keeps its previous configuration. ``notes`` says, per node,
    what it serves at the end."""

    def __init__(self, max_failures=0):
        self.max_failures = max_failures
        self.failures = []  # (node, why), in order
        self.done = []  # nodes restarted and back in rotation
        self.notes = {}  # node -> what it serves now (for the per-host report)

    def refusal(self, name):
        """Why ``name`` must not restart (the rollout stopped), or None."""
        if len(self.failures) > self.max_failures:
            first, why = self.failures[0]
            done = ", ".join(self.done) or "none"
            return f"rollout stopped at {first} ({why}); restarted before it: {done}"
        return None

    def failed(self, name, why):
        self.failures.append((name, why))

    def succeeded(self, name):
        self.done.append(name)

    def note(self, name, text):
        self.notes[name] = text


def _num(value):
    return str(int(value)) if float(value).is_integer() else str(value)
