"""The wheelhouse on a node: only the wheels it lacks are uploaded, found by one command that
hashes what is there (as script_upload.py does for our scripts), and the lock beside them."""

import shlex

from pyinfra import host
from pyinfra.api import operation
from pyinfra.api.command import FileUploadCommand

from sglang_deploy.facts.serving import FileDigests
from sglang_deploy.plan.wheelhouse import sha256


def wheels_to_upload(local, remote_dir, remote):
    """The (local path, remote path) of ``local`` ({path: sha256}) that ``remote`` (FileDigests
    of ``remote_dir``) lacks or holds with another sha256 (a partial or altered copy)."""
    wanted = [(path, f"{remote_dir}/{path.name}") for path in sorted(local, key=lambda p: p.name)]
    return [(path, dest) for path, dest in wanted if remote.get(dest, {}).get("sha256") != local[path]]


@operation()
def wheelhouse(wheels, remote_dir, lock, remote_lock):
    """
    Upload the wheels of ``wheels`` that ``remote_dir`` lacks, and the lock file.

    + wheels: local wheel paths (the lock's, checked by `make wheelhouse`, and uv's)
    + remote_dir: the node's wheelhouse directory for this lock
    + lock: the local lock file
    + remote_lock: where it goes on the node
    """
    local = {path: sha256(path) for path in wheels}
    files = {**local, lock: sha256(lock)}
    dests = [f"{remote_dir}/{p.name}" for p in local] + [remote_lock]
    remote = host.get_fact(FileDigests, paths=dests)
    stale = wheels_to_upload(local, remote_dir, remote)
    if remote.get(remote_lock, {}).get("sha256") != files[lock]:
        stale.append((lock, remote_lock))
    if not stale:
        host.noop(f"{remote_dir} holds the {len(local)} wheels of {lock.name}")
        return
    directories = sorted({dest.rsplit("/", 1)[0] for _, dest in stale})
    yield "mkdir -p " + " ".join(shlex.quote(d) for d in directories)
    for src, dest in stale:
        yield FileUploadCommand(str(src), dest, remote_temp_filename=host.get_temp_filename(dest))
