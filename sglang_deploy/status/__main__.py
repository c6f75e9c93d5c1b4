"""The fleet on one screen, read-only and quick (`make status`, `make status JSON=1`).

    python3 -m sglang_deploy.status [INVENTORY] [--limit H1,H2] [--json] [--wide] [--timeout S]

Per node: its unit's state, the inventory's profile, the engine venv it runs (named after its
lock's digest, or its pins), its last known good and when that passed, whether it is in
rotation (healthy in every router), its last decode check, its serving group, its drift (as
`make verify` last recorded it, with the record's age) and its hardware passport ("-" when
the node has none); then each router. Read-only: one SSH command per host, all at once.

Exit status: 0 when every host answered; 3 (cli.EXIT_UNREACHABLE) when a host gave no status
(its row says why: "unreachable: ..."), or a router did not answer (who is in rotation is then
not known); 1 for a bad inventory or settings (cli.EXIT_DEPLOY_ERROR).
"""

from __future__ import annotations

import argparse
import sys
import time

from sglang_deploy.cli import EXIT_UNREACHABLE, exit_on_deploy_error
from sglang_deploy.plan.hosts import inventory_hosts
from sglang_deploy.status import drift, probe, render, rows, targets
from sglang_deploy.verify import layout
from sglang_deploy.verify.redact import Redactor


def collect(hosts, limit=None, timeout=15.0, runner=None, drift_file=None):
    """(node rows, router rows, Redactor) of ``hosts`` ((name, data) pairs of an inventory);
    ``runner``: how one SSH command is run (probe.ask), ``drift_file``: verify's JSON."""
    secrets = Redactor()
    found, answers = probe.ask_all(targets.targets(hosts, limit, secrets), timeout, runner or probe.ask)
    nodes, routers = rows.rows(found, answers, drift.recorded(drift_file or drift.VERIFY_REPORT))
    return nodes, routers, secrets


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inventory", nargs="?", default="inventory/sandbox.py")
    parser.add_argument("--limit", default="", help="comma-separated node names (default: all)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead")
    parser.add_argument("--wide", action="store_true", help="the table with every detail, whatever the width")
    parser.add_argument("--timeout", type=float, default=15.0, help="seconds a host may take to answer")
    args = parser.parse_args(argv)
    started = time.monotonic()
    with exit_on_deploy_error():
        hosts = inventory_hosts(args.inventory)
        nodes, routers, secrets = collect(hosts, set(filter(None, args.limit.split(","))), args.timeout)
    took = round(time.monotonic() - started, 2)
    if args.json:
        print(render.as_json(nodes, routers, secrets, took))
    else:
        for line in render.screen(nodes, routers, layout.terminal_width(), secrets, args.wide):
            print(line)
    return EXIT_UNREACHABLE if rows.unanswered(nodes, routers) else 0


if __name__ == "__main__":
    sys.exit(main())
