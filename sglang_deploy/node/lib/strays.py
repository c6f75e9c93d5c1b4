"""Stray files of a distribution: .py files inside one of its top-level package directories
(top_level.txt, or the first component of its RECORD paths) that no installed distribution's
RECORD lists (__pycache__ and *.pyc are ignored).

Standard library only, Python >= 3.9.
"""

import importlib.metadata
import os

from . import record


def top_level_dirs(dist, rows):
    """Top-level package directories of a distribution (names relative to site-packages)."""
    names = set()
    text = dist.read_text("top_level.txt")
    for line in (text or "").splitlines():
        line = line.strip().strip("/")
        if line:
            names.add(line.replace("\\", "/").split("/")[0])
    for path, _mode, _value, _size in rows:
        parts = record.rel_key(path).split("/")
        if len(parts) > 1:
            names.add(parts[0])
    root = record.site_root(dist)
    return sorted(
        n
        for n in names
        if n not in ("", ".", "..", "__pycache__")
        and not n.endswith((".dist-info", ".egg-info", ".data"))
        and os.path.isdir(os.path.join(root, n))
    )


def py_files_under(root, top):
    """RECORD-style paths of the .py files under root/top, __pycache__ directories skipped."""
    found = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in filenames:
            if name.endswith(".py"):
                found.append(record.rel_key(os.path.relpath(os.path.join(dirpath, name), root)))
    return found


class Owners:
    """RECORD paths of every installed distribution, per site-packages root, loaded on first use."""

    def __init__(self):
        self._by_root = None

    def owned(self, root):
        if self._by_root is None:
            self._by_root = {}
            for dist in importlib.metadata.distributions():
                paths = self._by_root.setdefault(record.site_root(dist), set())
                paths.update(record.rel_key(row[0]) for row in record.read_record(dist) or ())
        return self._by_root.get(root, set())


def unexpected_files(dist, rows, owners):
    root = record.site_root(dist)
    listed = {record.rel_key(row[0]) for row in rows}
    strays = [p for top in top_level_dirs(dist, rows) for p in py_files_under(root, top) if p not in listed]
    if strays:  # a namespace directory shared with other distributions: theirs are not strays
        others = owners.owned(root)
        strays = [p for p in strays if p not in others]
    return sorted(strays)
