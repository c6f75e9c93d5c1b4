"""pyinfra operations for an SGLang node.

Each operation yields commands only when the node differs from what is asked, and calls
``host.noop`` otherwise, so a re-run with nothing changed reports no changes.
"""

from sglang_deploy.operations.deploy_lock import deploy_lock
from sglang_deploy.operations.engine import engine, engine_matches, locked_venv, tool_venv
from sglang_deploy.operations.fanout_keys import fanout_cleanup
from sglang_deploy.operations.files import (
    HOOK_FILE,
    HOOK_PTH,
    binary_file,
    pth_directory,
    secret_file,
    startup_hook,
    unit_file,
)
from sglang_deploy.operations.metrics_textfile import metrics_textfile_written
from sglang_deploy.operations.model import model_staged
from sglang_deploy.operations.records import manifest_recorded, passport_recorded
from sglang_deploy.operations.rollout import rolled_restart, router_restarted, router_serving
from sglang_deploy.operations.script_upload import node_scripts
from sglang_deploy.operations.service import preflight, serving
from sglang_deploy.operations.venv_pruning import old_venvs_pruned
from sglang_deploy.operations.wheelhouse_upload import wheelhouse

__all__ = [
    "engine",
    "engine_matches",
    "tool_venv",
    "locked_venv",
    "binary_file",
    "secret_file",
    "startup_hook",
    "unit_file",
    "pth_directory",
    "HOOK_FILE",
    "HOOK_PTH",
    "deploy_lock",
    "preflight",
    "rolled_restart",
    "serving",
    "router_restarted",
    "router_serving",
    "manifest_recorded",
    "passport_recorded",
    "node_scripts",
    "old_venvs_pruned",
    "wheelhouse",
    "model_staged",
    "fanout_cleanup",
    "metrics_textfile_written",
]
