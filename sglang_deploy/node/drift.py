"""What is installed, and whether it is still what pip installed: drift against RECORD.

Run BY THE VENV'S INTERPRETER, so that importlib.metadata sees that venv's site-packages:

    /opt/sglang/venv/bin/python drift.py sglang torch
    /opt/sglang/venv/bin/python drift.py --json --pins sglang==0.5.23 torch==2.9.1
    /opt/sglang/venv/bin/python drift.py --manifest sglang torch     # or: --manifest --all
    /opt/sglang/venv/bin/python drift.py --json sglang --textfile-service sglang --textfile-port 30000

For each named distribution, the files its RECORD lists (record.py: modified, missing,
unreadable, skipped) and the stray .py files in its package directories (strays.py: unexpected).

The result line (result.py) carries the report; --json prints only that line:
    {"distributions": {NAME: {"version", "files_checked", "modified": [...], "missing": [...],
                              "unexpected": [...], "unreadable": [...], "skipped": n,
                              "record": true|false, "version_mismatch": ... (only with --pins):
                              null or {"expected", "installed"}}},
     "missing_distributions": [...], "python": sys.executable, "seconds": t, "status": n}
--manifest prints only the result line, with engine_manifest.py's report
    {"manifest": [{"name", "version", "record_sha256"}...], "missing_distributions": [...],
     "python": sys.executable, "status": n}

With --textfile-service (not with --manifest), what the check found is the node's
sglang_deploy_drift_detected sample (lib/textfile.py, its own file in the node exporter's
textfile directory): 1 when the status is not clean (drift, a pin differs, no RECORD, a
distribution not installed: what preflight and `make verify` refuse), 0 when clean, labelled
venv: the name of the venv checked (the live link's target, or under preflight the venv about to
be switched in). Every drift check writes it, wherever it runs: it records what was found,
never a change of the deploy's.

Exit status (values and descriptions in status.py): status.READY when nothing differs;
status.DRIFT when a file is modified, missing, unexpected or unreadable, a pin differs, or a
distribution has no RECORD (cannot be verified); status.NOT_INSTALLED when a named distribution
is not installed (wins over DRIFT).

Standard library only, Python >= 3.9.
"""

import argparse
import os
import sys
import time

if __package__:
    from .lib import engine_manifest, installed, record, result, status, strays, textfile
else:  # run as a script: our scripts' directory is on sys.path
    from lib import engine_manifest, installed, record, result, status, strays, textfile

CLEAN = status.READY
DRIFT = status.DRIFT
NOT_INSTALLED = status.NOT_INSTALLED


def check_distributions(dists, workers=record.DEFAULT_WORKERS, owners=None):
    """{name: Distribution} -> {name: report without version_mismatch} (see the module docstring).

    One thread pool over the files of all of them: a venv's largest files (CUDA libraries) are
    spread over several distributions, and each file's sha256 is sequential work.
    """
    owners = owners or strays.Owners()
    records = {name: record.read_record(dist) for name, dist in dists.items()}
    entries, skipped = [], {}
    for name, dist in dists.items():
        if records[name] is not None:
            mine, skipped[name] = record.record_entries(dist, records[name], name)
            entries += mine
    bad = {}
    for verdict, tag, rel, _detail in record.run_checks(entries, workers):
        bad.setdefault((tag, verdict), []).append(rel)
    checked = {}
    for entry in entries:
        checked[entry[0]] = checked.get(entry[0], 0) + 1
    reports = {}
    for name, dist in dists.items():
        if records[name] is None:
            reports[name] = {
                "version": dist.version,
                "record": False,
                "files_checked": 0,
                "modified": [],
                "missing": [],
                "unexpected": [],
                "unreadable": [],
                "skipped": 0,
            }
            continue
        report = {
            "version": dist.version,
            "record": True,
            "files_checked": checked.get(name, 0),
            "skipped": skipped[name],
        }
        for verdict in ("modified", "missing", "unreadable"):
            report[verdict] = sorted(bad.get((name, verdict), []))
        report["unexpected"] = strays.unexpected_files(dist, records[name], owners)
        reports[name] = report
    return reports


def check_distribution(dist, workers=record.DEFAULT_WORKERS, owners=None):
    """One distribution's report (see the module docstring), without version_mismatch."""
    return check_distributions({"": dist}, workers, owners)[""]


def drifted(report):
    return bool(
        not report["record"]
        or report["modified"]
        or report["missing"]
        or report["unexpected"]
        or report["unreadable"]
        or report.get("version_mismatch")
    )


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


def drift(names, pins=None, workers=record.DEFAULT_WORKERS, everything=False):
    """The --json report for the named distributions (and those pinned), with 'status'."""
    started = time.monotonic()
    pins = pins or {}
    present = installed.installed_distributions()
    result = {"distributions": {}, "missing_distributions": [], "python": sys.executable}
    found = {}
    for name in installed.wanted_names(list(names) + list(pins), present, everything):
        dist = present.get(installed.canonical(name))
        if dist is None:
            result["missing_distributions"].append(name)
        else:
            found[name] = dist
    for name, report in check_distributions(found, workers).items():
        if pins:
            pin = next(
                (v for k, v in pins.items() if installed.canonical(k) == installed.canonical(name)), None
            )
            report["version_mismatch"] = (
                None
                if pin is None or same_version(pin, report["version"])
                else {"expected": pin, "installed": report["version"]}
            )
        result["distributions"][name] = report
    result["seconds"] = round(time.monotonic() - started, 3)
    if result["missing_distributions"]:
        result["status"] = NOT_INSTALLED
    elif any(drifted(r) for r in result["distributions"].values()):
        result["status"] = DRIFT
    else:
        result["status"] = CLEAN
    return result


def export(found, args):
    """What a drift() report found, as the node's drift sample (see the module's docstring)."""
    venv = os.path.basename(os.path.realpath(sys.prefix))
    textfile.export(args, "drift_detected", 0 if found["status"] == CLEAN else 1, {"venv": venv})


def report_lines(result, limit=20):
    """Human-readable lines for a drift() result; at most `limit` paths per list."""
    lines = []
    for name, r in result["distributions"].items():
        if not r["record"]:
            lines.append("%s %s: no RECORD, cannot be verified" % (name, r["version"]))
            continue
        head = "%s %s: %d files checked, %d modified, %d missing, %d unexpected, %d skipped" % (
            name,
            r["version"],
            r["files_checked"],
            len(r["modified"]),
            len(r["missing"]),
            len(r["unexpected"]),
            r["skipped"],
        )
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
    verdict = {
        CLEAN: "clean",
        DRIFT: "drift found in %d of %d distributions" % (bad, len(result["distributions"])),
        NOT_INSTALLED: "not installed: %s" % ", ".join(result["missing_distributions"]),
    }[result["status"]]
    lines.append("%s (%.2fs, %s)" % (verdict, result["seconds"], result["python"]))
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Compare installed distributions with their RECORD (run by the venv's interpreter)."
    )
    parser.add_argument("names", nargs="*", metavar="DIST", help="distribution names")
    parser.add_argument(
        "--pins",
        nargs="+",
        default=[],
        metavar="NAME==VERSION",
        help="also report version_mismatch; pinned names are checked too",
    )
    parser.add_argument(
        "--manifest", action="store_true", help="print name, version, sha256 of RECORD only (always JSON)"
    )
    parser.add_argument("--all", action="store_true", help="every installed distribution")
    parser.add_argument("--json", action="store_true", help="print the JSON report instead of lines")
    parser.add_argument(
        "--workers", type=int, default=record.DEFAULT_WORKERS, help="hashing threads (1: none)"
    )
    textfile.add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        pins = parse_pins(args.pins)
    except ValueError as exc:
        parser.error(str(exc))
    if not (args.names or pins or args.all):
        parser.error("name at least one distribution (or --pins, or --all)")
    if args.manifest:
        found = engine_manifest.manifest(list(args.names) + list(pins), everything=args.all)
        return result.emit(found["status"], _missing(found), **found)
    found = drift(args.names, pins, workers=max(1, args.workers), everything=args.all)
    export(found, args)
    lines = report_lines(found)
    if not args.json:  # --json: the result line alone, the report in it
        for line in lines:
            print(line)
    return result.emit(found["status"], None if found["status"] == CLEAN else lines[-1], **found)


def _missing(found):
    missing = found["missing_distributions"]
    return "not installed: %s" % ", ".join(missing) if missing else None


if __name__ == "__main__":
    sys.exit(main())
