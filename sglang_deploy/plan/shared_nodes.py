"""Several services on one node: inventory hosts with one SSH target (hostname and port), each
serving a profile of its own, e.g. hosts.yml entries `node1-a` and `node1-b` with the same
`ssh_hostname`, each with its `service.name` and `service.port`.

Each service's own, by default: its unit and env file (service.name), its port, its engine link
and venvs (profile/fields.py engine_home: so its venvs' start-up hook and their pruning), its
last known good and decode history (`<state_dir>/<service>/`), its deploy lock and restart
cycles (`<run_dir>/<service>*`), its workers' records (`/run/sglang-env/<service>/`), its
metrics textfiles. The node's one of a kind: our scripts, the OS packages, the wheelhouse and
uv, the hardware passport, the ACS unit (ordered before every service of the node), the node
exporter.

Checked here before any host is touched, naming both hosts and what they share: two services
of one node on one unit, port, engine link or venvs directory, both hooking the system
interpreter, disagreeing on the node's ACS unit or node exporter, or sharing a model directory
that one of them stages (swapped whole under every server reading it). And a deploy runs one
service of a node at a time: two in one run would run the node's own steps twice at once.

Pure functions of the inventory and the profiles; nothing here touches a host.
"""

from __future__ import annotations

from dataclasses import dataclass

from sglang_deploy.errors import DeployError
from sglang_deploy.plan.fleet import serves
from sglang_deploy.plan.model_sources import targets as staged_targets
from sglang_deploy.run_state import host_settings


def node_of(name, data) -> str:
    """The node a host is: its SSH target, ``hostname:port`` (unset: its name, 22)."""
    settings = host_settings(data, name)
    return f"{settings.ssh_hostname or name}:{settings.ssh_port or 22}"


@dataclass(frozen=True)
class Service:
    """What one host's service holds on its node."""

    host: str
    unit: str
    port: int
    link: str  # the engine link (engine.venv)
    venvs_dir: str
    system_hook: bool  # hook.system_wide: the system interpreter's start-up hook
    disable_acs: bool
    staged: tuple  # the model directories it stages
    models: tuple  # every model directory it reads
    exporter: int | None  # its node exporter's port; None: none


def service_of(name, data, profile) -> Service:
    settings = host_settings(data, name)
    return Service(
        host=name,
        unit=f"{profile.service.name}.service",
        port=profile.service.port,
        link=profile.engine.venv,
        venvs_dir=settings.engine_venvs_dir(profile.service.name),
        system_hook=profile.hook.system_wide,
        disable_acs=profile.pcie.disable_acs,
        staged=tuple(target.path for target in staged_targets(profile)),
        models=tuple(path for path in (profile.model.path, profile.draft_path) if path),
        exporter=settings.node_exporter_port if settings.node_exporter else None,
    )


def shared(hosts) -> dict:
    """{node: [host names]} of the nodes that serve several services (serving hosts only:
    routers and monitoring hosts keep paths of their own), in inventory order."""
    found: dict = {}
    for name, data in hosts:
        if serves(data):
            found.setdefault(node_of(name, data), []).append(name)
    return {node: names for node, names in found.items() if len(names) > 1}


def checked(hosts, profile_of, limited=None) -> dict:
    """{host name: the units of its node's services, its own among them} of every host on a
    node that serves several; DeployError naming both hosts when two services of one node
    share what is each one's, disagree on what is the node's, or are both in this run
    (``limited``: the names in this run; None: every host). ``profile_of(data)`` loads a host's
    profile."""
    by_name = dict(hosts)
    units = {}
    for node, names in shared(hosts).items():
        services = [service_of(name, by_name[name], profile_of(by_name[name])) for name in names]
        for i, a in enumerate(services):
            for b in services[i + 1 :]:
                why = conflict(a, b)
                if why:
                    raise DeployError(f"{a.host} and {b.host} are one node ({node}): {why}")
        in_run = [name for name in names if limited is None or name in limited]
        if len(in_run) > 1:
            raise DeployError(
                f"{' and '.join(in_run)} are one node ({node}): deploy one of them per run "
                f"({', then '.join(f'--limit {name}' for name in in_run)}): the node's own steps "
                "(OS packages, our scripts, wheelhouse, hardware passport, node exporter) would run "
                "twice at once"
            )
        for name in names:
            units[name] = tuple(sorted(service.unit for service in services))
    return units


def conflict(a: Service, b: Service) -> str | None:
    """Why services ``a`` and ``b`` cannot share a node (None: they can)."""
    if a.unit == b.unit:
        return (
            f"both run {a.unit}: give each profile its own service.name "
            '(e.g. profile_overrides: {"service": {"name": "sglang-b"}})'
        )
    if a.port == b.port:
        return f"both serve on port {a.port}: give each its own service.port"
    for what_a, path_a in (("engine link", a.link), ("venvs directory", a.venvs_dir)):
        for what_b, path_b in (("engine link", b.link), ("venvs directory", b.venvs_dir)):
            if path_a == path_b:
                return (
                    f"both have {path_a} as their {what_a}: leave engine.venv and venvs_dir unset "
                    "(each service gets its own), or give each its own"
                )
            if _within(path_a, path_b) or _within(path_b, path_a):
                return (
                    f"{a.host}'s {what_a} {path_a} and {b.host}'s {what_b} {path_b} overlap: leave "
                    "engine.venv and venvs_dir unset (each service gets its own), or give each its own"
                )
    if a.system_hook and b.system_hook:
        return "both put their start-up hook into the system interpreter (hook.system_wide): one at most"
    if a.disable_acs != b.disable_acs:
        return (
            "the node has one ACS unit, which one sets up and the other removes "
            "(pcie.disable_acs differs): set it alike"
        )
    for one, other in ((a, b), (b, a)):
        for path in one.staged:
            if any(path == model or _within(path, model) or _within(model, path) for model in other.models):
                return (
                    f"{one.host} stages the model directory {path}, which {other.host} reads too "
                    "(a staged directory is swapped whole under every server reading it): give each "
                    "its own model.path"
                )
    if a.exporter is not None and b.exporter is not None and a.exporter != b.exporter:
        return (
            f"the node has one node exporter, on node_exporter_port {a.exporter} for one and "
            f"{b.exporter} for the other: set it alike"
        )
    return None


def _within(path: str, directory: str) -> bool:
    return path.startswith(directory.rstrip("/") + "/")
