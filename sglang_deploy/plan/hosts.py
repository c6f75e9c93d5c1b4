"""Hosts for pyinfra inventories and testinfra, from one place.

Two sources, one shape: a list of ``(name, data)`` pairs where ``data`` is host data: pyinfra's
``ssh_*`` keys plus settings (sglang_deploy/plan/settings/), ``profile`` and others:

- ``gpu_hosts()`` reads the operator's hosts file (``inventory/hosts.yml`` or
  ``$SGLANG_DEPLOY_HOSTS``), documented in ``inventory/hosts.example.yml``;
- ``sandbox_hosts()`` reads the state the sandbox tool writes (``$SANDBOX_DIR/state.json``,
  ``.sandbox/state.json`` by default).
"""

from __future__ import annotations

import json
import os
import runpy
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sglang_deploy.errors import DeployError
from sglang_deploy.plan.settings import FIELDS, FLEET_KEYS, check_keys, validate
from sglang_deploy.profile.loader import OVERRIDES, read_yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
HOSTS_FILE_VAR = "SGLANG_DEPLOY_HOSTS"
DEFAULT_HOSTS_FILE = REPO_ROOT / "inventory" / "hosts.yml"
GROUP_DATA_ALL = REPO_ROOT / "group_data" / "all.py"
SANDBOX_PROFILE = "sandbox"
# Per-node profiles for the sandbox, e.g. "node1=sandbox,node2=sandbox-eagle3".
SANDBOX_PROFILES_VAR = "SGLANG_DEPLOY_SANDBOX_PROFILES"
# Serving groups of sandbox nodes, rank 0 first, e.g. "g1=node1+node2" (several: "a=...,b=...").
SANDBOX_GROUPS_VAR = "SGLANG_DEPLOY_SANDBOX_GROUPS"
# Sandbox nodes share the controller's network: a group's --dist-init-addr port is rank 0's
# server port plus this, so it never meets another node's ports.
SANDBOX_DIST_INIT_OFFSET = 1000
# ... and a node exporter's port is its server port minus this.
SANDBOX_EXPORTER_OFFSET = 2000
SANDBOX_PROBE_OFFSET = 3000  # a router's health-check (probe) port, below its server port


class HostsFile(BaseModel):
    """The sections of a hosts file; each entry is host data, checked against the settings
    (sglang_deploy/plan/settings/) and pyinfra's own keys."""

    model_config = ConfigDict(extra="forbid")

    # Applied to every host (a host's own keys win); routers get its ssh_* keys only.
    defaults: dict[str, Any] = Field(default_factory=dict)
    hosts: dict[str, dict[str, Any] | None]
    routers: dict[str, dict[str, Any] | None] = Field(default_factory=dict)
    # Hosts that run Prometheus over the fleet (the `monitoring` group); like routers, they get
    # the defaults' ssh_* keys only.
    monitoring: dict[str, dict[str, Any] | None] = Field(default_factory=dict)
    # Settings of the whole fleet, for every host: the router_* and rolling_* ones.
    fleet: dict[str, Any] = Field(default_factory=dict)


def hosts_file_path() -> Path:
    return Path(os.environ.get(HOSTS_FILE_VAR) or DEFAULT_HOSTS_FILE)


def gpu_hosts(path: Path | None = None) -> list[tuple[str, dict]]:
    """Hosts from the operator's hosts file; DeployError (no traceback) when unusable."""
    return _read_hosts_file(path)[0]


def gpu_routers(path: Path | None = None) -> list[tuple[str, dict]]:
    """The hosts file's routers (its `routers:` section), as the `routers` group."""
    return _read_hosts_file(path)[1]


def gpu_monitoring(path: Path | None = None) -> list[tuple[str, dict]]:
    """The hosts file's monitoring hosts (its `monitoring:` section), as the `monitoring` group."""
    return _read_hosts_file(path)[2]


def _read_hosts_file(path):
    path = Path(path or hosts_file_path())
    if not path.is_file():
        raise DeployError(
            f"hosts file {path} not found: copy inventory/hosts.example.yml to "
            f"inventory/hosts.yml, or point ${HOSTS_FILE_VAR} at yours"
        )
    # Read as profiles are (profile/loader.py): a host written twice is refused naming both
    # lines, not dropped; profile_overrides' env and server_args keep what YAML 1.1 would
    # rewrite (0755, 12.10) as written.
    raw = read_yaml(path, as_written_under=OVERRIDES) or {}
    try:
        parsed = HostsFile.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        if first["type"] == "extra_forbidden" and len(first["loc"]) == 1:
            check_keys({first["loc"][0]: None}, str(path), known=tuple(HostsFile.model_fields))
        raise DeployError(f"{path}: {where}: {first['msg']}") from None
    if not parsed.hosts:
        raise DeployError(f"{path}: no hosts listed under 'hosts:'")
    _check_fleet(parsed.fleet, path)
    defaults = _entry(parsed.defaults, path, "defaults")
    hosts = []
    for name, entry in parsed.hosts.items():
        data = {**defaults, **_entry(entry, path, f"hosts.{name}")}
        data.setdefault("ssh_hostname", name)
        hosts.append((name, {**parsed.fleet, **data}))
    # How to log in and become root, too: sudo and pyinfra's `_` keys (`_sudo`, `_sudo_user`, ...).
    ssh_defaults = {k: v for k, v in defaults.items() if k.startswith(("ssh_", "_")) or k == "sudo"}
    routers = []
    for name, entry in parsed.routers.items():
        if name in parsed.hosts:
            raise DeployError(f"{path}: routers: {name} is also under hosts")
        data = {**ssh_defaults, **_entry(entry, path, f"routers.{name}")}
        data.setdefault("ssh_hostname", name)
        routers.append((name, {**parsed.fleet, **data, "role": "router"}))
    monitoring = []
    for name, entry in parsed.monitoring.items():
        if name in parsed.hosts or name in parsed.routers:
            raise DeployError(f"{path}: monitoring: {name} is also under hosts or routers")
        data = {**ssh_defaults, **_entry(entry, path, f"monitoring.{name}")}
        data.setdefault("ssh_hostname", name)
        monitoring.append((name, {**data, "role": "monitoring"}))
    return hosts, routers, monitoring


def _entry(entry, path, section) -> dict:
    """One host's keys as given (unset ones left out), once each is known and its value valid;
    ``sudo`` given as pyinfra takes it too (``_sudo``)."""
    data = {key: value for key, value in (entry or {}).items() if value is not None}
    return with_sudo(data, validate(data, str(path), path=f"{section}.").sudo, f"{path}: {section}")


def with_sudo(data: dict, sudo: bool, where: str) -> dict:
    """``data`` with pyinfra's ``_sudo`` set as its ``sudo`` setting says (when it sets one);
    DeployError when both are set and disagree."""
    if "sudo" not in data:
        return data
    if "_sudo" in data and bool(data["_sudo"]) != sudo:
        raise DeployError(f"{where}: sudo: {data['sudo']!r} and _sudo: {data['_sudo']!r} disagree (set one)")
    return {**data, "_sudo": sudo}


def check_sudo_applies(data, sudo_everywhere=False) -> None:
    """DeployError when the ``sudo`` setting is on where pyinfra does not read it as its
    ``_sudo`` (set through ``--data`` or group data): the run would log in without sudo and fail
    on the first root-only file, or worse, half-way."""
    if (
        sudo_everywhere
        or data.get("_sudo")
        or not data.get("sudo")
        or str(data.get("sudo")).lower() == "false"
    ):
        return
    raise DeployError(
        "sudo: true is set where pyinfra does not read it (--data or group data): use pyinfra's "
        "--sudo, or `sudo: true` for the host in inventory/hosts.yml"
    )


def _check_fleet(fleet, path) -> None:
    for key in fleet:
        if key in FIELDS and key not in FLEET_KEYS:
            raise DeployError(
                f"{path}: fleet.{key}: only rolling_* and router_* settings belong here "
                "(per host: under defaults or hosts; docs/settings.md)"
            )
    check_keys(fleet, str(path), known=FLEET_KEYS, path="fleet.")
    validate(fleet, str(path), path="fleet.")


def sandbox_state_file() -> Path:
    """The sandbox tool's state file: in $SANDBOX_DIR (a sandbox of several side by side), else
    in the repository's .sandbox/, as sandbox/sandbox.py writes it."""
    return Path(os.environ.get("SANDBOX_DIR") or REPO_ROOT / ".sandbox") / "state.json"


def sandbox_hosts(state_file: Path | None = None) -> list[tuple[str, dict]]:
    """Sandbox nodes as pyinfra hosts; each serves on its own port (shared network)."""
    state_file = Path(state_file or sandbox_state_file())
    if not state_file.is_file():
        raise DeployError(f"no sandbox nodes: {state_file} is missing (run `make sandbox`)")
    state = json.loads(state_file.read_text())
    chosen = _profile_choices(os.environ.get(SANDBOX_PROFILES_VAR, ""))
    groups = _group_choices(os.environ.get(SANDBOX_GROUPS_VAR, ""))
    ports = {node["name"]: node["server_port"] for node in state["nodes"]}
    hosts = []
    for node in state["nodes"]:
        if node.get("role") in ("router", "monitoring"):
            continue
        service = {"port": node["server_port"]}
        group = groups.get(node["name"])
        if group:
            # The group's members share rank 0's dist-init port (a group runs one profile).
            service["dist_init_port"] = ports[group[1][0]] + SANDBOX_DIST_INIT_OFFSET
        hosts.append(
            (
                node["name"],
                {
                    **_sandbox_ssh(node, state["key"]),
                    "profile": chosen.get(node["name"], SANDBOX_PROFILE),
                    "profile_overrides": {"service": service},
                    **sandbox_exporter(node, state),
                    **(
                        {
                            "serving_group": group[0],
                            "node_rank": group[1].index(node["name"]),
                            "cluster_address": node["ssh_host"],
                        }
                        if group
                        else {}
                    ),
                },
            )
        )
    return hosts


def sandbox_routers(state_file: Path | None = None) -> list[tuple[str, dict]]:
    """Sandbox nodes recorded with role router (`sandbox.py up --routers N`): SGLang's router
    on the node's server port, installed from its lock's wheels, which `make router-wheels`
    downloads on the controller (the nodes have no internet)."""
    state_file = Path(state_file or sandbox_state_file())
    if not state_file.is_file():
        return []
    state = json.loads(state_file.read_text())
    return [
        (
            node["name"],
            {
                **_sandbox_ssh(node, state["key"]),
                "role": "router",
                "router_port": node["server_port"],
                # Nodes share the host's network: each router its own exporter port.
                "router_prometheus_port": node["server_port"] - 1000,
                "router_health_check_port": node["server_port"] - SANDBOX_PROBE_OFFSET,
                **sandbox_exporter(node, state),
            },
        )
        for node in state["nodes"]
        if node.get("role") == "router"
    ]


def sandbox_monitoring(state_file: Path | None = None) -> list[tuple[str, dict]]:
    """Sandbox nodes recorded with role monitoring (`sandbox.py up --monitoring N`): Prometheus
    on the node's server port, from Debian's packages (the nodes reach its mirror)."""
    state_file = Path(state_file or sandbox_state_file())
    if not state_file.is_file():
        return []
    state = json.loads(state_file.read_text())
    return [
        (
            node["name"],
            {
                **_sandbox_ssh(node, state["key"]),
                "role": "monitoring",
                "prometheus_port": node["server_port"],
                **sandbox_exporter(node, state),
            },
        )
        for node in state["nodes"]
        if node.get("role") == "monitoring"
    ]


def sandbox_exporter(node, state) -> dict:
    """A sandbox node's node exporter settings: on its own port, and only in a sandbox with a
    monitoring node (nothing else reads it; the other sandboxes boot and deploy without it)."""
    monitored = any(other.get("role") == "monitoring" for other in state["nodes"])
    return {"node_exporter": monitored, "node_exporter_port": sandbox_exporter_port(node)}


def sandbox_exporter_port(node) -> int:
    """Sandbox nodes share the host's network: each node exporter its own port (a router's
    exporter is 1000 below its server port, a group's dist-init port 1000 above)."""
    return node["server_port"] - SANDBOX_EXPORTER_OFFSET


def _sandbox_ssh(node, key) -> dict:
    """How pyinfra reaches a sandbox node: as root, or as the login user with sudo of a node
    recorded with ``"sudo": true`` (`sandbox.py up --sudo-user`)."""
    return {
        "ssh_hostname": node["ssh_host"],
        "ssh_port": node["ssh_port"],
        "ssh_user": node["ssh_user"],
        "ssh_key": key,
        # Throwaway nodes get new host keys on every rebuild.
        "ssh_strict_host_key_checking": "off",
        "ssh_known_hosts_file": "/dev/null",
        **({"sudo": True, "_sudo": True} if node.get("sudo") else {}),
    }


def _group_choices(spec: str) -> dict[str, tuple[str, list[str]]]:
    """Parse "g1=node1+node2" into {"node1": ("g1", ["node1", "node2"]), "node2": ...}."""
    found = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, sep, members = item.partition("=")
        nodes = [node.strip() for node in members.split("+") if node.strip()]
        if not sep or not name or not nodes:
            raise DeployError(f"${SANDBOX_GROUPS_VAR}: expected GROUP=NODE+NODE..., got {item!r}")
        for node in nodes:
            found[node] = (name, nodes)
    return found


def _profile_choices(spec: str) -> dict[str, str]:
    """Parse "node1=a,node2=b" into {"node1": "a", "node2": "b"}."""
    choices = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, sep, profile = item.partition("=")
        if not sep or not name or not profile:
            raise DeployError(f"${SANDBOX_PROFILES_VAR}: expected NODE=PROFILE, got {item!r}")
        choices[name] = profile
    return choices


def deploy_defaults(path: Path = GROUP_DATA_ALL) -> dict:
    """Group `all`'s data as pyinfra reads it from group_data/all.py: every setting's default
    (sglang_deploy/plan/settings/) and any the site set there; DeployError for a key there
    that is no setting, or a bad value."""
    values = {key: value for key, value in runpy.run_path(str(path)).items() if not key.startswith("_")}
    validate(values, _display(path))
    return values


def _display(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def inventory_hosts(inventory_file) -> list[tuple[str, dict]]:
    """(name, data) pairs of every host group a pyinfra inventory file defines, with the
    defaults of group_data/all.py under each host's own data (as pyinfra layers them)."""
    defaults = deploy_defaults()
    namespace = runpy.run_path(str(REPO_ROOT / inventory_file))
    hosts = []
    for value in namespace.values():
        if isinstance(value, list) and all(isinstance(h, tuple) and len(h) == 2 for h in value):
            hosts.extend((name, {**defaults, **data}) for name, data in value)
    return hosts


def testinfra_host(data):
    """A testinfra host (paramiko over SSH) for a host's data."""
    import warnings

    import testinfra

    if data.get("ssh_known_hosts_file") == "/dev/null":
        # Throwaway nodes (the sandbox) get new host keys on every rebuild.
        warnings.filterwarnings("ignore", "Unknown ssh-ed25519 host key", UserWarning)

    url = f"paramiko://{data.get('ssh_user', 'root')}@{data['ssh_hostname']}:{data.get('ssh_port', 22)}"
    # A sudo login reads root's files (the env file, the units) through sudo, as the deploy does.
    sudo = bool(data.get("_sudo") or data.get("sudo"))
    return testinfra.get_host(url, ssh_identity_file=data.get("ssh_key"), sudo=sudo)


def ssh_argv(name, data, command, connect_timeout=10):
    """ssh with the inventory's connection data (BatchMode: never prompt)."""
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR", "-o", f"ConnectTimeout={connect_timeout}"]
    if data.get("ssh_key"):
        argv += ["-i", str(data["ssh_key"]), "-o", "IdentitiesOnly=yes"]
    if data.get("ssh_port"):
        argv += ["-p", str(data["ssh_port"])]
    if data.get("ssh_known_hosts_file") == "/dev/null":
        argv += ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
    target = data.get("ssh_hostname", name)
    if data.get("ssh_user"):
        target = f"{data['ssh_user']}@{target}"
    return argv + [target, command]
