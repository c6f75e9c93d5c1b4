"""The engine's manifest: name, version and sha256 of RECORD per distribution.

Cheap (reads the RECORD files only, hashes nothing else); record_sha256 is null without a
RECORD, and leaves out what an installer wrote about the install (uv's uv_cache.json). The
controller stores it per deploy, so two nodes or two dates can be diffed. Printed by
`drift.py --manifest`.

Standard library only, Python >= 3.9.
"""

import hashlib
import sys

from . import installed, record, status

# A file an installer writes about the install, not the distribution: uv's records the time
# its cache unpacked the wheel, so venvs built from one lock at two moments would differ.
INSTALL_TIME_FILES = (b".dist-info/uv_cache.json,",)


def record_digest(record_bytes):
    """sha256 of a RECORD without its lines for INSTALL_TIME_FILES (the same bytes' digest
    when it has none, as pip writes it)."""
    lines = record_bytes.splitlines(keepends=True)
    kept = [line for line in lines if not any(name in line for name in INSTALL_TIME_FILES)]
    return hashlib.sha256(b"".join(kept)).hexdigest()


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
                digest = record_digest(fh.read())
        entries.append({"name": dist.metadata["Name"], "version": dist.version, "record_sha256": digest})
    entries.sort(key=lambda e: installed.canonical(e["name"]))
    return {
        "manifest": entries,
        "missing_distributions": missing,
        "python": sys.executable,
        "status": status.NOT_INSTALLED if missing else status.READY,
    }
