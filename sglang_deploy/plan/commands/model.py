"""Command lines of the scripts that stage, check and share model directories (built by
builder.script)."""

import json

from sglang_deploy.plan.commands.builder import optional, script
from sglang_deploy.plan.settings import default


def model_stage_command(directory, action, model_dir, deep=False, in_place=False, now=False, want=None):
    """model_stage.py: a model directory's state, seed, finish, pending or drop-live; swap
    with ``want`` ({dir: source}) (node/model_stage.py)."""
    return script(
        "python3",
        directory,
        "model_stage.py",
        action,
        *optional(model_dir, "--dir", model_dir),
        *optional(deep, "--deep"),
        *optional(in_place, "--in-place"),
        *optional(now, "--now"),
        *optional(want, "--want-json", json.dumps(want, sort_keys=True)),
    )


def hf_stage_command(
    python, directory, source, model_dir, token_file=None, deep=False, in_place=False, now=False
):
    """hf_stage.py run by the Hub client's venv: download a pinned revision into model_dir."""
    return script(
        python,
        directory,
        "hf_stage.py",
        "--repo",
        source.repo,
        "--revision",
        source.revision,
        "--dir",
        model_dir,
        *optional(token_file, "--token-file", token_file),
        *optional(deep, "--deep"),
        *optional(in_place, "--in-place"),
        *optional(now, "--now"),
    )


def model_check_command(directory, model_dir, deep=False):
    """model_manifest.py check: a model directory against its manifest, in its result line."""
    return script(
        "python3", directory, "model_manifest.py", "check", "--dir", model_dir, *optional(deep, "--deep")
    )


def fanout_pull_command(directory, model_dir, source=None, port=22, key=None, known_hosts=None, alias=None,
                        bwlimit=None, timeout=default("fanout_stall_timeout_s"), swap=None):  # fmt: skip
    """fanout_pull.py: ``seed`` (no source) or ``pull`` from ``source`` (node/fanout_pull.py);
    ``swap``: finish's (None: at the restart, "now", "in-place")."""
    if source is None:
        return script("python3", directory, "fanout_pull.py", "seed", "--dir", model_dir)
    args = ["--source", source, "--port", port, "--key", key, "--known-hosts", known_hosts, "--alias", alias]
    args += [
        *optional(bwlimit, "--bwlimit", bwlimit),
        "--timeout",
        int(timeout),
        *optional(swap, f"--{swap}"),
    ]
    return script("python3", directory, "fanout_pull.py", "pull", "--dir", model_dir, *args)


def fanout_access_command(directory, action, user="root", model_dir=None, marker=None, run_dir=None):
    """fanout_access.py: grant or revoke a run's read-only key, host keys, leftovers, clean."""
    args = ["--user", user, *optional(model_dir, "--dir", model_dir), *optional(marker, "--marker", marker)]
    return script(
        "python3", directory, "fanout_access.py", action, *args, *optional(run_dir, "--run-dir", run_dir)
    )
