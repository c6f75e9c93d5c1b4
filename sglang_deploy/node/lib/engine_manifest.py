"""The engine's manifest: name, version and sha256 of RECORD per distribution.

Cheap (reads the RECORD files only, hashes nothing else); record_sha256 is null without a
RECORD. The controller stores it per deploy, so two nodes or two dates can be diffed. Printed
by `drift.py --manifest`.

Standard library only, Python >= 3.9.
"""

import hashlib
import sys

from . import installed, record, status


def manifest(names, everything=False):
    """The --manifest report: name, version and sha256 of RECORD per distribution, with 'status'."""
    found = installed.installed_distributions()
    entries, missing = [], []
    for name in installed.wanted_names(names, found, everything):
        dist = found.get(installed.canonical(name))
        if dist is None:
            missing.append(name)
            continue
        path = record.record_path(dist, record.read_record(dist))
        digest = None
        if path is not None:
            with open(path, "rb") as fh:
                digest = hashlib.sha256(fh.read()).hexdigest()
        entries.append({"name": dist.metadata["Name"], "version": dist.version, "record_sha256": digest})
    entries.sort(key=lambda e: installed.canonical(e["name"]))
    return {
        "manifest": entries,
        "missing_distributions": missing,
        "python": sys.executable,
        "status": status.NOT_INSTALLED if missing else status.READY,
    }
