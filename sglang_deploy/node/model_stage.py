"""Stage a model directory on the node: never half a model where the server reads it.

    python3 model_stage.py state --dir /models/m [--deep]
    python3 model_stage.py seed --dir /models/m [--deep]
    python3 model_stage.py finish --dir /models/m

Files arrive in a sibling, `<dir>.sglang-deploy-staging/` (same filesystem, so the final
rename is atomic), which holds the new manifest first. `state` says what the node has (the live
manifest's digest, the staging directory's files, free disk, rsync); `seed` hard-links into the
staging directory the live files the new manifest lists unchanged (a repair or a new revision
copies only what differs); `finish` hashes every staged file against the manifest, removes
what does not match (naming it) and, only when all match, swaps the staging directory into
place. Until then the live directory is untouched: a copy that dies halfway, a corrupt shard
or a full disk leave the node serving what it served. A staging directory left by a copy that
died is where the next run resumes.

A model directory that is a symlink (`/models/m -> /nvme/m`) is staged at its target: the
staging sibling is beside the target (`/nvme/m.sglang-deploy-staging`, the filesystem the swap
renames on) and the link stays. `state` names both (`target`, `staging`): the controller copies
into that staging directory. Whatever fails, the script ends with its result line and a cause.
"""

import argparse
import os
import shutil
import sys

if __package__:
    from . import model_manifest
    from .lib import result, status
    from .lib.guard import guarded
else:  # run as a script: our scripts' directory is on sys.path
    import model_manifest
    from lib import result, status
    from lib.guard import guarded

STAGING_SUFFIX = ".sglang-deploy-staging"
OLD_SUFFIX = ".sglang-deploy-old"


def staged_at(directory):
    """Where ``directory`` is staged and swapped: itself, or the target of a symlink there
    (the link stays; its target is replaced)."""
    directory = directory.rstrip("/") or "/"
    return os.path.realpath(directory) if os.path.islink(directory) else directory


def staging_dir(directory):
    """The staging sibling of ``directory`` as named (a path only: the controller asks it too;
    on the node, name ``staged_at(directory)``)."""
    return directory.rstrip("/") + STAGING_SUFFIX


def _remove(path):
    """Remove what is at ``path``: a link itself (never what it points at), a file, a tree."""
    if os.path.islink(path) or os.path.isfile(path):
        os.unlink(path)
    elif os.path.isdir(path):
        shutil.rmtree(path)


def free_bytes(path):
    while not os.path.exists(path):
        path = os.path.dirname(path) or "/"
    return shutil.disk_usage(path).free


def state(directory, deep=False):
    """What the node holds for ``directory``: the live manifest's digest and its files'
    problems (sizes; hashes when ``deep``), the staging directory's files, free disk."""
    live = model_manifest.read(directory) if os.path.isdir(directory) else None
    staging = staging_dir(staged_at(directory))
    staged = model_manifest.listing(staging) if os.path.isdir(staging) else []
    return {
        "dir": directory,
        "target": staged_at(directory),
        "staging": staging,
        "exists": os.path.isdir(directory),
        "digest": model_manifest.digest(live) if live else None,
        "source": (live or {}).get("source"),
        "live_files": (live or {}).get("files", []),
        "problems": model_manifest.compare(live, directory, deep=deep) if live else [],
        "staged": [[path, size] for path, size in staged],
        "free": free_bytes(staging),
        "rsync": shutil.which("rsync") is not None,
    }


def seed(directory, deep=False):
    """Hard-link into the staging directory every live file the new manifest lists with the
    same size and sha256 as the live manifest (and, ``deep``, as the file really hashes);
    returns the paths linked."""
    staging = staging_dir(staged_at(directory))
    new, live = model_manifest.read(staging), model_manifest.read(directory)
    if new is None or live is None:
        return []
    bad = {p.split(":", 1)[0] for p in model_manifest.compare(live, directory, deep=deep)}
    known = {(e["path"], e["size"], e["sha256"]) for e in live["files"]}
    linked = []
    for entry in new["files"]:
        target = os.path.join(staging, entry["path"])
        if (entry["path"], entry["size"], entry["sha256"]) not in known or entry["path"] in bad:
            continue
        if os.path.exists(target):
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.link(os.path.join(directory, entry["path"]), target)
        linked.append(entry["path"])
    return linked


def finish(directory):
    """Verify the staging directory against its manifest (every file hashed); remove what
    does not match or is not listed; swap it into place when everything matches."""
    staging = staging_dir(staged_at(directory))
    manifest = model_manifest.read(staging)
    if manifest is None:
        return ["%s has no manifest: nothing was staged" % staging]
    problems = model_manifest.compare(manifest, staging, deep=True)
    listed = {entry["path"] for entry in manifest["files"]}
    for path, _ in model_manifest.listing(staging):
        if path not in listed:  # an upload's temporary file, a file the new model dropped
            os.unlink(os.path.join(staging, path))
    for problem in problems:
        path = os.path.join(staging, problem.split(":", 1)[0])
        if os.path.isfile(path):  # the next run copies it again
            os.unlink(path)
    if problems:
        return problems
    shutil.rmtree(os.path.join(staging, ".rsync-partial"), ignore_errors=True)
    model_manifest.write(staging, manifest)
    target = staged_at(directory)  # a link's target: renamed on its own filesystem, the link kept
    old = target + OLD_SUFFIX
    _remove(old)  # a link an earlier release left here is removed, never what it points at
    if os.path.isdir(target):
        os.rename(target, old)
    os.rename(staging, target)
    _remove(old)  # a running server keeps its open files
    return []


@guarded
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["state", "seed", "finish"])
    parser.add_argument("--dir", required=True)
    parser.add_argument("--deep", action="store_true", help="hash the live files too")
    args = parser.parse_args(argv)
    directory = args.dir.rstrip("/")
    if args.action == "state":
        return result.emit(status.READY, None, **state(directory, deep=args.deep))
    if args.action == "seed":
        linked = seed(directory, deep=args.deep)
        print("model: %d file(s) kept from %s" % (len(linked), directory))
        return result.emit(status.READY, None, linked=linked)
    problems = finish(directory)
    for problem in problems:
        print("model file %s" % problem, file=sys.stderr)
    if problems:
        cause = model_manifest.describe(problems, staging_dir(staged_at(directory)))
        print("staging failed: %s" % cause, file=sys.stderr)
        return result.emit(status.MODEL_MISMATCH, cause, problems=problems)
    print("model: %s staged and verified" % directory)
    return result.emit(status.READY, None, problems=[])


if __name__ == "__main__":
    sys.exit(main())
