"""`make verify`'s checks of the service as its clients and the deploy see it: the last known
good, serving (the port, /health, the served name), the serving group's verdict at rank 0, the
readiness gate's account of the last start."""

from __future__ import annotations

import ipaddress
import json
import shlex

from sglang_deploy.facts.serving import Serving
from sglang_deploy.node.lib import status
from sglang_deploy.verify.registry import ownership, read_fact, verify_check
from sglang_deploy.verify.verdict import FAILED, OK, WARNING, Check

NONE_PASSED = "no configuration has passed the gate here yet"


def last_passed(by_name) -> str:
    """The table's "last passed gate": the profile the node last passed its gate with, or "none"."""
    found = by_name.get("last good")
    if found is None:
        return "-"
    return found.get("data", {}).get("profile") or "none"


def _last_start_cell(by_name):
    start = by_name.get("last start", {"state": "-"})
    ready_s = start.get("data", {}).get("ready_s")
    return f"ready in {ready_s:.1f}s" if start["state"] == OK and ready_s is not None else start["state"]


@verify_check("last good", column="last passed gate", cell=last_passed, warning_fails=False)
def last_good(node, plan) -> Check:
    """The profile the node last passed its readiness gate with (kept for rollback: after a
    rollback it is not the profile verify checks against), and that its copy of the env file
    (secrets included) is as private as the original."""
    directory = plan.scripts.last_good_dir
    if not node.file(directory).exists:
        return Check.nothing_to_check("last good", NONE_PASSED)
    private = ownership(node, directory, "root", 0o700) + ownership(
        node, f"{directory}/env", "root", 0o600, want_group="root"
    )
    state_dir = node.file(directory.rsplit("/", 1)[0])
    if state_dir.user != "root" or state_dir.mode & 0o022:
        private.append(f"{state_dir.path} is {state_dir.mode:o} {state_dir.user}: not root's alone")
    found = node.run(f"cat {shlex.quote(directory)}/manifest.json")
    if found.rc != 0:
        check = Check.nothing_to_check("last good", NONE_PASSED)
    else:
        manifest = json.loads(found.stdout)
        passed = f"{manifest['profile']} (passed the gate at {manifest['saved_at']}"
        data = {"profile": manifest["profile"], "saved_at": manifest["saved_at"]}
        if manifest["profile"] != plan.profile.name:
            check = Check(
                "last good",
                WARNING,
                f"{passed}; verified against {plan.profile.name}: rolled back?)",
                data=data,
            )
        else:
            check = Check("last good", OK, f"{passed})", data=data)
    if private:
        return Check(
            "last good", FAILED, f"{check.detail}; not private: {'; '.join(private)}", data=check.data
        )
    return check


def _listening(node, service) -> bool:
    """The port listens on the server's --host (0.0.0.0, `::`: every address); a host name,
    which testinfra cannot look up, counts as listening (the probe's answers judge)."""
    try:
        ipaddress.ip_address(service.host)
    except ValueError:
        return True
    return node.socket(f"tcp://{service.host}:{service.port}").is_listening


@verify_check("serving")
def serving(node, plan) -> Check:
    """The port listens on the server's --host, /health answers 200 and /v1/models lists the
    name (asked at service.probe_host)."""
    profile, service = plan.profile, plan.profile.service
    found = (
        read_fact(
            node,
            Serving,
            port=service.port,
            served_name=profile.model.served_name,
            host=service.probe_host,
            auth=tuple(plan.scripts.api_key_args()),
        )
        or {}
    )
    listening = _listening(node, service)
    if plan.group and not plan.group.is_leader and found.get("health") == 200 and listening:
        # A follower serves no API: its /health is a dummy (always 200 once its schedulers run).
        return Check(
            "serving",
            OK,
            f"follower: dummy /health on :{profile.service.port}; rank 0 {plan.group.leader} serves the API",
        )
    if found.get("ready") and listening:
        return Check("serving", OK, f"{profile.model.served_name} on :{profile.service.port}")
    detail = f"/health {found.get('health')}, /v1/models {found.get('models')}"
    if not listening:
        detail = f"nothing listens on {service.host}:{service.port}; {detail}"
    return Check("serving", FAILED, detail)


def _group_cell(by_name):
    """The table's "serving group": '-' alone, else the member's rank and the verdict."""
    found = by_name.get("serving group")
    member = found.get("data", {}) if found else {}
    if "group" not in member:
        return found["state"] if found and found["state"] == FAILED else "-"
    return f"{member['group']} rank {member['rank']}/{member['size']}: {found['state']}"


@verify_check("serving group", cell=_group_cell)
def serving_group(node, plan) -> Check:
    """A serving group member: its rank, and the group's verdict as rank 0's API answers it,
    asked from this node at rank 0's cluster address."""
    member = plan.group
    if member is None:
        return Check("serving group", OK, "serves alone (no serving_group)")
    where = f"{member.leader_address}:{member.leader_port}"
    data = {"group": member.group, "rank": member.rank, "size": member.size}
    found = (
        read_fact(
            node,
            Serving,
            port=member.leader_port,
            health_path="/ping",
            served_name=plan.profile.model.served_name,
            host=member.leader_address,
            auth=tuple(plan.scripts.api_key_args()),  # every member's env file holds rank 0's key
        )
        or {}
    )
    if found.get("ready"):
        return Check(
            "serving group",
            OK,
            f"{member.label()}: rank 0 {member.leader} serves {plan.profile.model.served_name} at {where}",
            data=data,
        )
    return Check(
        "serving group",
        FAILED,
        f"{member.label()}: rank 0 {member.leader} does not "
        f"serve at {where} (/ping {found.get('health')}, /v1/models {found.get('models')})",
        data=data,
    )


@verify_check("last start", cell=_last_start_cell)
def last_start(node, plan) -> Check:
    """The readiness gate's account of the last start it gated: time per phase, or the cause."""
    found = node.run(f"cat {plan.scripts.gate_report}")
    if found.rc != 0:
        return Check.nothing_to_check("last start", "no gate report on the node (started outside a deploy)")
    report = json.loads(found.stdout)
    if report["status"] != status.READY:
        return Check("last start", WARNING, f"{report['status_name']}: {report['cause_text']}")
    phases = ", ".join(
        f"{name} {seconds:.1f}s" for name, seconds in report["phases"].items() if name != "ready"
    )
    return Check(
        "last start",
        OK,
        f"ready in {report['elapsed_s']:.1f}s ({phases})",
        data={"ready_s": report["elapsed_s"]},
    )
