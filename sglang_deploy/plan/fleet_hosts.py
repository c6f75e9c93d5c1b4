"""What one host of a fleet needs from the others: a router's unit (every serving node's URL),
a node's rotation (every router's URL, the rolling settings). Computed on the controller from
the whole inventory, so a ``--limit`` run still knows the fleet; bad settings fail here, before
any host is touched."""

from __future__ import annotations

from dataclasses import dataclass, field

from sglang_deploy.plan.commands import rotation_command, router_gate_command
from sglang_deploy.plan.fleet import (
    ROUTER_UNIT,
    RouterHost,
    address,
    check_ports,
    is_router,
    render_router_unit,
    router_host,
    serves,
    worker_url,
)
from sglang_deploy.plan.serving_group import profile_of, resolve
from sglang_deploy.plan.settings import Canary, RollingRestarts
from sglang_deploy.profile.schema import load_profile
from sglang_deploy.run_state import host_settings


def fleet_hosts(inventory):
    """[(name, data)] of every host of a pyinfra inventory (active or not)."""
    return [(host.name, host.data) for host in inventory]


def workers(hosts):
    """[(name, address, port)] of the serving nodes: every host that is not a router nor a
    monitoring host, nor a serving group's follower (rank 0 alone serves the group's API; a follower's /health is a
    dummy that always answers 200, so a router must never send it requests). The address is
    the node's cluster address, or the one its server is bound to (service.reached_at)."""
    members = resolve(hosts)
    found = []
    for name, data in hosts:
        if not serves(data) or (name in members and not members[name].is_leader):
            continue
        service = profile_of(data).service
        found.append((name, service.reached_at(address(data, name)), service.port))
    return found


def served_models(hosts):
    """{name: served model name} of every serving node (workers())."""
    names = {name for name, _, _ in workers(hosts)}
    found = {}
    for name, data in hosts:
        if name in names:
            profile = load_profile(data.get("profile"), overrides=data.get("profile_overrides") or None)
            found[name] = profile.model.served_name
    return found


def routers(hosts):
    return [router_host(name, data) for name, data in hosts if is_router(data)]


def checked_fleet(hosts):
    """(routers, workers), with ports checked against each other."""
    found_routers, found_workers = routers(hosts), workers(hosts)
    check_ports(
        found_routers, found_workers, {name: host_settings(data, name).ssh_port for name, data in hosts}
    )
    return found_routers, found_workers


@dataclass
class RouterPlan:
    router: RouterHost
    worker_urls: list
    unit_text: str

    @property
    def unit(self):
        return ROUTER_UNIT

    @property
    def locked(self):
        """The gateway's lock and its wheels (plan/locked_engine.py)."""
        return self.router.locked

    @property
    def unit_path(self):
        return f"{self.router.unit_dir}/{ROUTER_UNIT}"

    def gate(self, scripts_dir, timeout=None):
        timeout = float(self.router.settings.router_gate_timeout_s) if timeout is None else timeout
        return router_gate_command(
            scripts_dir, self.router.local_url, timeout, self.worker_urls, self.router.probe_url
        )


def router_plan(name, hosts) -> RouterPlan:
    found_routers, found_workers = checked_fleet(hosts)
    router = next(r for r in found_routers if r.name == name)
    urls = sorted(worker_url(addr, port) for _, addr, port in found_workers)
    return RouterPlan(
        router=router,
        worker_urls=urls,
        unit_text=render_router_unit(router, urls),
    )


@dataclass
class Rotation:
    """How one node leaves and rejoins rotation around its restart cycle."""

    worker_url: str
    local_port: int
    router_urls: list
    rolling: RollingRestarts  # the host's settings.rolling
    model: str = ""  # the served model's name (the first wave's "last serving node" rule)
    fleet_models: tuple = ()  # (name, model) of every serving node of the inventory
    drain_settle_s: int = 5  # seconds a router with a Draining state (smg) lists the node draining
    gateway_metrics: tuple = ()  # every router's exporter URL (a canary's bake reads the node's series)
    textfile: tuple = ()  # NodeScripts.textfile_flags(): rotation.py writes the in-rotation sample
    local_host: str = "127.0.0.1"  # where the node asks its own server (service.probe_host)
    auth: tuple = ()  # NodeScripts.api_key_args(): how rotation.py reads the server's API key
    canary: Canary = field(default_factory=Canary)  # the host's settings.canary

    def wrap(self, scripts_dir, cycle, restore):
        """rotation.py around the node's restart cycle (``cycle``: cycle.py's command line;
        ``restore``: lastgood.py restore's)."""
        return self._rotation(scripts_dir, "--cycle", cycle, "--restore", restore)

    def out(self, scripts_dir):
        """rotation.py's first half: out of every router and drained, nothing restarted (for a
        restart driven from the controller: a serving group's rank 0)."""
        return self._rotation(scripts_dir, "--only", "out")

    def back(self, scripts_dir):
        """rotation.py's second half: back in every router and healthy there."""
        return self._rotation(scripts_dir, "--only", "back")

    def _rotation(self, scripts_dir, *tail):
        args = [
            "--worker-url",
            self.worker_url,
            "--host",
            self.local_host,
            "--local-port",
            self.local_port,
            "--drain-timeout",
            self.rolling.rolling_drain_timeout_s,
            "--healthy-timeout",
            self.rolling.rolling_healthy_timeout_s,
            "--drain-settle",
            self.drain_settle_s,
        ]
        for url in self.router_urls:
            args += ["--router", url]
        if self.rolling.rolling_without_routers:
            args.append("--allow-unreachable-routers")
        return rotation_command(scripts_dir, *args, *self.textfile, *self.auth, *tail)


def rotation_for(name, data, hosts, port, textfile=(), auth=()) -> Rotation:
    found_routers, _ = checked_fleet(hosts)
    models = served_models(hosts)
    service = profile_of(data).service
    settings = host_settings(data)
    return Rotation(
        worker_url=worker_url(service.reached_at(address(data, name)), port),
        local_port=int(port),
        local_host=service.probe_host,
        router_urls=[r.url for r in found_routers],
        rolling=settings.rolling,
        canary=settings.canary,
        model=models.get(name, ""),
        fleet_models=tuple(sorted(models.items())),
        # The routers' longest: every router the node leaves lists it Draining that long.
        drain_settle_s=max((r.settings.router_drain_settle_s for r in found_routers), default=0),
        gateway_metrics=tuple(r.metrics_url for r in found_routers),
        textfile=tuple(textfile),
        auth=tuple(auth),
    )
