"""What each deploy found installed on a node, kept on the controller so two nodes or two
dates can be compared: `reports/manifests/<host>/<UTC time>.json` (and `latest.json`).

    python -m sglang_deploy.report.manifest diff A.json B.json   # exit 1 when they differ
    python -m sglang_deploy.report.manifest diff                 # every host's latest, by profile
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from sglang_deploy.plan.hosts import REPO_ROOT

MANIFESTS_DIR = REPO_ROOT / "reports" / "manifests"


def record(host_name, profile_name, manifest, directory=MANIFESTS_DIR) -> Path:
    """Write one deploy's manifest; returns its path."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    entry = {
        "host": host_name,
        "profile": profile_name,
        "recorded_at": stamp,
        "distributions": manifest["manifest"],
        "missing_distributions": manifest.get("missing_distributions", []),
    }
    host_dir = Path(directory) / host_name
    host_dir.mkdir(parents=True, exist_ok=True)
    path = host_dir / f"{stamp}.json"
    text = json.dumps(entry, indent=2, sort_keys=True) + "\n"
    path.write_text(text)
    (host_dir / "latest.json").write_text(text)
    return path


def diff(a: dict, b: dict) -> list[str]:
    """Lines saying how two manifests' distributions differ (version or RECORD digest)."""
    left = {d["name"].lower(): d for d in a["distributions"]}
    right = {d["name"].lower(): d for d in b["distributions"]}
    lines = []
    for name in sorted(left.keys() | right.keys()):
        one, other = left.get(name), right.get(name)
        if one is None or other is None:
            lines.append(f"{name}: only in {'B' if one is None else 'A'}")
        elif one["version"] != other["version"]:
            lines.append(f"{name}: {one['version']} vs {other['version']}")
        elif one["record_sha256"] != other["record_sha256"]:
            lines.append(f"{name} {one['version']}: different RECORD (a different build)")
    return lines


def fleet_diff(directory=MANIFESTS_DIR) -> list[str]:
    """Every host's latest manifest against the first host (by name) of the same profile:
    lines saying how each differs; a profile's hosts with none run the same distributions."""
    latest = {}
    for path in sorted(Path(directory).glob("*/latest.json")):
        entry = json.loads(path.read_text())
        latest.setdefault(entry.get("profile"), []).append(entry)
    lines = []
    for profile, entries in sorted(latest.items(), key=lambda item: str(item[0])):
        first = entries[0]
        for other in entries[1:]:
            found = diff(first, other)
            lines += [f"{profile}: {first['host']} vs {other['host']}: {line}" for line in found]
        hosts = ", ".join(e["host"] for e in entries)
        size = len(first["distributions"])
        print(f"{profile}: {len(entries)} host(s) ({hosts}), {size} distributions each in {first['host']}'s")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("diff",))
    parser.add_argument("a", type=Path, nargs="?", help="a manifest (none: every host's latest)")
    parser.add_argument("b", type=Path, nargs="?")
    parser.add_argument("--dir", type=Path, default=MANIFESTS_DIR, help="where the manifests are kept")
    args = parser.parse_args(argv)
    if args.a is None:
        found = fleet_diff(args.dir)
    elif args.b is None:
        parser.error("two manifests, or none (every host's latest)")
    else:
        found = diff(json.loads(args.a.read_text()), json.loads(args.b.read_text()))
    print("\n".join(found) if found else "same distributions, versions and RECORDs")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
