"""The last known good's record on disk: where it is, reading it, replacing it whole.

A record is a directory D holding a copy of each file of the configuration and manifest.json,
written last: a record is complete when its manifest is there and every copy hashes to what
the manifest says. `replace` writes a new record in the sibling D.new and flushes it, then
swaps by rename (D -> D.old, D.new -> D) and removes D.old only after. Killed at any step, a
complete record remains: D, or D.old in the instant between the two renames (`locate` falls
back to it; the next `replace` puts it back). Standard library only (lastgood.py writes
records, venvs.py and decode_check.py read them).
"""

import hashlib
import json
import os
import shutil

MANIFEST = "manifest.json"
NEW = ".new"  # D.new: the record being written
OLD = ".old"  # D.old: the record being replaced, until the new one is in place

# Where saves went, beside our scripts: a person on the node runs `lastgood.py show` without
# knowing the deploy's state directory, and pruning finds every service's record.
SAVED_DIRS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "last-good-dirs.json")


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def locate(directory):
    """The directory holding ``directory``'s record: itself, or the previous record a save
    killed between its two renames left at D.old; None when there is none."""
    for candidate in (directory, directory + OLD):
        if os.path.isfile(os.path.join(candidate, MANIFEST)):
            return candidate
    return None


def load(directory):
    """The manifest of the record at ``directory`` (see ``locate``), or None."""
    where = locate(directory)
    if where is None:
        return None
    with open(os.path.join(where, MANIFEST)) as f:
        return json.load(f)


def incomplete(where, manifest):
    """Why the record at ``where`` cannot be restored as it is (copies missing or differing
    from the manifest), as short phrases; empty when it is whole."""
    found = []
    for role, entry in sorted(manifest.get("files", {}).items()):
        copy = os.path.join(where, role)
        if not os.path.isfile(copy):
            found.append("%s: its saved copy is missing" % role)
        elif sha256(copy) != entry.get("sha256"):
            found.append("%s: its saved copy differs from the manifest" % role)
    return found


def _fsync(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(path):
    if os.path.islink(path) or os.path.isfile(path):
        os.unlink(path)
    elif os.path.isdir(path):
        shutil.rmtree(path)


def recover(directory):
    """Put back the previous record a save killed between its renames left at D.old."""
    if locate(directory) == directory + OLD:
        _remove(directory)  # a directory without a manifest is no record
        os.rename(directory + OLD, directory)
        _fsync(os.path.dirname(directory) or ".")


def replace(directory, fill):
    """Replace the record at ``directory`` by a new one: ``fill(staging)`` writes the copies
    into the staging directory and returns the manifest, written last. Every step leaves a
    complete record (the old one until the swap, the new one after it)."""
    recover(directory)
    staging = directory + NEW
    _remove(staging)  # what a save killed earlier left half-written
    os.makedirs(staging, mode=0o700)
    manifest = fill(staging)
    for name in os.listdir(staging):
        _fsync(os.path.join(staging, name))
    with open(os.path.join(staging, MANIFEST + ".tmp"), "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(os.path.join(staging, MANIFEST + ".tmp"), os.path.join(staging, MANIFEST))
    _fsync(staging)
    old = directory + OLD
    if os.path.isdir(directory):
        _remove(old)
        os.rename(directory, old)
    os.rename(staging, directory)
    _fsync(os.path.dirname(directory) or ".")
    _remove(old)
    return manifest


def saved_dirs(record=None):
    """Every directory a save on this node wrote its record in."""
    try:
        with open(record or SAVED_DIRS) as f:
            return json.load(f)
    except (OSError, ValueError):
        return []


def remember(directory, record=None):
    record = record or SAVED_DIRS
    known = saved_dirs(record)
    if directory not in known:
        with open(record + ".tmp", "w") as f:
            json.dump(sorted(known + [directory]), f)
        os.replace(record + ".tmp", record)
