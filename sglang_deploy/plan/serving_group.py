"""Serving groups: hosts that serve one model together (multi-node tensor parallelism).

An operator puts the hosts of one multi-node server in a group with host data (documented in
inventory/hosts.example.yml; the settings in sglang_deploy/plan/settings/groups_node.py):

    serving_group: NAME     hosts with the same NAME run one server (SGLang --nnodes)
    node_rank: R            optional: the host's --node-rank; without it, the order of the
                            group's hosts in the inventory (the first listed is rank 0)
    cluster_address: ADDR   the host's address on the cluster network; rank 0's is the group's
                            --dist-init-addr host (default: its ssh_hostname, else its name)
    socket_ifname: IFACE    NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME on this host

Every member runs the same profile, whose `server_args.nnodes` is the group's size; the port of
--dist-init-addr is the profile's `service.dist_init_port`. Rank 0 alone serves the API; the
others follow it (docs/architecture.md, "Serving groups").

Pure functions of the inventory and the profiles; nothing here touches a host.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sglang_deploy.errors import DeployError
from sglang_deploy.run_state import host_settings


@dataclass(frozen=True)
class Member:
    """One host's place in its serving group."""

    group: str
    host: str
    rank: int
    hosts: tuple  # the group's host names, by rank (rank 0 first)
    leader_address: str  # rank 0's cluster address: the --dist-init-addr host
    socket_ifname: str | None = None
    leader_port: int | None = None  # rank 0's API port (resolve_checked: from its profile)

    @property
    def size(self) -> int:
        return len(self.hosts)

    @property
    def is_leader(self) -> bool:
        return self.rank == 0

    @property
    def leader(self) -> str:
        return self.hosts[0]

    @property
    def followers(self) -> tuple:
        return self.hosts[1:]

    def dist_init_addr(self, port: int) -> str:
        host = f"[{self.leader_address}]" if ":" in self.leader_address else self.leader_address
        return f"{host}:{port}"

    def server_args(self, port: int) -> dict:
        """What this member's argv adds to the profile's: SGLang's multi-node flags."""
        return {"nnodes": self.size, "node-rank": self.rank, "dist-init-addr": self.dist_init_addr(port)}

    def env(self) -> dict:
        """This host's own variables (its cluster network interface), beside the profile's."""
        if not self.socket_ifname:
            return {}
        return {"NCCL_SOCKET_IFNAME": self.socket_ifname, "GLOO_SOCKET_IFNAME": self.socket_ifname}

    def label(self) -> str:
        """'group g1 node-rank 1 of 2' (the outcome lines and logs say it)."""
        return f"group {self.group} node-rank {self.rank} of {self.size}"


def resolve(hosts) -> dict:
    """{host name: Member} for every host of ``hosts`` ((name, data) pairs, in inventory order)
    that names a serving_group; DeployError (naming the hosts) for an inconsistent group."""
    groups: dict = {}
    for name, data in hosts:
        settings = host_settings(data, name)
        if settings.serving_group:
            groups.setdefault(settings.serving_group, []).append((name, settings))
    members = {}
    for group, listed in groups.items():
        ranked = _ranked(group, listed)
        names = tuple(name for name, _ in ranked)
        leader = ranked[0][1]
        address = leader.cluster_address or leader.ssh_hostname or names[0]
        for rank, (name, settings) in enumerate(ranked):
            members[name] = Member(
                group=group,
                host=name,
                rank=rank,
                hosts=names,
                leader_address=str(address),
                socket_ifname=settings.socket_ifname or None,
            )
    return members


def _ranked(group, listed):
    """The group's (name, settings) by rank: explicit node_rank on every member, or none (the
    inventory's order)."""
    explicit = [(name, settings.node_rank) for name, settings in listed]
    given = [(name, rank) for name, rank in explicit if rank is not None]
    if not given:
        return listed
    if len(given) != len(listed):
        unset = ", ".join(name for name, rank in explicit if rank is None)
        raise DeployError(
            f"serving group {group}: node_rank is set on some members but not "
            f"on {unset}: set it on every member, or on none (inventory order)"
        )
    ranks = dict(given)  # whole numbers: the settings' node_rank
    if sorted(ranks.values()) != list(range(len(listed))):
        raise DeployError(
            f"serving group {group}: node_rank must be 0..{len(listed) - 1}, "
            "each once: " + ", ".join(f"{n}={r}" for n, r in ranks.items())
        )
    by_name = dict(listed)
    return [(name, by_name[name]) for name, _ in sorted(ranks.items(), key=lambda kv: kv[1])]


# The parts of a profile that make the server: members must agree on all of them. The service
# section may differ (a member's port), and with it the engine link (each node's, by default
# the service's own), the readiness and throughput sections are rank 0's.
SHARED_SECTIONS = {"engine", "model", "server_args", "env", "secrets"}
NODE_OWN = {"engine": {"venv"}}


def check(member: Member, profiles: dict) -> None:
    """DeployError before anything changes, naming the hosts, when the group cannot serve:
    members with different profiles, a size other than the profile's nnodes, GPUs that do not
    add up to tp-size x pp-size. ``profiles``: {host name: Profile} of every member."""
    leader = profiles[member.leader]
    differing = [
        name
        for name in member.hosts
        if profiles[name].name != leader.name
        or profiles[name].model_dump(include=SHARED_SECTIONS, exclude=NODE_OWN)
        != leader.model_dump(include=SHARED_SECTIONS, exclude=NODE_OWN)
    ]
    if differing:
        said = ", ".join(f"{name} ({profiles[name].name})" for name in differing)
        raise DeployError(
            f"serving group {member.group}: every member must run the same "
            f"profile as rank 0 {member.leader} ({leader.name}); {said} differ"
        )
    if leader.nnodes != member.size:
        raise DeployError(
            f"serving group {member.group}: {member.size} member(s) "
            f"({', '.join(member.hosts)}) but profile {leader.name} has nnodes "
            f"{leader.nnodes}: list {leader.nnodes} hosts in the group, or set "
            f"server_args.nnodes to {member.size}"
        )
    gpus = leader.tp_size * leader.pp_size
    if gpus % member.size:
        raise DeployError(
            f"serving group {member.group}: tp-size x pp-size = {gpus} GPUs "
            f"cannot be shared evenly by {member.size} nodes "
            f"({', '.join(member.hosts)})"
        )
    ports = {profiles[name].service.dist_init_port for name in member.hosts}
    if len(ports) > 1:
        raise DeployError(
            f"serving group {member.group}: service.dist_init_port differs "
            f"between members ({', '.join(map(str, sorted(ports)))})"
        )


def check_alone(host: str, profile) -> None:
    """A host in no group cannot run a profile that spans several nodes."""
    if profile.nnodes > 1:
        raise DeployError(
            f"profile {profile.name} spans {profile.nnodes} nodes (nnodes) but "
            f"{host} is in no serving_group: give the group's hosts "
            "`serving_group: NAME` in the inventory"
        )


def apply(profile, member: Member | None):
    """The profile as this member runs it: the multi-node flags (--nnodes, --node-rank,
    --dist-init-addr) and the host's socket interface variables added."""
    if member is None:
        return profile
    return profile.model_copy(
        update={
            "server_args": {**profile.server_args, **member.server_args(profile.service.dist_init_port)},
            "env": {**profile.env, **member.env()},
        }
    )


def in_run(member: Member, limited) -> None:
    """A group deploys whole: DeployError when --limit leaves members out."""
    left_out = [name for name in member.hosts if name not in limited]
    if left_out:
        raise DeployError(
            f"serving group {member.group}: {', '.join(left_out)} not in this "
            "run (--limit): a serving group is deployed as a whole"
        )


def resolve_checked(hosts, profile_of, limited=None, whole=True) -> dict:
    """resolve(), then every group checked (check, in_run) and every host outside a group
    (check_alone), before anything changes. ``profile_of(data)`` loads a host's profile;
    ``limited``: the names in this run (None: all); ``whole``: a group must be in the run
    whole (a deploy; `make verify` may look at one member)."""
    members = resolve(hosts)
    by_name = dict(hosts)
    wanted = [name for name, _ in hosts if limited is None or name in limited]
    profiles = {name: profile_of(by_name[name]) for name in wanted}
    for name in wanted:
        member = members.get(name)
        if member is None:
            check_alone(name, profiles[name])
            continue
        if limited is not None and whole:
            in_run(member, limited)
        group_profiles = {other: profiles.get(other) or profile_of(by_name[other]) for other in member.hosts}
        check(member, group_profiles)
        members[name] = replace(member, leader_port=group_profiles[member.leader].service.port)
    return members


def profile_of(data):
    """A host's profile, from its data (the loader the plan uses)."""
    from sglang_deploy.profile.schema import load_profile

    settings = host_settings(data)
    return load_profile(settings.profile, overrides=settings.profile_overrides or None)
