"""The settings of what a serving node runs and where: the profile, serving groups, paths, the
OS, model staging and fan-out, deploys, engine venvs."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from sglang_deploy.plan.settings.values import Group, Port, Seconds
from sglang_deploy.profile.fields import AbsPath, Pin, engine_home


class WhatToServe(Group):
    """What to serve"""

    profile: str = Field(
        "baseline",
        min_length=1,
        description="The profile: a name under profiles/ or a path to a profile file.",
    )
    profile_overrides: dict[str, Any] = Field(
        {},
        description='Mapping deep-merged over the profile for this host, e.g. `{"service": {"port": 30001}}`.',
    )


class ServingGroups(Group):
    """Serving groups: one model on several nodes (sglang_deploy/plan/serving_group.py)"""

    serving_group: str | None = Field(
        None,
        description="Hosts with the same serving_group run one multi-node server (SGLang --nnodes, the "
        "profile's server_args.nnodes); unset: the host serves on its own.",
    )
    node_rank: int | None = Field(
        None,
        ge=0,
        description="The member's --node-rank; unset: the order of the group's hosts in the inventory (first: rank 0).",
    )
    cluster_address: str | None = Field(
        None,
        description="The host's address on the cluster network; rank 0's is the group's --dist-init-addr host "
        "(port: the profile's service.dist_init_port). Unset: its ssh_hostname.",
    )
    socket_ifname: str | None = Field(
        None,
        description="The host's cluster network interface: NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME in its env "
        "file (unset: NCCL and gloo pick one).",
    )
    group_follower_stop_s: Seconds = Field(
        20,
        description="Coordinated stop: rank 0 stops first and broadcasts the shutdown; a follower still running "
        "this many seconds after rank 0 is gone is killed (SGLang's followers ignore SIGTERM).",
    )


class NodePaths(Group):
    """Where things go on the node"""

    sglang_deploy_dir: AbsPath = Field(
        "/opt/sglang-deploy",
        description="On-node scripts (gate, restart, worker check), uploaded wheels, tool venvs.",
    )
    env_dir: AbsPath = Field(
        "/etc/sglang", description="Env files (root, 0700 directory, 0600 files): `<env_dir>/<service>.env`."
    )
    unit_dir: AbsPath = Field(
        "/etc/systemd/system", description="systemd units: `<unit_dir>/<service>.service`."
    )
    venvs_dir: AbsPath | None = Field(
        None,
        description="Engine venvs, one per pin set (named after its pins, wheels and Python version); the unit "
        "runs through the profile's engine.venv, a link the restart cycle points at one of them. Unset: the "
        "service's own, `/opt/sglang/venvs` for the service `sglang`, `/opt/sglang/services/<service>/venvs` "
        "for any other (the profile's service.name), so two services of one node share no venv.",
    )
    state_dir: AbsPath = Field(
        "/var/lib/sglang-deploy",
        description="Node-side state: the last configuration that passed the gate, per service.",
    )
    run_dir: AbsPath = Field(
        "/run/sglang-deploy",
        description="Runtime files of a deploy (lost on reboot): the deploy lock, units being verified, the "
        "readiness gate's report of the last start.",
    )

    def engine_venvs_dir(self, service: str) -> str:
        """Where the engine venvs of ``service`` (the profile's service.name) are: venvs_dir, or
        the service's own (profile/fields.py engine_home)."""
        return self.venvs_dir or f"{engine_home(service)}/venvs"


class TheOs(Group):
    """The OS"""

    os_packages: list[str] = Field(
        ["python3", "python3-venv", "pciutils", "rsync", "iproute2"],
        description="Debian/Ubuntu packages the recipe needs on the node, installed with apt when missing (the "
        "package index is refreshed only then): venvs, lspci/setpci for the ACS check and unit, rsync for "
        "copying files where both ends have it, `ss` for make verify's port check.",
    )


class ModelStaging(Group):
    """Model staging"""

    huggingface_hub_pin: Pin = Field(
        "huggingface_hub==2.4.0",
        description="Models with `source: {huggingface: ...}` are downloaded on the node by this huggingface_hub, "
        "in a venv of its own under sglang_deploy_dir (hf-venv), never the engine's.",
    )
    model_keep_previous: bool = Field(
        True,
        description="A new model is staged beside the served one and swapped in by the restart, after preflight; "
        "the old weights stay (`<dir>.sglang-deploy-previous`) until the new configuration is recorded as the "
        "last known good, so a rollback renames them back. That needs room for both copies (the new model's "
        "changed files): where the disk has not, staging is refused before anything is touched. `false` "
        "replaces the weights in place instead: the old ones are removed first when both do not fit, the new "
        "ones swapped in as soon as they are verified. Trade-off: no weight rollback (a rollback restarts the "
        "old configuration on the new weights), and a server that dies before the copy ends cannot start.",
    )


class Fanout(Group):
    """Fan-out: model directories and the engine wheelhouse passed node to node (sglang_deploy/plan/fanout.py)"""

    fanout: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Nodes that need the same model (or wheelhouse) copy it from each other in a tree, so the "
        "controller sends each byte once: rsync over SSH, the child pulling from a parent whose copy was "
        "verified against the manifest, with a per-run key the parent accepts for a read-only rrsync of that "
        "directory alone. `auto`: on when more than two nodes of the run need the same bytes; `off`: every "
        "node from the controller.",
    )
    fanout_degree: int = Field(
        2,
        ge=1,
        description="How many nodes the controller feeds at once, and how many children each node with a "
        "verified copy serves.",
    )
    fanout_ssh_port: Port | None = Field(
        None,
        description="The SSH port other nodes reach this one on (unset: its ssh_port, else 22); its address is "
        "fleet_address (else ssh_hostname).",
    )
    fanout_bwlimit_kib: int | None = Field(
        None, ge=1, description="rsync --bwlimit (KiB/s) of a copy between nodes; unset: none."
    )
    controller_bwlimit_kib: int | None = Field(
        None,
        ge=1,
        description="rsync --bwlimit (KiB/s) of every copy from the controller (model staging, fan-out roots): "
        "spare the controller's uplink; unset: none. Per-file uploads (no rsync on one end) are not limited.",
    )
    fanout_stall_timeout_s: int = Field(
        60,
        ge=1,
        description="A copy between nodes that moves no data this long (rsync --timeout) fails: the node "
        "copies from another source.",
    )


class Deploys(Group):
    """Deploys: the lock, rollback, repair"""

    deploy_lock_wait_s: float = Field(
        600,
        ge=0,
        description="One deploy at a time per node (and one rollout per fleet): how long a second deploy waits "
        "before it fails saying who holds the lock. The lock goes away with the deploy that holds it.",
    )
    rollback: bool = Field(
        True,
        description="When a new configuration fails its readiness gate, restore the last one that passed, restart "
        "on it and gate again (the deploy still fails). `--data rollback=false` leaves a failed node as it is, "
        "for debugging.",
    )
    repair: bool = Field(
        False,
        description="`make repair` (`--data repair=true`): force-reinstall the engine distributions whose installed "
        "files drifted from their wheels' RECORD (the profile's engine.drift_check), then restart.",
    )


class EngineVenvs(Group):
    """Engine venvs"""

    venvs_keep: int = Field(
        3,
        ge=0,
        description="How many engine venvs to keep (newest first); older ones go, but never the live one nor the "
        "last known good's, so rolling back an engine change needs no download.",
    )
    venv_min_free_gib: float = Field(
        2.0,
        ge=0,
        description="Free disk (GiB) that must remain beside the engine venvs: a new venv needs the live one's size "
        "plus this; preflight refuses before anything is built or stopped.",
    )
