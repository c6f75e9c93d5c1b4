"""A directory's contents swapped where the directory itself cannot be renamed (a mount point:
rename(2) answers EBUSY): its entries renamed into a directory inside it, then another inside
directory's entries renamed up, all on the one filesystem (no copy). Not atomic as one rename
is, so journaled: the journal at its root, written (and synced) before the first rename, says
which half is under way, and ``settle`` finishes a swap that was killed halfway before anything
reads the directory again.

Standard library only, Python >= 3.9.
"""

import json
import os

JOURNAL = ".sglang-deploy-swap.json"


def fsync_dir(path):
    """A directory's entries (a rename into it) on disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def entries(target, keep=(), first=None):
    """The names at ``target``'s root that a swap moves (``keep`` and the journal left out);
    ``first`` leads, so a half-moved directory never holds it with only part of the rest."""
    names = [name for name in os.listdir(target) if name not in keep and not name.startswith(JOURNAL)]
    return sorted(names, key=lambda name: (name != first, name))


def _write_journal(target, journal):
    path = os.path.join(target, JOURNAL)
    with open(path + ".tmp", "w") as f:
        json.dump(journal, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)
    fsync_dir(target)


def exchange(target, out, into, keep=(), first=None):
    """``target``'s entries (not ``keep``) into ``target/out`` (created; ``first`` moved
    first), then ``target/into``'s entries up into ``target`` (``first`` last), ``into``
    removed. ``out`` and ``into`` are names of ``keep``."""
    settle(target, keep, first)
    _write_journal(target, {"out": out, "in": into, "phase": "out"})
    settle(target, keep, first)


def settle(target, keep=(), first=None):
    """Finish the swap the journal at ``target``'s root says was under way; returns whether
    there was one."""
    try:
        with open(os.path.join(target, JOURNAL)) as f:
            journal = json.load(f)
    except (OSError, ValueError):
        return False
    out, into = os.path.join(target, journal["out"]), os.path.join(target, journal["in"])
    if journal.get("phase") == "out":
        os.makedirs(out, exist_ok=True)
        for name in entries(target, keep, first):
            os.rename(os.path.join(target, name), os.path.join(out, name))
        fsync_dir(out)
        _write_journal(target, dict(journal, phase="in"))
    if os.path.isdir(into):
        for name in reversed(entries(into, (), first)):
            os.rename(os.path.join(into, name), os.path.join(target, name))
        os.rmdir(into)
    os.unlink(os.path.join(target, JOURNAL))
    fsync_dir(target)
    return True
