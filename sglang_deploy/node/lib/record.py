"""A distribution's RECORD, read and parsed, and the files it lists checked against their hashes.

For each file listed with a hash the file on disk is compared (a size difference alone already
means modified; otherwise its digest, read with a large buffer, a few files at a time in a
small thread pool): `modified` (present, contents differ), `missing`, or `unreadable`. Files
listed without a hash (RECORD itself, INSTALLER, *.pyc, ...) are skipped and counted. Paths are
RECORD paths: relative to site-packages, '/'-separated.

RECORD is read and parsed here, not through Distribution.files: from Python 3.12 on that list
silently leaves out the files that no longer exist (and stats every file to do so).

Standard library only, Python >= 3.9.
"""

import base64
import csv
import hashlib
import os
from concurrent.futures import ThreadPoolExecutor

BUFFER_SIZE = 1 << 20  # files are read 1 MiB at a time, into one buffer per thread
SMALL_FILE = 1 << 20  # larger files get a thread-pool task of their own
CHUNK_FILES = 64  # files per thread-pool task
DEFAULT_WORKERS = min(8, os.cpu_count() or 1)


def site_root(dist):
    """The directory RECORD paths are relative to (site-packages)."""
    return os.path.normpath(str(dist.locate_file("")))


def rel_key(path):
    """A RECORD path normalised for comparison ('a/./b' -> 'a/b')."""
    return os.path.normpath(str(path)).replace(os.sep, "/")


def read_record(dist):
    """RECORD as [(path, hash mode or None, urlsafe-b64 digest or None, size or None)]; None without one."""
    text = dist.read_text("RECORD")
    if text is None:
        return None
    rows = []
    for row in csv.reader(text.splitlines()):
        if not row or not row[0]:
            continue
        mode, _, value = (row[1] if len(row) > 1 else "").partition("=")
        size = row[2].strip() if len(row) > 2 else ""
        rows.append(
            (row[0], mode.lower() if value else None, value or None, int(size) if size.isdigit() else None)
        )
    return rows


def record_path(dist, rows):
    """Absolute path of the distribution's RECORD file, or None."""
    for path, _mode, _value, _size in rows or ():
        parts = rel_key(path).split("/")
        if len(parts) == 2 and parts[0].endswith(".dist-info") and parts[1] == "RECORD":
            return os.path.join(site_root(dist), *parts)
    base = getattr(dist, "_path", None)  # a dist-info directory whose RECORD does not list itself
    if base is not None and os.path.isfile(os.path.join(str(base), "RECORD")):
        return os.path.join(str(base), "RECORD")
    return None


def urlsafe_digest(digest):
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def file_digest(path, mode, buf):
    """urlsafe-base64 digest (no padding) of a file, read into one reused buffer.

    Reusing the buffer matters: a fresh bytes object per file of up to a megabyte costs more in
    page faults than the hashing itself.
    """
    h = hashlib.new(mode)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as fh:
        while True:
            n = fh.readinto(buf)
            if not n:
                break
            h.update(view[:n])
    return urlsafe_digest(h.digest())


def check_files(entries):
    """entries: [(tag, rel, abs_path, mode, b64, size_or_None)] -> [(verdict, tag, rel, detail)], bad ones only."""
    buf = bytearray(BUFFER_SIZE)
    bad = []
    for tag, rel, path, mode, want, size in entries:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            bad.append(("missing", tag, rel, None))
            continue
        except OSError as exc:
            bad.append(("unreadable", tag, rel, exc.strerror or str(exc)))
            continue
        if not os.path.isfile(path):
            bad.append(("missing", tag, rel, None))
            continue
        if size is not None and st.st_size != size:
            bad.append(("modified", tag, rel, None))
            continue
        try:
            if file_digest(path, mode, buf) != want:
                bad.append(("modified", tag, rel, None))
        except OSError as exc:
            bad.append(("unreadable", tag, rel, exc.strerror or str(exc)))
    return bad


def record_entries(dist, rows, tag=None):
    """([(tag, rel, abs, mode, b64, size)], skipped count) for the RECORD rows that carry a hash."""
    root = site_root(dist)
    entries, skipped = [], 0
    for path, mode, value, size in rows:
        if not value or mode not in hashlib.algorithms_available:
            skipped += 1
            continue
        entries.append((tag, path, os.path.normpath(os.path.join(root, path)), mode, value, size))
    return entries, skipped


def run_checks(entries, workers):
    """check_files over all entries; with workers > 1 in a thread pool, largest files first.

    Hashing a large buffer releases the GIL, so one thread hashing a big shared library
    overlaps with others walking the many small files (whose per-file Python work does not
    overlap much): big files go first, one task each; small ones in chunks.
    """
    if workers <= 1 or len(entries) <= CHUNK_FILES:
        return check_files(entries)
    entries = sorted(entries, key=lambda e: e[5] or 0, reverse=True)
    big = [[e] for e in entries if (e[5] or 0) > SMALL_FILE]
    small = [e for e in entries if (e[5] or 0) <= SMALL_FILE]
    chunks = big + [small[i : i + CHUNK_FILES] for i in range(0, len(small), CHUNK_FILES)]
    bad = []
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for part in pool.map(check_files, chunks):
            bad.extend(part)
    return bad
