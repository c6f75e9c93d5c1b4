"""Command lines and plan of node/ab.py, the A/B of serving profiles on one node (`make ab`):
each trial's steps are the command lines NodeScripts builds for a deploy of that profile."""

import posixpath

from sglang_deploy.node.lib.http_probe import server_url
from sglang_deploy.plan.commands.builder import script

# The roles of the files a trial installs: the last known good's names for them (lastgood.py).
ROLES = ("unit", "env", "hook", "hook_pth")


def ab_command(directory, plan_path):
    """ab.py run: the A/B the plan at ``plan_path`` (staged by the controller) describes."""
    return script("python3", directory, "ab.py", "run", "--plan-json", plan_path)


def stage_dir(scripts, ab_id):
    """Where the controller stages an A/B's files (0700, beside the service's cycles)."""
    return posixpath.join(scripts.cycles_dir, f"ab-{ab_id}")


def server_entry(plan):
    """One profile's part of the A/B's plan: how ab.py restarts, gates and asks its server."""
    scripts, service = plan.scripts, plan.profile.service
    keys = scripts.api_key_args()
    return {
        "profile": plan.profile.name,
        "restart": scripts.restart(),
        "gate": scripts.gate(),
        "base": server_url(service.probe_host, int(service.port)),
        "served_name": plan.profile.model.served_name,
        "api_key_env_file": keys[1] if keys else None,
        "api_key_var": keys[3] if keys else None,
    }


def ab_plan(own, trials, rotation, stage, ab_id, bench):
    """node/ab.py's plan: ``own`` the node's NodePlan, ``trials`` [(NodePlan, {role: staged
    path})], ``rotation`` the node's fleet_hosts.Rotation, ``bench`` the benchmark's settings."""
    scripts, settings = own.scripts, own.settings
    return {
        "id": ab_id,
        "own": own.profile.name,
        "stage": stage,
        "last_good_dir": scripts.last_good_dir,
        "history": scripts.throughput_history,
        "result_json": posixpath.join(settings.state_dir, own.profile.service.name, "ab", f"{ab_id}.json"),
        "lock": {
            "path": own.lock_path,
            "wait": float(settings.deploy_lock_wait_s),
            "holder": f"ab {own.lock_holder}",
        },
        "out": rotation.out(scripts.directory),
        "back": rotation.back(scripts.directory),
        "restore": scripts.restore_last_good(),
        "reload": "systemctl daemon-reload",
        "bench": bench,
        "trials": [dict(server_entry(plan), files=files) for plan, files in trials],
        "home": dict(server_entry(own), files={}),
    }
