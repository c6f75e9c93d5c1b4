"""pyinfra operations for an SGLang node.

Each operation yields commands only when the node differs from what is asked, and calls
``host.noop`` otherwise, so a re-run with nothing changed reports no changes.
"""

from .engine import engine, engine_matches, tool_venv
from .fleet import rolled_restart, router_restarted, router_serving
from .files import (HOOK_FILE, HOOK_PTH, binary_file, pth_directory, secret_file, startup_hook,
                    unit_file)
from .lock import deploy_lock
from .model import model_staged
from .records import manifest_recorded
from .scripts import node_scripts
from .service import preflight, serving
from .venvs import old_venvs_pruned

__all__ = ["engine", "engine_matches", "tool_venv", "binary_file", "secret_file", "startup_hook",
           "unit_file",
           "pth_directory", "HOOK_FILE", "HOOK_PTH", "deploy_lock", "preflight", "rolled_restart",
           "serving", "router_restarted", "router_serving", "manifest_recorded", "node_scripts",
           "old_venvs_pruned", "model_staged"]
