"""Our on-node scripts, uploaded as one set: one command finds what differs, and only that is
uploaded (per-file `files.put` costs two or three SSH round trips per script)."""

from __future__ import annotations

import hashlib
import shlex
from typing import TYPE_CHECKING

from pyinfra import host
from pyinfra.api import operation
from pyinfra.api.command import FileUploadCommand

from sglang_deploy.facts.serving import FileDigests

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path


def _digest(path):
    with open(path, "rb") as local:
        return hashlib.sha256(local.read()).hexdigest()


def _differs(found, digest):
    return found is None or found["sha256"] != digest


@operation()
def node_scripts(files: Sequence[tuple[Path | str, str]], mode: str = "0755"):
    """
    Upload our on-node scripts whose remote copy is missing or differs.

    ``mode`` is set where it differs.

    + files: ``[(local path, remote path)]``
    + mode: file mode of every script

    **Examples:**

    .. code:: python

        sglang.node_scripts(
            name="On-node scripts",
            files=plan.node_scripts,
        )
    """
    remote = host.get_fact(FileDigests, paths=[dest for _, dest in files])
    wanted_mode = mode.lstrip("0")
    stale = [(src, dest) for src, dest in files if _differs(remote.get(dest), _digest(src))]
    modes = [dest for src, dest in files if (src, dest) not in stale and remote[dest]["mode"] != wanted_mode]
    if not stale and not modes:
        host.noop(f"{len(files)} scripts are up to date")
        return
    directories = sorted({dest.rsplit("/", 1)[0] for _, dest in stale})
    if directories:
        yield "mkdir -p " + " ".join(shlex.quote(directory) for directory in directories)
    for src, dest in stale:
        yield FileUploadCommand(str(src), dest, remote_temp_filename=host.get_temp_filename(dest))
    changed = [dest for _, dest in stale] + modes
    yield f"chmod {mode} " + " ".join(shlex.quote(dest) for dest in changed)
