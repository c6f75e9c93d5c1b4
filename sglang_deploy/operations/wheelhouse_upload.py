"""The wheelhouse on a node: only the wheels it lacks are uploaded, found by one command that
hashes what is there (as script_upload.py does for our scripts), and the lock beside them.
Nodes of the run that lack the same wheels copy them from each other instead
(operations/fanout.py): the wheelhouse then arrives whole, in a staging sibling checked
against the wheels' sha256s (the lock's, checked on the controller) and swapped in."""

from __future__ import annotations

import json
import shlex
import shutil
from functools import partial
from io import StringIO
from typing import TYPE_CHECKING

from pyinfra import host
from pyinfra.api import operation
from pyinfra.api.command import FileUploadCommand

from sglang_deploy.facts.serving import FileDigests, ModelState
from sglang_deploy.node import model_manifest
from sglang_deploy.node.model_stage import staging_dir
from sglang_deploy.operations import fanout, remote
from sglang_deploy.operations.model import controller_copy
from sglang_deploy.plan.commands import fanout_pull_command, model_stage_command
from sglang_deploy.plan.wheelhouse import sha256

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path


def wheels_to_upload(local, remote_dir, remote):
    """The (local path, remote path) of ``local`` ({path: sha256}) that ``remote`` (FileDigests
    of ``remote_dir``) lacks or holds with another sha256 (a partial or altered copy)."""
    wanted = [(path, f"{remote_dir}/{path.name}") for path in sorted(local, key=lambda p: p.name)]
    return [(path, dest) for path, dest in wanted if remote.get(dest, {}).get("sha256") != local[path]]


def wheel_manifest(local) -> dict:
    """The wheelhouse's manifest (node/model_manifest.py's form) of ``local`` ({path: sha256})."""
    entries = [{"path": p.name, "size": p.stat().st_size, "sha256": local[p]} for p in local]
    return {"files": sorted(entries, key=lambda e: e["path"])}


@operation()
def wheelhouse(
    wheels: Sequence[Path], remote_dir: str, lock: Path, remote_lock: str, scripts_dir: str | None = None
):
    """
    Upload the wheels of ``wheels`` that ``remote_dir`` lacks, and the lock file.

    + wheels: local wheel paths (the lock's, checked by `make wheelhouse`, and uv's)
    + remote_dir: the node's wheelhouse directory for this lock
    + lock: the local lock file
    + remote_lock: where it goes on the node
    + scripts_dir: where our on-node scripts are (given: the wheels may fan out)

    **Examples:**

    .. code:: python

        sglang.wheelhouse(
            name="Engine wheelhouse",
            wheels=locked.wheels(),
            remote_dir=locked.remote_wheelhouse,
            lock=locked.local_lock,
            remote_lock=locked.remote_lock,
        )
    """
    arrival = fanout.Arrival(host, mode=None if scripts_dir else "off")
    try:
        yield from _wheelhouse(wheels, remote_dir, lock, remote_lock, scripts_dir, arrival)
    finally:
        arrival.close()


def _wheelhouse(wheels, remote_dir, lock, remote_lock, scripts_dir, arrival):
    local = {path: sha256(path) for path in wheels}
    files = {**local, lock: sha256(lock)}
    dests = [f"{remote_dir}/{p.name}" for p in local] + [remote_lock]
    remote_digests = host.get_fact(FileDigests, paths=dests)
    stale = wheels_to_upload(local, remote_dir, remote_digests)
    manifest = wheel_manifest(local)
    digest = model_manifest.digest(manifest)
    if not stale:
        arrival.holder(digest, remote_dir)
    lock_stale = remote_digests.get(remote_lock, {}).get("sha256") != files[lock]
    if not stale and not lock_stale:
        host.noop(f"{remote_dir} holds the {len(local)} wheels of {lock.name}")
        return
    if stale and arrival.taking_part:
        node = host.get_fact(ModelState, scripts_dir=scripts_dir, directory=remote_dir)
        local_dirs = {path.parent for path in local}
        if node and node["rsync"] and shutil.which("rsync") and remote.rsync_path(host) is not False:
            if len(local_dirs) == 1:
                yield from _fanned_out(local, stale, manifest, digest, remote_dir, scripts_dir, node, arrival)
                stale = []
    if lock_stale:
        stale.append((lock, remote_lock))
    directories = sorted({dest.rsplit("/", 1)[0] for _, dest in stale})
    if directories:
        yield "mkdir -p " + " ".join(shlex.quote(d) for d in directories)
    for src, dest in stale:
        yield FileUploadCommand(str(src), dest, remote_temp_filename=host.get_temp_filename(dest))


def _fanned_out(local, stale, manifest, digest, remote_dir, scripts_dir, node, arrival):
    """The wheels into the wheelhouse's staging sibling: the manifest first, the good ones
    kept (hashed on the node), the rest from the tree's source; checked, swapped in."""
    arrival.needs(digest, remote_dir)
    staging = node.get("staging") or staging_dir(remote_dir)
    yield f"mkdir -p {shlex.quote(staging)}"
    yield FileUploadCommand(
        StringIO(json.dumps(dict(manifest, source={"wheelhouse": str(remote_dir)}), indent=1)),
        f"{staging}/{model_manifest.MANIFEST_NAME}",
    )
    yield fanout_pull_command(scripts_dir, remote_dir)  # seed: what the node already holds
    staged = dict(tuple(item) for item in node.get("staged", []))
    lacking = {path.name for path, _ in stale}  # the others are kept by the seed above
    need = [e for e in manifest["files"] if e["path"] in lacking and staged.get(e["path"]) != e["size"]]
    label = f"wheelhouse {remote_dir}"
    local_dir = next(iter(local)).parent
    finish = model_stage_command(scripts_dir, "finish", remote_dir, in_place=True)  # no restart swaps it
    copy = fanout.Copy(
        label,
        digest,
        remote_dir,
        scripts_dir,
        partial(controller_copy, label, local_dir, staging, need, finish),
        served_dir=remote_dir,
        swap="in-place",
    )
    yield fanout.copy_command(copy, arrival.op)
