"""The controller's copy of every node's hardware passport, `reports/passport/<host>.json` (the
deploy's Hardware passport step writes it), and the fleet's view of them for `make status`:

    python -m sglang_deploy.report.passports          # one line per host
    python -m sglang_deploy.report.passports --json   # fleet_status(): per host its summary,
                                                      # degraded links, findings, peer differences

The node keeps its own copy (passport.py --write, in the deploy's state_dir); this one is what
peers are compared against (verify/passport_compare.py) and what `make status` reads.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from sglang_deploy.node.lib import gpu_links
from sglang_deploy.plan.hosts import REPO_ROOT
from sglang_deploy.verify import passport_compare

REPORTS = REPO_ROOT / "reports" / "passport"


def record(host_name, passport, reports=None) -> Path:
    """Keep ``passport`` as reports/passport/<host>.json (replaced whole, never half-written)."""
    path = Path(reports or REPORTS) / f"{host_name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    temporary.write_text(json.dumps(dict(passport, host=host_name), indent=2, sort_keys=True) + "\n")
    temporary.replace(path)
    return path


def read_all(reports=None) -> dict:
    """{host: passport} of every copy on the controller (an unreadable one is left out)."""
    found = {}
    for path in sorted(Path(reports or REPORTS).glob("*.json")):
        try:
            passport = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(passport, dict):
            found[passport.get("host", path.stem)] = passport
    return found


def host_status(passport, differences) -> dict:
    """One host's entry of fleet_status()."""
    failures, warnings = passport_compare.own_findings(passport)
    return {
        "summary": passport_compare.summary(passport),
        "gpu_model": passport_compare.model_of(passport),
        "collected_at": passport.get("collected_at"),
        "degraded_links": {str(index): degraded for index, degraded in gpu_links.degraded(passport).items()},
        "failures": failures,
        "warnings": warnings,
        "differences": [difference.as_json() | {"text": difference.text()} for difference in differences],
    }


def fleet_status(reports=None) -> dict:
    """{"hosts": {host: {"summary", "gpu_model", "collected_at", "degraded_links": {index: bool},
    "failures": [...], "warnings": [...], "differences": [{"field", "value", "peers", ..., "text"}]}}}:
    every copy on the controller, each compared with its peers of the same GPU model."""
    passports = read_all(reports)
    differences = passport_compare.peer_differences(passports)
    return {"hosts": {host: host_status(passports[host], differences[host]) for host in passports}}


def lines(status, reports=None) -> list[str]:
    """The operator's view: a host's summary, then what is wrong with it, indented."""
    out = []
    for host, entry in status["hosts"].items():
        out.append(f"{host}: {entry['summary']}")
        out += [f"    failed: {text}" for text in entry["failures"]]
        out += [f"    warning: {text}" for text in entry["warnings"]]
        out += [f"    differs from peers: {difference['text']}" for difference in entry["differences"]]
    return out or [
        f"no passports in {reports or REPORTS} yet (the deploy's Hardware passport step writes them)"
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="fleet_status() as JSON")
    parser.add_argument("--reports", type=Path, default=None, help=f"default: {REPORTS}")
    args = parser.parse_args(argv)
    status = fleet_status(args.reports)
    print(
        json.dumps(status, indent=2, sort_keys=True) if args.json else "\n".join(lines(status, args.reports))
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
