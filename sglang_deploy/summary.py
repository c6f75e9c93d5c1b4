"""Per-host summary of what an inventory's nodes serve: `python -m sglang_deploy.summary INV`."""

from __future__ import annotations

import json
import shlex
import sys

from .cli import exit_on_deploy_error
from .facts import _SERVING_PY
from .inventory import inventory_hosts, testinfra_host
from .plan import plan_for

COLUMNS = ("host", "profile", "unit", "serving", "schedulers' env", "engine", "up since")


def host_row(name, data):
    plan = plan_for(data)
    node = testinfra_host(data)
    profile = plan.profile
    show = node.run(f"systemctl show -p ActiveState,ExecMainStartTimestamp {plan.unit}").stdout
    unit = dict(line.split("=", 1) for line in show.splitlines() if "=" in line)
    probe = node.run(f"python3 -c {shlex.quote(_SERVING_PY)} http://127.0.0.1:{profile.service.port} "
                     f"{shlex.quote(profile.model.served_name)}")
    serving = json.loads(probe.stdout or "{}").get("ready")
    workers = node.run(f"{plan.scripts.workers()} --json")
    report = json.loads(workers.stdout or "{}") if workers.stdout.strip().startswith("{") else {}
    env_ok = (f"{len(report['workers'])} ok" if report.get("status") == 0
              else f"FAIL: {report.get('message') or workers.stdout.strip()[:60]}")
    return (name, profile.name, unit.get("ActiveState", "?"),
            f"{profile.model.served_name} on :{profile.service.port}" if serving else "NOT READY",
            env_ok, " ".join(profile.engine.packages), unit.get("ExecMainStartTimestamp", ""))


def print_table(rows):
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip())


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    inventory = argv[0] if argv else "inventory/sandbox.py"
    with exit_on_deploy_error():
        rows = [COLUMNS] + [host_row(name, data) for name, data in inventory_hosts(inventory)]
    print_table(rows)
    return 0 if all(row[3] != "NOT READY" and row[4].endswith("ok") for row in rows[1:]) else 1


if __name__ == "__main__":
    sys.exit(main())
