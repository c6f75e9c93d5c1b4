"""What `make status` runs on each host of an inventory: node_status.py on every node and every
router host, over SSH with the inventory's connection settings (plan/hosts.ssh_argv; `sudo`
hosts through a passwordless sudo: the last known good is root's)."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from sglang_deploy.errors import DeployError
from sglang_deploy.node import node_status
from sglang_deploy.plan.commands import router_status_command
from sglang_deploy.plan.fleet import address, is_router, router_host, serves, worker_url
from sglang_deploy.plan.host_plan import plan_for
from sglang_deploy.plan.hosts import ssh_argv
from sglang_deploy.plan.serving_group import resolve
from sglang_deploy.run_state import host_settings
from sglang_deploy.verify.redact import Redactor

CONNECT_TIMEOUT_S = 5


@dataclass(frozen=True)
class Target:
    name: str
    role: str  # "node" or "router"
    argv: tuple = ()  # the one SSH command; empty when the host could not be planned
    profile: str | None = None  # the inventory's profile (nodes)
    worker_url: str | None = None  # the node as routers list it; None: a group's follower
    group: str | None = None  # 'g1 rank 0 of 2': a serving group's member
    url: str | None = None  # a router's URL, as the nodes reach it
    error: str | None = None  # why it could not be planned


def remote(name, data, command) -> tuple:
    """The SSH argv running ``command`` on the host, as root where the host logs in with sudo."""
    settings = host_settings(data, name)
    if settings.sudo or data.get("_sudo"):
        command = f"sudo -n -H -- {command}"  # our command lines are words: no shell needed
    return tuple(ssh_argv(name, data, command, connect_timeout=CONNECT_TIMEOUT_S))


def node_target(name, data, member, secrets: Redactor) -> Target:
    try:
        plan = plan_for(data, member=member)
    except DeployError as exc:
        return Target(name, "node", profile=data.get("profile"), error=f"not planned: {exc}")
    secrets.add(plan.profile.secrets, plan.secret_values)
    secrets.add_profile(plan.profile)
    settings = plan.settings
    passport = posixpath.join(settings.state_dir, node_status.PASSPORT)
    leads, service = member is None or member.is_leader, plan.profile.service
    return Target(
        name,
        "node",
        argv=remote(name, data, plan.scripts.node_status(plan.venvs_dir, passport)),
        profile=plan.profile.name,
        worker_url=worker_url(service.reached_at(address(data, name)), service.port) if leads else None,
        group=f"{member.group} rank {member.rank} of {member.size}" if member else None,
    )


def router_target(name, data) -> Target:
    try:
        router = router_host(name, data)
    except DeployError as exc:
        return Target(name, "router", error=f"not planned: {exc}")
    scripts = posixpath.join(host_settings(data, name).sglang_deploy_dir, "node")
    command = router_status_command(scripts, router.local_url)
    return Target(name, "router", argv=remote(name, data, command), url=router.url)


def targets(hosts, limit=None, secrets: Redactor | None = None):
    """Every target, in inventory order, routers first (few, and asked by every node's row),
    one at a time: each is asked as soon as it is planned (planning reads the profile's YAML,
    tens of milliseconds a host, while the SSH commands before it connect). ``limit``: node
    names (routers are always asked: they say who is in rotation); ``secrets`` is given every
    planned node's secrets."""
    secrets = Redactor() if secrets is None else secrets
    members = resolve(hosts)
    for name, data in hosts:
        if is_router(data):
            yield router_target(name, data)
    for name, data in hosts:
        if serves(data) and (not limit or name in limit):  # a monitoring host has no profile to show
            yield node_target(name, data, members.get(name), secrets)
