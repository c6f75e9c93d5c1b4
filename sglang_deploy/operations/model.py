"""The model (and draft model) directories a profile stages: copied from the controller,
verified against their manifest into a staging sibling, swapped into place whole by the
restart cycle after its preflight (the old weights kept until the new configuration is
recorded: node/model_stage.py)."""

from __future__ import annotations

import ctypes
import hashlib
import json
import shlex
import shutil
import signal
import subprocess
import sys
import time
from functools import partial
from io import StringIO
from typing import TYPE_CHECKING

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, StringCommand, operation
from pyinfra.api.command import FileUploadCommand, QuoteString
from pyinfra.facts.files import File

from sglang_deploy.facts.serving import ModelState
from sglang_deploy.node import model_manifest
from sglang_deploy.node.lib import result
from sglang_deploy.node.model_stage import PREVIOUS_SUFFIX, staging_dir
from sglang_deploy.operations import fanout, remote
from sglang_deploy.operations.service import fail_with
from sglang_deploy.operations.streamed import run_streamed
from sglang_deploy.plan.commands import hf_stage_command, model_stage_command
from sglang_deploy.plan.hosts import ssh_argv
from sglang_deploy.plan.model_sources import (
    GB,
    disk_problem,
    local_manifest,
    manifest_source,
    require_dir,
    rsync_argv,
    to_copy,
)
from sglang_deploy.run_state import host_settings

if TYPE_CHECKING:
    from sglang_deploy.plan.model_sources import HubClient, StagingTarget

_SSH_KEYS = ("ssh_hostname", "ssh_user", "ssh_port", "ssh_key", "ssh_known_hosts_file")


def _sh(*words):
    """One shell command of literal words: a model directory or file name may hold spaces,
    quotes or `$(...)` (model.path allows them; ExecStart= quotes them its own way), so every
    word is quoted; the paths are absolute, so none is read as an option."""
    return StringCommand(*(QuoteString(str(word)) for word in words))


def _say(state, host, message):
    host.log(message, logger.info)
    return True


@operation()
def model_staged(
    target: StagingTarget,
    scripts_dir: str,
    repairing: bool = False,
    hub: HubClient | None = None,
    in_group: bool = False,
):
    """
    Stage a model on the node when its manifest differs from the source's.

    ``target`` is a ``plan.model_sources.StagingTarget``. Free disk checked first, files copied into
    a staging sibling (rsync when both ends have it, else one upload per file), every file hashed,
    then swapped into place. A node whose manifest matches is left alone (nothing is copied, no
    change).

    + target: what to stage, where
    + scripts_dir: where our on-node scripts are
    + repairing: also hash the live files and re-stage those that do not match
    + hub: ``HubClient`` (venv python, token, private runtime directory) for Hub sources
    + in_group: the host is a serving group's member (its restart has no model step)

    Nodes of the run that need the same controller-sourced model copy it from each other
    (operations/fanout.py, setting ``fanout``): this node arrives there as one that holds it,
    needs it or neither (``finally``: a node that raised is not waited for).

    **Examples:**

    .. code:: python

        sglang.model_staged(
            name="Model /models/qwen (local)",
            target=target,
            scripts_dir=plan.scripts.directory,
        )
    """
    arrival = fanout.Arrival(host)
    try:
        yield from _staged(target, scripts_dir, repairing, hub, in_group, arrival)
    finally:
        arrival.close()


def _staged(target, scripts_dir, repairing, hub, in_group, arrival):
    label = f"{target.role} {target.path}"
    if host.get_fact(File, path=f"{scripts_dir}/model_stage.py") is None:
        host.noop(f"{label}: staged once our scripts are on the node (a dry run of a first deploy)")
        return
    if target.source.kind == "huggingface":
        yield from _downloaded(label, target, scripts_dir, repairing, hub, in_group)
        return
    local_dir = require_dir(target.controller_dir, target.role)
    manifest = local_manifest(local_dir)
    wanted = model_manifest.digest(manifest)
    node = host.get_fact(ModelState, scripts_dir=scripts_dir, directory=target.path, deep=repairing)
    if node is None:
        yield FunctionCommand(fail_with, (f"{label}: model_stage.py printed no result",), {})
        return
    size = model_manifest.total_size(manifest)
    source = manifest_source(target)
    live = node.get("target") or target.path
    if node["digest"] == wanted and not node["problems"]:
        arrival.holder(wanted, live)  # it serves its live copy
    elif node.get("pending") == wanted and node.get("pending_source") == source:
        arrival.holder(wanted, node.get("staging") or staging_dir(live))  # its verified staged copy
    if node["digest"] == wanted and not (repairing and node["problems"]):
        host.noop(f"{label} matches its manifest ({len(manifest['files'])} files, {size / GB:.2f} GB)")
        return
    if node.get("layout_problem"):
        yield FunctionCommand(fail_with, (f"{label}: {node['layout_problem']}; nothing was copied",), {})
        return
    in_place, now = _swap_mode(in_group)
    if node.get("pending") == wanted and node.get("pending_source") == source:
        # Staged and verified by a run that died before its restart: still a change to make.
        yield FunctionCommand(
            _finish,
            (label, model_stage_command(scripts_dir, "finish" if now else "pending", target.path, now=now)),
            {},
        )
        return
    need = to_copy(manifest, node)
    free = node["free"] + node.get("previous_bytes", 0)  # the previous weights go first
    problem = disk_problem(host.name, target.path, need, free)
    drop_live = (
        bool(problem)
        and in_place
        and not disk_problem(host.name, target.path, need, free + _freed(manifest, node))
    )
    if problem and not drop_live:
        advice = (
            "the new weights are staged beside the served ones, kept for a rollback; the deploy setting "
            "`model_keep_previous: false` replaces them in place instead (no weight rollback)"
            if not in_place
            else "not even with the live weights removed (model_keep_previous: false)"
        )
        yield FunctionCommand(fail_with, (f"{label}: {problem}: {advice}; nothing was copied",), {})
        return
    staging = node.get("staging") or staging_dir(target.path)  # a symlink's target's, a mount point's
    for line in node["problems"]:
        host.log(f"{label}: re-staging {line}", logger.warning)
    if node.get("previous") or node.get("previous_bytes"):  # inside a mount point, else beside it
        yield _sh(
            "rm", "-rf", node.get("previous_dir") or (node.get("target") or target.path) + PREVIOUS_SUFFIX
        )
    yield _sh("mkdir", "-p", staging)
    yield FileUploadCommand(
        StringIO(json.dumps(dict(manifest, source=source), indent=1)),
        f"{staging}/{model_manifest.MANIFEST_NAME}",
    )
    yield model_stage_command(scripts_dir, "seed", target.path, deep=repairing)
    if drop_live:
        host.log(
            f"{label}: {problem}: the live weights are removed first (model_keep_previous: false)",
            logger.warning,
        )
        yield model_stage_command(scripts_dir, "drop-live", target.path)
    finish = model_stage_command(scripts_dir, "finish", target.path, in_place=in_place, now=now)
    can_rsync = node["rsync"] and shutil.which("rsync") and remote.rsync_path(host) is not False
    if arrival.taking_part and can_rsync and not repairing:
        # Served once verified: the live directory when finish swaps it in now, else the
        # verified staging directory that waits for the restart's swap.
        served = live if (in_place or now) else staging
        arrival.needs(wanted, served)
        copy = fanout.Copy(
            label,
            wanted,
            target.path,
            scripts_dir,
            partial(controller_copy, label, local_dir, staging, need, finish),
            served_dir=served,
            swap="in-place" if in_place else "now" if now else None,
        )
        yield fanout.copy_command(copy, arrival.op)
        return
    if need and can_rsync:
        yield FunctionCommand(_rsync, (label, local_dir, staging, need), {})
    else:
        yield from _uploads(label, local_dir, staging, need)
    yield FunctionCommand(_finish, (label, finish), {})


def controller_copy(label, local_dir, staging, need, finish, state, host):
    """A fan-out root's copy (or every node's, fan-out not used): rsync from the controller of
    ``need``, then ``finish`` (the check against the manifest, and the swap if it swaps now)."""
    if need and not _rsync(state, host, label, local_dir, staging, need):
        return False
    return _finish(state, host, label, finish)


def _swap_mode(in_group):
    """(in_place, now): ``model_keep_previous: false`` swaps at once, the old weights removed; a
    serving group's member swaps at once, keeping them (its restart has no model step)."""
    in_place = not host_settings(host).model_keep_previous
    return in_place, not in_place and in_group


def _freed(manifest, node):
    """What removing the live weights frees: their files the new manifest does not keep."""
    kept = {(e["path"], e["size"], e["sha256"]) for e in manifest["files"]}
    return sum(
        e["size"] for e in node.get("live_files", []) if (e["path"], e["size"], e["sha256"]) not in kept
    )


def _downloaded(label, target, scripts_dir, repairing, hub, in_group):
    """Download on the node (node/hf_stage.py): nothing when the live manifest records this
    repo and revision (and, repairing, its files still hash to it)."""
    wanted = manifest_source(target)
    node = host.get_fact(ModelState, scripts_dir=scripts_dir, directory=target.path, deep=repairing)
    if node is None:
        yield FunctionCommand(fail_with, (f"{label}: model_stage.py printed no result",), {})
        return
    if node["source"] == wanted and not (repairing and node["problems"]):
        host.noop(
            f"{label} matches its manifest ({wanted['huggingface']['repo']}@"
            f"{wanted['huggingface']['revision'][:12]})"
        )
        return
    if node.get("layout_problem"):
        yield FunctionCommand(fail_with, (f"{label}: {node['layout_problem']}; nothing was downloaded",), {})
        return
    token_file, secret = None, {}
    if hub.token:
        private = f"{hub.run_dir}/hub"
        token_file = f"{private}/token-{hashlib.sha256(target.path.encode()).hexdigest()[:12]}"
        yield _sh("mkdir", "-p", "-m", "0700", private)
        yield _sh("chmod", "0700", private)
        # Written just before the download, on stdin (never pyinfra's /tmp copy of an upload
        # as a sudo user), and removed after it whatever happened (hf_stage.py removes it
        # once read; the shell and the finally below if it never got that far).
        secret = {"before": remote.secret_write(token_file, hub.token), "after": _sh("rm", "-f", token_file)}
    in_place, now = _swap_mode(in_group)
    command = hf_stage_command(
        hub.python,
        scripts_dir,
        target.source.huggingface,
        target.path,
        token_file=token_file,
        deep=repairing,
        in_place=in_place,
        now=now,
    )
    if token_file:  # gone whatever the download did
        command = f"{command}; status=$?; rm -f {shlex.quote(token_file)}; exit $status"
    yield FunctionCommand(_finish, (label, command), secret)


def _uploads(label, local_dir, staging, need):
    """One upload per file (no rsync on one end): each to a temporary name in the staging
    directory, renamed when complete, so a file there is whole and a re-run resumes at the
    first missing file."""
    total = sum(e["size"] for e in need)
    done = 0
    clock = {}
    if need:
        yield FunctionCommand(_start_clock, (clock,), {})
    for index, entry in enumerate(need, 1):
        done += entry["size"]
        dest = f"{staging}/{entry['path']}"
        partial = f"{staging}/.upload-{index}"
        yield FunctionCommand(
            _say,
            (
                f"{label}: file {index}/{len(need)} {entry['path']} "
                f"({entry['size'] / 1e6:.1f} MB; {done / 1e6:.1f} of "
                f"{total / 1e6:.1f} MB)",
            ),
            {},
        )
        yield _sh("mkdir", "-p", dest.rsplit("/", 1)[0])
        yield FileUploadCommand(str(local_dir / entry["path"]), partial)
        yield _sh("mv", "-f", partial, dest)
    if need:
        yield FunctionCommand(_say_rate, (label, clock, total), {})


def _start_clock(state, host, clock):
    clock["started"] = time.monotonic()
    return True


def _say_rate(state, host, label, clock, total):
    took = max(time.monotonic() - clock["started"], 1e-6)
    host.log(
        f"{label}: copied {total / 1e6:.1f} MB in {took:.1f} s ({total / 1e6 / took:.1f} MB/s)", logger.info
    )
    return True


def _rsync(state, host, label, local_dir, staging, need):
    """rsync from the controller, its progress streamed to the operator."""
    data = {key: host.data.get(key) for key in _SSH_KEYS}
    ssh = ssh_argv(host.name, data, "")[:-2]
    target = ssh_argv(host.name, data, "")[-2]
    argv = rsync_argv(ssh, target, local_dir, staging, host_settings(host).controller_bwlimit_kib)
    if remote.rsync_path(host):  # a sudo login: the node's rsync writes root's directory as root
        argv.insert(1, f"--rsync-path={remote.rsync_path(host)}")
    host.log(
        f"{label}: rsync of {len(need)} file(s), {sum(e['size'] for e in need) / 1e6:.1f} MB", logger.info
    )
    started = time.monotonic()
    proc = subprocess.run(
        argv,
        input="".join(e["path"] + "\n" for e in need),
        text=True,
        stdout=sys.stderr,
        stderr=subprocess.PIPE,
        preexec_fn=_die_with_parent,
    )
    if proc.returncode != 0:
        return fail_with(
            state,
            host,
            f"{label}: rsync failed (exit {proc.returncode}): "
            f"{proc.stderr.strip()[-300:]}; the next run resumes",
        )
    took = max(time.monotonic() - started, 1e-6)
    total = sum(e["size"] for e in need)
    host.log(
        f"{label}: copied {total / 1e6:.1f} MB in {took:.1f} s ({total / 1e6 / took:.1f} MB/s)", logger.info
    )
    return True


def _die_with_parent():
    """rsync ends with the deploy that started it (SIGTERM: it keeps the partial file), never
    copying on as an orphan while the next run starts."""
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG (Linux)
    except (OSError, AttributeError):
        pass


def _finish(state, host, label, command, before=None, after=None):
    """Run ``command`` (a node script) streamed; ``before``/``after``: commands run first and,
    whatever happens, last (a secret written for it, then removed)."""
    try:
        if before is not None:
            wrote, said = remote.run(host, before)
            if not wrote:
                cause = "\n".join(said.stderr_lines[-3:])
                return fail_with(
                    state, host, f"{label}: writing the Hub token failed: {cause}; nothing was staged"
                )
        ok, output = run_streamed(host, command)
    finally:
        if after is not None:
            remote.run(host, after)
    found = result.parse(output.stdout_lines)
    if not ok or not found or found["status"] != 0:
        cause = (found or {}).get("cause") or "\n".join(output.stderr_lines[-3:])
        return fail_with(
            state,
            host,
            f"{label}: staging failed: {cause}; the live directory is untouched, the next run resumes",
        )
    return True
