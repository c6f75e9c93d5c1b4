"""What is installed, and whether it is still what pip installed: drift against RECORD.

Run BY THE VENV'S INTERPRETER, so that importlib.metadata sees that venv's site-packages:

    /opt/sglang/venv/bin/python drift.py sglang torch
    /opt/sglang/venv/bin/python drift.py --json --pins sglang==0.5.23 torch==2.9.1
    /opt/sglang/venv/bin/python drift.py --manifest sglang torch     # or: --manifest --all

For each named distribution every file listed with a hash in its RECORD is compared with the
file on disk (a size difference alone already means modified; otherwise sha256, read with a
large buffer, a few files at a time in a small thread pool):
    modified    listed, present, contents differ
    missing     listed, absent
    unexpected  a .py file inside one of the distribution's top-level package directories
                (top_level.txt, or the first component of its RECORD paths) that no installed
                distribution's RECORD lists (__pycache__ and *.pyc are ignored)
Files RECORD lists without a hash (RECORD itself, INSTALLER, *.pyc, ...) are skipped and counted.
Paths are RECORD paths: relative to site-packages, '/'-separated.

--json prints
    {"distributions": {NAME: {"version", "files_checked", "modified": [...], "missing": [...],
                              "unexpected": [...], "unreadable": [...], "skipped": n,
                              "record": true|false, "version_mismatch": ... (only with --pins):
                              null or {"expected", "installed"}}},
     "missing_distributions": [...], "python": sys.executable, "seconds": t, "status": n}
--manifest prints (cheap: reads the RECORD files only, hashes nothing else)
    {"manifest": [{"name", "version", "record_sha256"}...], "missing_distributions": [...],
     "python": sys.executable, "status": n}
record_sha256 is the sha256 of the RECORD file's bytes (null without a RECORD): the controller
stores the manifest per deploy, so two nodes or two dates can be diffed.

Exit status (defined here, because this script runs under the venv's interpreter on its own):
    CLEAN (0)          nothing differs
    DRIFT (3)          a file is modified, missing, unexpected or unreadable, a pin differs,
                       or a distribution has no RECORD (cannot be verified)
    NOT_INSTALLED (4)  a named distribution is not installed (wins over DRIFT)
    2 is argparse's usage error, 1 an unexpected error (uncaught exception).

RECORD is read and parsed here, not through Distribution.files: from Python 3.12 on that list
silently leaves out the files that no longer exist (and stats every file to do so).

Standard library only, Python >= 3.9.
"""
import argparse
import base64
import csv
import hashlib
import importlib.metadata
import json
import os
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor

if __package__:
    from . import status
else:  # run as a script: the siblings' directory is on sys.path
    import status

CLEAN = status.READY
DRIFT = status.DRIFT
NOT_INSTALLED = status.NOT_INSTALLED

BUFFER_SIZE = 1 << 20      # files are read 1 MiB at a time, into one buffer per thread
SMALL_FILE = 1 << 20       # larger files get a thread-pool task of their own
CHUNK_FILES = 64           # files per thread-pool task
DEFAULT_WORKERS = min(8, os.cpu_count() or 1)


def canonical(name):
    """PEP 503 normalised distribution name: 'Typing_Extensions' -> 'typing-extensions'."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_distributions():
    """{canonical name: Distribution}, the first one on sys.path winning (as imports do)."""
    found = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name and canonical(name) not in found:
            found[canonical(name)] = dist
    return found


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
        rows.append((row[0], mode.lower() if value else None, value or None, int(size) if size.isdigit() else None))
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


def top_level_dirs(dist, rows):
    """Top-level package directories of a distribution (names relative to site-packages)."""
    names = set()
    text = dist.read_text("top_level.txt")
    for line in (text or "").splitlines():
        line = line.strip().strip("/")
        if line:
            names.add(line.replace("\\", "/").split("/")[0])
    for path, _mode, _value, _size in rows:
        parts = rel_key(path).split("/")
        if len(parts) > 1:
            names.add(parts[0])
    root = site_root(dist)
    return sorted(
        n for n in names
        if n not in ("", ".", "..", "__pycache__") and not n.endswith((".dist-info", ".egg-info", ".data"))
        and os.path.isdir(os.path.join(root, n)))


def py_files_under(root, top):
    """RECORD-style paths of the .py files under root/top, __pycache__ directories skipped."""
    found = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in filenames:
            if name.endswith(".py"):
                found.append(rel_key(os.path.relpath(os.path.join(dirpath, name), root)))
    return found


class Owners:
    """RECORD paths of every installed distribution, per site-packages root, loaded on first use."""

    def __init__(self):
        self._by_root = None

    def owned(self, root):
        if self._by_root is None:
            self._by_root = {}
            for dist in importlib.metadata.distributions():
                paths = self._by_root.setdefault(site_root(dist), set())
                paths.update(rel_key(row[0]) for row in read_record(dist) or ())
        return self._by_root.get(root, set())


def unexpected_files(dist, rows, owners):
    root = site_root(dist)
    listed = {rel_key(row[0]) for row in rows}
    strays = [p for top in top_level_dirs(dist, rows) for p in py_files_under(root, top) if p not in listed]
    if strays:  # a namespace directory shared with other distributions: theirs are not strays
        others = owners.owned(root)
        strays = [p for p in strays if p not in others]
    return sorted(strays)


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
    chunks = big + [small[i:i + CHUNK_FILES] for i in range(0, len(small), CHUNK_FILES)]
    bad = []
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for part in pool.map(check_files, chunks):
            bad.extend(part)
    return bad


def check_distributions(dists, workers=DEFAULT_WORKERS, owners=None):
    """{name: Distribution} -> {name: report without version_mismatch} (see the module docstring).

    One thread pool over the files of all of them: a venv's largest files (CUDA libraries) are
    spread over several distributions, and each file's sha256 is sequential work.
    """
    owners = owners or Owners()
    records = {name: read_record(dist) for name, dist in dists.items()}
    entries, skipped = [], {}
    for name, dist in dists.items():
        if records[name] is not None:
            mine, skipped[name] = record_entries(dist, records[name], name)
            entries += mine
    bad = {}
    for verdict, tag, rel, _detail in run_checks(entries, workers):
        bad.setdefault((tag, verdict), []).append(rel)
    checked = {}
    for entry in entries:
        checked[entry[0]] = checked.get(entry[0], 0) + 1
    reports = {}
    for name, dist in dists.items():
        if records[name] is None:
            reports[name] = {"version": dist.version, "record": False, "files_checked": 0, "modified": [],
                             "missing": [], "unexpected": [], "unreadable": [], "skipped": 0}
            continue
        report = {"version": dist.version, "record": True, "files_checked": checked.get(name, 0),
                  "skipped": skipped[name]}
        for verdict in ("modified", "missing", "unreadable"):
            report[verdict] = sorted(bad.get((name, verdict), []))
        report["unexpected"] = unexpected_files(dist, records[name], owners)
        reports[name] = report
    return reports


def check_distribution(dist, workers=DEFAULT_WORKERS, owners=None):
    """One distribution's report (see the module docstring), without version_mismatch."""
    return check_distributions({"": dist}, workers, owners)[""]


def unique_names(names):
    """Names in order, the first spelling of each distribution kept ('torch', 'Torch' -> 'torch')."""
    seen, out = set(), []
    for name in names:
        if canonical(name) not in seen:
            seen.add(canonical(name))
            out.append(name)
    return out


def drifted(report):
    return bool(not report["record"] or report["modified"] or report["missing"] or report["unexpected"]
                or report["unreadable"] or report.get("version_mismatch"))


def parse_pins(pins):
    """['sglang==0.5.23', ...] -> {'sglang': '0.5.23'}; ValueError on anything but name==version."""
    parsed = {}
    for pin in pins:
        name, sep, version = pin.partition("==")
        if not sep or not name.strip() or not version.strip() or "=" in version:
            raise ValueError("pin %r is not name==version" % pin)
        parsed[name.strip()] = version.strip()
    return parsed


def same_version(expected, installed):
    return expected.strip().lower() == (installed or "").strip().lower()


def drift(names, pins=None, workers=DEFAULT_WORKERS, everything=False):
    """The --json report for the named distributions (and those pinned), with 'status'."""
    started = time.monotonic()
    pins = pins or {}
    installed = installed_distributions()
    wanted = unique_names(list(names) + list(pins))
    if everything:
        wanted += sorted(d.metadata["Name"] for k, d in installed.items()
                         if k not in {canonical(n) for n in wanted})
    result = {"distributions": {}, "missing_distributions": [], "python": sys.executable}
    found = {}
    for name in wanted:
        dist = installed.get(canonical(name))
        if dist is None:
            result["missing_distributions"].append(name)
        else:
            found[name] = dist
    for name, report in check_distributions(found, workers).items():
        if pins:
            pin = next((v for k, v in pins.items() if canonical(k) == canonical(name)), None)
            report["version_mismatch"] = (
                None if pin is None or same_version(pin, report["version"])
                else {"expected": pin, "installed": report["version"]})
        result["distributions"][name] = report
    result["seconds"] = round(time.monotonic() - started, 3)
    if result["missing_distributions"]:
        result["status"] = NOT_INSTALLED
    elif any(drifted(r) for r in result["distributions"].values()):
        result["status"] = DRIFT
    else:
        result["status"] = CLEAN
    return result


def manifest(names, everything=False):
    """The --manifest report: name, version and sha256 of RECORD per distribution, with 'status'."""
    installed = installed_distributions()
    wanted = unique_names(names)
    if everything:
        wanted += sorted(d.metadata["Name"] for k, d in installed.items()
                         if k not in {canonical(n) for n in wanted})
    entries, missing = [], []
    for name in wanted:
        dist = installed.get(canonical(name))
        if dist is None:
            missing.append(name)
            continue
        path = record_path(dist, read_record(dist))
        digest = None
        if path is not None:
            with open(path, "rb") as fh:
                digest = hashlib.sha256(fh.read()).hexdigest()
        entries.append({"name": dist.metadata["Name"], "version": dist.version, "record_sha256": digest})
    entries.sort(key=lambda e: canonical(e["name"]))
    return {"manifest": entries, "missing_distributions": missing, "python": sys.executable,
            "status": NOT_INSTALLED if missing else CLEAN}


def report_lines(result, limit=20):
    """Human-readable lines for a drift() result; at most `limit` paths per list."""
    lines = []
    for name, r in result["distributions"].items():
        if not r["record"]:
            lines.append("%s %s: no RECORD, cannot be verified" % (name, r["version"]))
            continue
        head = "%s %s: %d files checked, %d modified, %d missing, %d unexpected, %d skipped" % (
            name, r["version"], r["files_checked"], len(r["modified"]), len(r["missing"]),
            len(r["unexpected"]), r["skipped"])
        if r["unreadable"]:
            head += ", %d unreadable" % len(r["unreadable"])
        lines.append(head)
        mismatch = r.get("version_mismatch")
        if mismatch:
            lines.append("  version %s, pinned %s" % (mismatch["installed"], mismatch["expected"]))
        for verdict in ("modified", "missing", "unexpected", "unreadable"):
            paths = r[verdict]
            for path in paths[:limit]:
                lines.append("  %s %s" % (verdict, path))
            if len(paths) > limit:
                lines.append("  ... %d more %s" % (len(paths) - limit, verdict))
    for name in result["missing_distributions"]:
        lines.append("%s: not installed" % name)
    bad = sum(1 for r in result["distributions"].values() if drifted(r))
    verdict = {CLEAN: "clean", DRIFT: "drift found in %d of %d distributions" % (bad, len(result["distributions"])),
               NOT_INSTALLED: "not installed: %s" % ", ".join(result["missing_distributions"])}[result["status"]]
    lines.append("%s (%.2fs, %s)" % (verdict, result["seconds"], result["python"]))
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Compare installed distributions with their RECORD (run by the venv's interpreter).")
    parser.add_argument("names", nargs="*", metavar="DIST", help="distribution names")
    parser.add_argument("--pins", nargs="+", default=[], metavar="NAME==VERSION",
                        help="also report version_mismatch; pinned names are checked too")
    parser.add_argument("--manifest", action="store_true",
                        help="print name, version, sha256 of RECORD only (always JSON)")
    parser.add_argument("--all", action="store_true", help="every installed distribution")
    parser.add_argument("--json", action="store_true", help="print the JSON report instead of lines")
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS, help="hashing threads (1: none)")
    args = parser.parse_args(argv)
    try:
        pins = parse_pins(args.pins)
    except ValueError as exc:
        parser.error(str(exc))
    if not (args.names or pins or args.all):
        parser.error("name at least one distribution (or --pins, or --all)")
    if args.manifest:
        result = manifest(list(args.names) + list(pins), everything=args.all)
        print(json.dumps(result, indent=2, sort_keys=True))  # data for the controller: always JSON
        return result["status"]
    result = drift(args.names, pins, workers=max(1, args.workers), everything=args.all)
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        for line in report_lines(result):
            print(line)
    return result["status"]


if __name__ == "__main__":
    sys.exit(main())
