"""Does the profile's NCCL tuning make all-reduce faster or slower on these nodes?

    python -m sglang_deploy.report.nccl_ab_runner INVENTORY [--limit HOST[,HOST]] [--ablate] [--stop-server]

For each host: runs our scripts directory's nccl_ab.py over SSH (every deploy puts node/*.py
there; NodeScripts builds the command line) with the engine venv's interpreter (its torch, its NCCL) over the tensor-parallel size's GPUs: NCCL's defaults
(a) against the deployed env file (b), interleaved rounds. Writes
reports/nccl-ab/<host>/<UTC time>.json (the node's result line, plus the profile's NCCL lint)
and .txt (the table and verdicts), and latest.json / latest.txt beside them.

Refuses while the server runs (the node script checks the unit) unless --stop-server, which
stops it and leaves it stopped: a deploy starts it again. It stops it holding the node's deploy
lock (node/lock.py, taken as a deploy takes it: after any restart cycle still running) until the
sweep ends, so it never stops a server under a restart's gate. Exit status: 0 when every host
measured, else the first failing host's (sglang_deploy/node/lib/status.py).
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path

from sglang_deploy.cli import exit_on_deploy_error
from sglang_deploy.node import nccl_ab as node_ab
from sglang_deploy.node.lib import result as node_result
from sglang_deploy.operations.deploy_lock import previous_cycle_line
from sglang_deploy.plan.commands import cycles_dir_of_lock
from sglang_deploy.plan.host_plan import plan_for
from sglang_deploy.plan.hosts import REPO_ROOT, inventory_hosts, ssh_argv
from sglang_deploy.profile import nccl_lint

REPORTS = REPO_ROOT / "reports" / "nccl-ab"


def node_args(name, plan, *, ablate=False, stop_server=False, rounds=None, sizes=None):
    """The node script's arguments for a host's plan."""
    profile = plan.profile
    args = [
        "--env-file",
        plan.env_path,
        "--python",
        f"{profile.engine.venv}/bin/python",
        "--nprocs",
        str(profile.tp_size),
        "--unit",
        plan.unit,
        "--host-label",
        name,
    ]
    if stop_server:  # the node takes the deploy lock before it stops anything
        args += ["--lock", plan.lock_path, "--lock-wait", f"{plan.settings.deploy_lock_wait_s:g}"]
        args += [
            "--lock-holder",
            f"nccl-ab {plan.lock_holder}",
            "--cycles-dir",
            cycles_dir_of_lock(plan.lock_path),
        ]
    if ablate:
        args.append("--ablate")
    if stop_server:
        args.append("--stop-server")
    if rounds:
        args += ["--rounds", str(rounds)]
    if sizes:
        args += ["--sizes", sizes]
    return args


def lock_event_line(event):
    """One of lock.py's events, said to the operator."""
    said = {
        "waiting": "waiting for it, held by {holder}",
        "busy": "held by {holder}: nothing stopped",
        "cycle_running": "a restart cycle ({profile}, started {started}) still runs: waiting for it",
        "cycle_progress": "  {line}",
    }.get(event["event"])
    if event["event"] == "previous_cycle":
        return previous_cycle_line(event)
    return (
        said.format_map({"holder": "?", "profile": "?", "started": "?", "line": "", **event})
        if said
        else str(event)
    )


def lint_notes(env):
    """What the NCCL lint says about the profile's variables, shown with the verdicts."""
    return [str(f) for f in nccl_lint.lint_env(env)]


def report_text(result):
    details = result.get("details") or {}
    if result.get("status") == node_ab.MEASURED:
        return "\n".join(node_ab.table(details)) + "\n"
    return "%s: %s: %s\n" % (details.get("host", "?"), result.get("status"), result.get("cause"))


def write_reports(host, result, reports=REPORTS, now=None):
    """reports/nccl-ab/<host>/<stamp>.json and .txt, and latest.* beside them; returns the JSON path."""
    stamp = (now or datetime.datetime.now(datetime.timezone.utc)).strftime("%Y-%m-%dT%H%M%SZ")
    folder = Path(reports) / host
    folder.mkdir(parents=True, exist_ok=True)
    body = json.dumps(result, indent=2, sort_keys=True) + "\n"
    text = report_text(result)
    for stem in (stamp, "latest"):
        (folder / f"{stem}.json").write_text(body)
        (folder / f"{stem}.txt").write_text(text)
    return folder / f"{stamp}.json"


def run_host(name, data, args):
    plan = plan_for(data)
    argv = ssh_argv(
        name,
        data,
        plan.scripts.nccl_ab(
            *node_args(
                name,
                plan,
                ablate=args.ablate,
                stop_server=args.stop_server,
                rounds=args.rounds,
                sizes=args.sizes,
            )
        ),
    )
    print(f"== {name}: {plan.profile.name}, env file {plan.env_path}", flush=True)
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines = []
    for line in proc.stdout:
        lines.append(line)
        for event in node_result.events([line]):
            print(f"  {name}: deploy lock: {lock_event_line(event)}", flush=True)
        if not line.lstrip().startswith("{"):
            print(f"  {name}: {line.rstrip()}", flush=True)
    code = proc.wait()
    result = node_result.parse(lines)
    if result is None:
        result = {
            "status": node_ab.FAILED,
            "cause": "no result line from the node (ssh or python3 failed, "
            "exit %d): %s" % (code, "".join(lines[-3:]).strip()),
            "details": {"host": name},
        }
        code = code or node_ab.EXIT[node_ab.FAILED]
    result["details"]["lint"] = lint_notes(plan.profile.env)
    result["details"]["profile"] = plan.profile.name
    path = write_reports(name, result, args.reports)
    print(report_text(result), end="")
    print(f"{name}: {result['status']}: {result['cause']} (report: {path})", flush=True)
    return code


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inventory", nargs="?", default="inventory/sandbox.py")
    parser.add_argument("--limit", help="comma-separated host names (default: every host)")
    parser.add_argument("--ablate", action="store_true", help="also remove each tuning variable in turn")
    parser.add_argument(
        "--stop-server",
        action="store_true",
        help="stop the server first; it stays stopped until the next deploy",
    )
    parser.add_argument("--rounds", type=int, help="interleaved rounds per arm (node default 3)")
    parser.add_argument("--sizes", help="message sizes, e.g. 4K,64K,1M,16M")
    parser.add_argument("--reports", default=str(REPORTS), help="where the reports go")
    args = parser.parse_args(argv)
    if args.stop_server:
        print(
            "WARNING: --stop-server stops the server on every selected host and leaves it stopped; "
            "run a deploy (make deploy) to start it again.",
            flush=True,
        )
    with exit_on_deploy_error():
        hosts = inventory_hosts(args.inventory)
        if args.limit:
            wanted = {h.strip() for h in args.limit.split(",") if h.strip()}
            unknown = wanted - {name for name, _ in hosts}
            if unknown:
                parser.error("--limit: no such host in %s: %s" % (args.inventory, ", ".join(sorted(unknown))))
            hosts = [(n, d) for n, d in hosts if n in wanted]
        codes = [run_host(name, data, args) for name, data in hosts]
    return next((c for c in codes if c), 0)


if __name__ == "__main__":
    sys.exit(main())
