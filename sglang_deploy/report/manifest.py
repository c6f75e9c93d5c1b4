"""What each deploy found installed on a node, kept on the controller so two nodes or two
dates can be compared: `reports/manifests/<host>/<UTC time>.json` (and `latest.json`).

    python -m sglang_deploy.report.manifest diff A.json B.json   # exit 1 when they differ
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("diff",))
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    args = parser.parse_args(argv)
    found = diff(json.loads(args.a.read_text()), json.loads(args.b.read_text()))
    print("\n".join(found) if found else "same distributions, versions and RECORDs")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
