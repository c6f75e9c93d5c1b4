"""Command lines of our on-node scripts (sglang_deploy/node/, uploaded to the node), built in
this folder only: builder.py is the one way to build ``python3 <script> <args>`` (quoting,
optional flags, the API key's env file); service, engine, model, fleet and status name each
script's arguments; unit.py's NodeScripts fills them from one unit's profile. Facts, operations,
checks and tools take these strings; every script answers with its result line
(node/lib/result.py)."""

from sglang_deploy.plan.commands.builder import api_key_args, script_path, textfile_args
from sglang_deploy.plan.commands.engine import (
    drift_command,
    exact_command,
    manifest_command,
    venvs_list_command,
    venvs_mark_command,
    venvs_wheelhouses_command,
)
from sglang_deploy.plan.commands.fleet import (
    dist_reach_command,
    prometheus_gate_command,
    prometheus_targets_command,
    rotation_command,
    router_gate_command,
)
from sglang_deploy.plan.commands.model import (
    fanout_access_command,
    fanout_pull_command,
    hf_stage_command,
    model_check_command,
    model_stage_command,
)
from sglang_deploy.plan.commands.service import (
    acs_command,
    cycles_dir,
    cycles_dir_of_lock,
    detach_ack_command,
    detach_follow_command,
    detach_start_command,
    detach_status_command,
    gate_args,
    gate_timings,
    last_good_show_command,
    lock_command,
    persistence_check_command,
    secret_args_argv,
    workers_command,
)
from sglang_deploy.plan.commands.status import (
    metrics_textfile_command,
    node_status_command,
    passport_command,
    router_status_command,
)

__all__ = [
    "acs_command",
    "api_key_args",
    "cycles_dir",
    "cycles_dir_of_lock",
    "detach_ack_command",
    "detach_follow_command",
    "detach_start_command",
    "detach_status_command",
    "dist_reach_command",
    "drift_command",
    "exact_command",
    "fanout_access_command",
    "fanout_pull_command",
    "gate_args",
    "gate_timings",
    "hf_stage_command",
    "last_good_show_command",
    "lock_command",
    "manifest_command",
    "metrics_textfile_command",
    "model_check_command",
    "model_stage_command",
    "node_status_command",
    "passport_command",
    "persistence_check_command",
    "prometheus_gate_command",
    "prometheus_targets_command",
    "rotation_command",
    "router_gate_command",
    "router_status_command",
    "script_path",
    "secret_args_argv",
    "textfile_args",
    "venvs_list_command",
    "venvs_mark_command",
    "venvs_wheelhouses_command",
    "workers_command",
]
