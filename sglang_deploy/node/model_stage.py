"""Stage a model directory on the node: never half a model where the server reads it, and
the weights it served kept until the new ones are recorded as the last known good.

    python3 model_stage.py state --dir /models/m [--deep]
    python3 model_stage.py seed --dir /models/m [--deep]
    python3 model_stage.py finish --dir /models/m [--in-place | --now]
    python3 model_stage.py pending --dir /models/m
    python3 model_stage.py drop-live --dir /models/m
    python3 model_stage.py swap --want-json '{"/models/m": SOURCE, ...}'

Files arrive in a sibling, `<dir>.sglang-deploy-staging/` (same filesystem, so the swap's
renames are atomic), which holds the new manifest first. `state` says what the node has (the
live manifest's digest, the staging directory's files, a staged model that waits, the previous
weights, free disk, rsync); `seed` hard-links into the staging directory the live files the new
manifest lists unchanged (a repair or a new revision copies only what differs); `finish` hashes
every staged file against the manifest, removes what does not match (naming it) and, only when
all match, marks the staging directory verified: a staged model that waits for the restart.
`pending` confirms one waits (cheaply: its sizes), so a deploy killed after staging still
restarts on the next run. The restart cycle's model step, `swap`, runs after preflight passed:
live -> `<dir>.sglang-deploy-previous`, staged -> live (two renames, no copy). The previous
weights stay until the new configuration is recorded as the last known good (lastgood.py save
removes them); a rollback renames them back (`restore_weights`). Until the swap the live
directory is untouched: a copy that dies halfway, a corrupt shard or a full disk leave the node
serving what it served; a staging directory left by a copy that died is where the next run
resumes.

Where the disk cannot hold both copies, the deploy setting `model_keep_previous: false` stages
the other way: `drop-live` removes the live files first (the running server keeps its open
files; the new manifest's unchanged ones stay as hard links) and `finish --in-place` swaps at
once, the old weights gone: no weight rollback. A serving group's restart has no model step:
its members swap with `finish --now` (the old weights kept for a rollback all the same).

A model directory that is a symlink (`/models/m -> /nvme/m`) is staged at its target: the
staging and previous siblings are beside the target (`/nvme/m.sglang-deploy-staging`) and the
link stays. A target that is itself a mount point (a disk of its own, a bind mount) cannot be
renamed (EBUSY) and its siblings would be on the parent's disk: its copies are inside it
(`/models/m/.sglang-deploy-staging`, `.sglang-deploy-previous`), and a swap renames its entries
(node/lib/mount_swap.py: journaled, a swap killed halfway is finished by the next call before
anything is read). `state` names the places (`target`, `staging`, `previous_dir`), the free
space where the new weights land, and a `layout_problem` where nothing works: the controller
copies into that staging directory, or stops before anything is touched. Whatever fails, the
script ends with its result line and a cause.
"""

import argparse
import json
import os
import shutil
import sys

if __package__:
    from . import model_manifest
    from .lib import mount_swap, result, status
    from .lib.guard import guarded
    from .lib.model_places import (
        OLD_SUFFIX,
        PREVIOUS_SUFFIX,
        RESERVED,
        STAGING_SUFFIX,
        VERIFIED,
        layout_problem,
        nested,
        previous_dir,
        staged_at,
        staging_dir,
        staging_of,
    )
else:  # run as a script: our scripts' directory is on sys.path
    import model_manifest
    from lib import mount_swap, result, status
    from lib.guard import guarded
    from lib.model_places import (
        OLD_SUFFIX,
        PREVIOUS_SUFFIX,
        RESERVED,
        STAGING_SUFFIX,
        VERIFIED,
        layout_problem,
        nested,
        previous_dir,
        staged_at,
        staging_dir,
        staging_of,
    )


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


def pending(directory):
    """The manifest of a staged model that waits for the restart's swap (verified by finish,
    every file still its size), or None."""
    settle(directory)
    staging = staging_of(directory)
    manifest = model_manifest.read(staging)
    if not manifest or not manifest.get(VERIFIED) or model_manifest.compare(manifest, staging):
        return None
    return manifest


def _digest_of(directory):
    manifest = model_manifest.read(directory) if os.path.isdir(directory) else None
    return model_manifest.digest(manifest) if manifest else None


def own_bytes(directory):
    """What removing ``directory`` frees: its files no other directory links to."""
    found = 0
    for root, _, files in os.walk(directory):
        for name in files:
            info = os.lstat(os.path.join(root, name))
            found += info.st_size if info.st_nlink == 1 else 0
    return found


def state(directory, deep=False):
    """What the node holds for ``directory``: the live manifest's digest and its files'
    problems (sizes; hashes when ``deep``), the staging directory's files, a staged model that
    waits (its digest and source), the previous weights, free disk (the filesystem the new
    weights land on)."""
    settle(directory)
    live = model_manifest.read(directory) if os.path.isdir(directory) else None
    staging = staging_of(directory)
    staged = model_manifest.listing(staging) if os.path.isdir(staging) else []
    waiting = pending(directory)
    previous = previous_dir(directory)
    return {
        "dir": directory,
        "target": staged_at(directory),
        "staging": staging,
        "previous_dir": previous,
        "layout_problem": layout_problem(directory),
        "exists": os.path.isdir(directory),
        "digest": model_manifest.digest(live) if live else None,
        "source": (live or {}).get("source"),
        "live_files": (live or {}).get("files", []),
        "problems": model_manifest.compare(live, directory, deep=deep) if live else [],
        "staged": [[path, size] for path, size in staged],
        "pending": model_manifest.digest(waiting) if waiting else None,
        "pending_source": (waiting or {}).get("source"),
        "previous": _digest_of(previous),
        "previous_bytes": own_bytes(previous) if os.path.isdir(previous) else 0,
        "free": free_bytes(staging),
        "rsync": shutil.which("rsync") is not None,
    }


def seed(directory, deep=False):
    """Hard-link into the staging directory every live file the new manifest lists with the
    same size and sha256 as the live manifest (and, ``deep``, as the file really hashes);
    returns the paths linked."""
    new = model_manifest.read(staging_of(directory))
    if new is None:
        return []
    return link_unchanged(directory, {e["path"]: (e["size"], e["sha256"]) for e in new["files"]}, deep)


def link_unchanged(directory, wanted, deep=False):
    """Hard-link into the staging directory every file of ``wanted`` ({path: (size, sha256)},
    the new model's) that the live manifest lists at that path with the same size and sha256
    (and, ``deep``, that really hashes so): a new revision or a repair fetches only what
    differs. Returns the paths linked."""
    staging = staging_of(directory)
    _drop_strays(staged_at(directory))
    live = model_manifest.read(directory)
    if live is None:
        return []
    bad = {p.split(":", 1)[0] for p in model_manifest.compare(live, directory, deep=deep)}
    known = {(e["path"], e["size"], e["sha256"]) for e in live["files"]}
    linked = []
    for path, (size, sha256) in sorted(wanted.items()):
        target = os.path.join(staging, path)
        if (path, size, sha256) not in known or path in bad or os.path.exists(target):
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.link(os.path.join(directory, path), target)
        linked.append(path)
    return linked


def finish(directory, in_place=False, now=False):
    """Verify the staging directory against its manifest (every file hashed); remove what
    does not match or is not listed; when everything matches, mark it verified: it waits for
    the restart's swap (``now``: swapped now; ``in_place``: swapped now, the old weights
    removed)."""
    staging = staging_of(directory)
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
    model_manifest.write(staging, dict(manifest, **{VERIFIED: True}))
    if _digest_of(staged_at(directory)) == model_manifest.digest(manifest):
        # A repair: the same weights with the damaged files replaced, nothing for a restart to
        # swap in; the damaged copy is nothing to roll back to.
        _swap_in(directory, keep_previous=False)
        print("model: %s repaired: its damaged files replaced" % directory)
    elif in_place or now:
        _swap_in(directory, keep_previous=not in_place)
    return []


def _swap_in(directory, keep_previous=True):
    """live -> previous, staged -> live (renames on the target's filesystem; a symlink at
    ``directory`` stays). An older previous goes first: one set of old weights is kept."""
    target = staged_at(directory)
    previous = previous_dir(directory)
    if nested(target):
        _remove(previous)
        _exchange(target, PREVIOUS_SUFFIX, STAGING_SUFFIX)
    else:
        _remove(target + OLD_SUFFIX)  # a link an earlier release left here is removed, never followed
        if os.path.isdir(target):
            _remove(previous)
            os.rename(target, previous)
        # Killed here: no live directory, the staged one waits: the next swap (or restore) ends it.
        os.rename(staging_dir(target), target)
        mount_swap.fsync_dir(os.path.dirname(target) or "/")
    if not keep_previous:
        _remove(previous)  # a running server keeps its open files


def _exchange(target, out, into):
    """A mount point's entries into ``target/out``, then ``target/into``'s up (the manifest
    out first, in last)."""
    mount_swap.exchange(target, out, into, RESERVED, first=model_manifest.MANIFEST_NAME)


def settle(directory):
    """Finish a mount point's swap killed halfway: nothing reads half a model."""
    return mount_swap.settle(staged_at(directory), RESERVED, first=model_manifest.MANIFEST_NAME)


def _drop_strays(target):
    """A mount point's copies beside it, on the parent's disk (an earlier release's): removed."""
    if not nested(target):
        return
    for stray in (target + STAGING_SUFFIX, target + PREVIOUS_SUFFIX):
        if os.path.lexists(stray):
            _remove(stray)
            print("model: %s removed: a copy beside a mount point, on another filesystem" % stray)


def swap(wanted):
    """The restart cycle's model step: swap in every staged model that waits and is the one
    the profile stages (``wanted``: {dir: the manifest's source}; a staged model of another
    source was left by an abandoned deploy and stays out). Returns the directories swapped."""
    swapped = []
    for directory, source in sorted(wanted.items()):
        waiting = pending(directory)
        if waiting is None:
            continue
        if source is not None and waiting.get("source") != source:
            print("model: %s holds a staged model of another source: not swapped" % directory)
            continue
        if _digest_of(staged_at(directory)) == model_manifest.digest(waiting):
            _remove(staging_of(directory))  # the live copy is this one already
            continue
        _swap_in(directory)
        print("model: %s swapped in (the old weights kept at %s)" % (directory, previous_dir(directory)))
        swapped.append(directory)
    return swapped


def drop_live(directory):
    """Remove the live weights before staging where the disk cannot hold both copies
    (model_keep_previous: false): the new manifest's unchanged files stay as the staging
    directory's hard links, a running server keeps its open files; no rollback of weights."""
    target = staged_at(directory)
    settle(directory)
    _remove(previous_dir(directory))
    if nested(target):  # the mount point stays, and the staging directory inside it
        for name in mount_swap.entries(target, RESERVED):
            _remove(os.path.join(target, name))
    elif os.path.isdir(target):
        shutil.rmtree(target)


def forget_previous(directory, recorded):
    """The new configuration is the last known good (its weights' digest ``recorded``): the
    previous weights are no longer needed. Returns whether they were removed."""
    settle(directory)
    previous = previous_dir(directory)
    if not os.path.isdir(previous) or _digest_of(staged_at(directory)) != recorded:
        return False
    shutil.rmtree(previous)
    return True


def restore_weights(directory, recorded):
    """A rollback's weights: when the live directory does not hold the ``recorded`` digest and
    the previous one does, swap them back by renames (the new weights become the staged model
    again, so a retry copies nothing). Returns a phrase saying what was done, or None."""
    settle(directory)
    target = staged_at(directory)
    live = _digest_of(target)
    if recorded is None or live == recorded:
        return None
    previous = previous_dir(directory)
    if _digest_of(previous) != recorded:
        return "%s not restored: it holds %s, the last known good ran %s and %s does not hold it" % (
            directory,
            (live or "no manifest")[:12],
            recorded[:12],
            previous,
        )
    if nested(target):
        _remove(staging_of(directory))
        _exchange(target, STAGING_SUFFIX, PREVIOUS_SUFFIX)
    else:
        if os.path.isdir(target):
            staging = staging_dir(target)
            _remove(staging)
            os.rename(target, staging)
        os.rename(previous, target)
        mount_swap.fsync_dir(os.path.dirname(target) or "/")
    return "%s: the weights of the last known good (%s) renamed back" % (directory, recorded[:12])


@guarded
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["state", "seed", "finish", "pending", "drop-live", "swap"])
    parser.add_argument("--dir")
    parser.add_argument("--deep", action="store_true", help="hash the live files too")
    parser.add_argument("--in-place", action="store_true", help="finish: swap now, the old weights removed")
    parser.add_argument("--now", action="store_true", help="finish: swap now, the old weights kept")
    parser.add_argument("--want-json", help="swap: {dir: the source its staged model must have}")
    args = parser.parse_args(argv)
    if args.action == "swap":
        swapped = swap(json.loads(args.want_json or "{}"))
        if not swapped:
            print("model: no staged model waits")
        return result.emit(status.READY, None, swapped=swapped)
    if not args.dir:
        parser.error("%s needs --dir" % args.action)
    directory = args.dir.rstrip("/")
    if args.action == "state":
        return result.emit(status.READY, None, **state(directory, deep=args.deep))
    if args.action == "seed":
        linked = seed(directory, deep=args.deep)
        print("model: %d file(s) kept from %s" % (len(linked), directory))
        return result.emit(status.READY, None, linked=linked)
    if args.action == "pending":
        waiting = pending(directory)
        if waiting is None:
            cause = "%s: no verified staged model waits (removed since?): the next run stages it" % directory
            return result.emit(status.MODEL_MISMATCH, cause)
        print("model: %s staged and verified, swapped in at the restart" % directory)
        return result.emit(status.READY, None, pending=model_manifest.digest(waiting))
    if args.action == "drop-live":
        drop_live(directory)
        print("model: %s removed to make room (model_keep_previous: false)" % directory)
        return result.emit(status.READY, None)
    problems = finish(directory, in_place=args.in_place, now=args.now)
    for problem in problems:
        print("model file %s" % problem, file=sys.stderr)
    if problems:
        cause = model_manifest.describe(problems, staging_of(directory))
        print("staging failed: %s" % cause, file=sys.stderr)
        return result.emit(status.MODEL_MISMATCH, cause, problems=problems)
    if pending(directory) is None:  # swapped in already (--in-place, --now, or a repair)
        print("model: %s staged, verified and swapped in" % directory)
    else:
        print("model: %s staged and verified: swapped in at the restart, after preflight" % directory)
    return result.emit(status.READY, None, problems=[])


if __name__ == "__main__":
    sys.exit(main())
