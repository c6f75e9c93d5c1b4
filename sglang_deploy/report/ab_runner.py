"""Is one profile faster than another on this node? `make ab PROFILES=a,b,c HOST=node`.

    python -m sglang_deploy.report.ab_runner INVENTORY --host NODE --profiles A,B[,C]
        [--repeats 3] [--max-tokens 32,96] [--prompt TEXT ...] [--warmup 1] [--reports reports]

Renders each profile's files (unit, env file, start-up hook) for the host as a deploy of that
profile would (plan/host_plan.py, the host's own data with only `profile` changed), stages them on
the node (0700, beside the service's restart cycles) with node/ab.py's plan
(plan/commands/ab.py) and starts ab.py detached like a restart cycle (detach.py): under the
deploy lock and out of rotation through the node's routers (the fleet keeps serving), each
profile deployed, gated and benchmarked in turn, then the node's own profile back, serving as
before, and back in rotation. A controller that dies leaves it running to that end. This follows
its progress, prints the table (tok/s median and spread, TTFT p50/p95, accept length) and the
verdict (is the winner's lead beyond the spread?), and writes reports/ab/<host>-<stamp>.json,
which `make report` shows. The node's own profile is always measured (added when not named),
last: its figure is what "serves as before" is judged by, and the node ends on it without
another restart.

A profile whose engine (pins, venv, Python, hook) or service (name, port) differs from the
node's own is refused before anything is staged, naming it: its venv would have to be built
first (a deploy of it builds it). Exit status: ab.py's (0: every profile measured and the node
home and in rotation; sglang_deploy/node/lib/status.py).
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import shlex
import statistics
import subprocess
import sys
import tarfile
import time
import uuid
from pathlib import Path

from sglang_deploy.cli import exit_on_deploy_error
from sglang_deploy.errors import DeployError
from sglang_deploy.node.lib import ab_bench, status
from sglang_deploy.node.lib import result as node_result
from sglang_deploy.plan.commands.ab import ROLES, ab_command, ab_plan, stage_dir
from sglang_deploy.plan.fleet_hosts import rotation_for
from sglang_deploy.plan.host_plan import plan_for
from sglang_deploy.plan.hosts import REPO_ROOT, inventory_hosts, ssh_argv

REPORTS = REPO_ROOT / "reports" / "ab"
PROMPTS = (
    "Explain in a few paragraphs how tensor parallelism splits a transformer layer across GPUs.",
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
)
FOLLOW_S = 10.0
FOLLOW_RETRIES = 3
HOME_MARGIN_S = 120  # a benchmark round and the return to rotation, beyond the restart and gate


def engine_of(plan):
    """What must be the same for a trial to run on the node's engine venv and unit."""
    profile = plan.profile
    engine = profile.engine
    return {
        "engine pins": list(engine.packages),
        "engine venv": engine.venv,
        "Python": engine.python_version,
        "hook": profile.hook.system_wide,
        "service": profile.service.name,
        "port": int(profile.service.port),
    }


def refusal(own, other):
    """Why ``other`` cannot be A/B'd on the node that serves ``own`` (None: it can)."""
    mine, theirs = engine_of(own), engine_of(other)
    differs = [key for key in mine if mine[key] != theirs[key]]
    if not differs:
        return None

    def shown(value):
        return " ".join(value) if isinstance(value, list) else str(value)

    return (
        "%s: its %s differ from the node's own profile %s's (%s): its venv and unit must be deployed first"
        % (
            other.profile.name,
            ", ".join(differs),
            own.profile.name,
            "; ".join("%s %s vs %s" % (key, shown(theirs[key]), shown(mine[key])) for key in differs),
        )
    )


def plans(name, data, profiles):
    """(the node's own NodePlan, every trial's NodePlan, own last-named order kept, own added)."""
    if data.get("serving_group"):
        raise DeployError(f"{name} serves in a serving group: an A/B runs on a node that serves alone")
    own = plan_for(data)
    trials = [plan_for({**data, "profile": profile}) for profile in profiles]
    if own.profile.name not in [p.profile.name for p in trials]:
        print(f"{name}: its own profile {own.profile.name} is measured too (last)", flush=True)
        trials.append(own)
    refused = [why for why in (refusal(own, plan) for plan in trials) if why]
    if refused:
        raise DeployError("refused, nothing staged: " + "; ".join(refused))
    return own, trials


def rendered(plan):
    """{role: text} of a profile's files, as a deploy renders them (may hold secrets)."""
    texts = {
        "unit": plan.unit_text,
        "env": plan.env_text,
        "hook": plan.hook_module,
        "hook_pth": plan.hook_pth,
    }
    return {role: texts[role] for role in ROLES}


def staged_tar(files):
    """A tar of {relative path: text}, every member 0600."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path, text in sorted(files.items()):
            body = text.encode()
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(body), 0o600, int(time.time())
            tar.addfile(info, io.BytesIO(body))
    return buffer.getvalue()


def as_root(data, command):
    """``command`` as root where the host logs in as another user (hosts.yml `sudo: true`)."""
    return f"sudo -n sh -c {shlex.quote(command)}" if data.get("_sudo") or data.get("sudo") else command


def remote(name, data, command, stdin=None, show=None):
    """Run ``command`` on the host: (exit status, its output lines); ``show`` prints progress."""
    proc = subprocess.Popen(
        ssh_argv(name, data, as_root(data, command)),
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    if stdin is not None:
        proc.stdin.write(stdin)
        proc.stdin.close()
    lines = []
    for raw in proc.stdout:
        line = raw.decode(errors="replace").rstrip("\n")
        lines.append(line)
        if show and node_result.parse([line]) is None:
            show(line)
    return proc.wait(), lines


def stage(name, data, own, trials, args, ab_id):
    """Upload every trial's files and ab.py's plan; the command that runs it."""
    where = stage_dir(own.scripts, ab_id)
    files, staged = {}, []
    for plan in trials:
        texts = rendered(plan)
        files.update({f"{plan.profile.name}/{role}": text for role, text in texts.items()})
        staged.append((plan, {role: f"{where}/{plan.profile.name}/{role}" for role in texts}))
    hosts = inventory_hosts(args.inventory)
    service = own.profile.service
    rotation = rotation_for(
        name,
        data,
        hosts,
        service.port,
        textfile=own.scripts.textfile_flags(),
        auth=own.scripts.api_key_args(),
    )
    bench = {
        "prompts": args.prompt or list(own.profile.throughput.prompts or PROMPTS),
        "max_tokens": [int(n) for n in args.max_tokens.split(",")],
        "repeats": args.repeats,
        "warmup": args.warmup,
        "timeout": float(own.profile.throughput.timeout_s),
    }
    plan = ab_plan(own, staged, rotation, where, ab_id, bench)
    files["plan.json"] = json.dumps(plan, indent=1, sort_keys=True)
    command = f"umask 077 && mkdir -p {shlex.quote(where)} && tar -x -C {shlex.quote(where)}"
    code, lines = remote(name, data, command, stdin=staged_tar(files))
    if code != 0:
        raise DeployError(f"{name}: staging the A/B's files failed: {' '.join(lines[-3:])}")
    return ab_command(own.scripts.directory, f"{where}/plan.json")


def follow(name, data, scripts, ab_id):
    """Follow the detached A/B to its end: ab.py's result line, or None (lost: it goes on)."""
    offset, failures = 0, 0
    while True:
        code, lines = remote(name, data, scripts.detach_follow(ab_id, offset, FOLLOW_S), show=say_line(name))
        found = node_result.parse(lines)
        if found is None or found["status"] != status.READY:
            failures += 1
            if failures > FOLLOW_RETRIES:
                print(f"{name}: lost the A/B ({lines[-1:] or code}); it goes on on the node", flush=True)
                return None
            time.sleep(min(2.0 * failures, 5.0))
            continue
        failures, offset = 0, found["offset"]
        if found["state"] == "ended":
            remote(name, data, scripts.detach_ack(ab_id))
            return found.get("cycle")


def say_line(name):
    return lambda line: print(f"  {name}: {line}", flush=True)


def timing(result, controller_s):
    """The A/B's wall time per profile against one restart plus its benchmark."""
    done = [
        t
        for t in result.get("trials") or []
        if t.get("restart_s") is not None and t.get("bench_s") is not None
    ]
    if not done:
        return None
    one = statistics.median(t["restart_s"] + t["bench_s"] for t in done)
    per_profile = controller_s / len(result["trials"])
    return {
        "profiles": len(result["trials"]),
        "controller_s": round(controller_s, 1),
        "node_s": result.get("wall_s"),
        "per_profile_s": round(per_profile, 1),
        "restart_and_bench_s": round(one, 1),
        "ratio": round(per_profile / one, 2) if one else None,
    }


def timing_line(found):
    return (
        "wall time: %(controller_s).1f s for %(profiles)d profiles, %(per_profile_s).1f s per profile; "
        "one restart + its benchmark: %(restart_and_bench_s).1f s (the trials' median): %(ratio).2fx" % found
    )


def write_report(host, found, reports=REPORTS, now=None):
    """reports/ab/<host>-<stamp>.json; its path."""
    stamp = (now or datetime.datetime.now(datetime.timezone.utc)).strftime("%Y-%m-%dT%H%M%SZ")
    folder = Path(reports)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{host}-{stamp}.json"
    path.write_text(json.dumps(dict(found, host=host, stamp=stamp), indent=2, sort_keys=True) + "\n")
    return path


def home_s(profile):
    """Seconds a stop of the A/B's unit leaves it to go home: stop the trial's server, start the
    node's own, its gate, one benchmark round and the return to rotation."""
    return int(profile.service.timeout_stop_sec + profile.readiness.timeout_s + HOME_MARGIN_S)


def run(args):
    hosts = dict(inventory_hosts(args.inventory))
    if args.host not in hosts:
        raise DeployError(f"--host: no host {args.host} in {args.inventory}")
    name, data = args.host, hosts[args.host]
    profiles = [p.strip() for p in args.profiles.split(",") if p.strip()]
    if not profiles:
        raise DeployError("--profiles: name at least one profile")
    started = time.monotonic()
    own, trials = plans(name, data, profiles)
    ab_id = time.strftime("ab-%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
    print(
        f"== {name}: A/B of {', '.join(p.profile.name for p in trials)} (own: {own.profile.name})", flush=True
    )
    command = stage(name, data, own, trials, args, ab_id)
    code, lines = remote(name, data, own.scripts.detach_start(command, ab_id, home_s(own.profile)))
    begun = node_result.parse(lines)
    if begun is None or begun["status"] != status.READY:
        cause = begun["cause"] if begun else " ".join(lines[-3:])
        raise DeployError(f"{name}: starting the A/B failed: {cause}")
    found = follow(name, data, own.scripts, ab_id)
    if found is None:
        return status.UNEXPECTED
    found["timing"] = timing(found, time.monotonic() - started)
    for line in ab_bench.table(found):
        print(line)
    if found["timing"]:
        print(timing_line(found["timing"]))
    path = write_report(name, found, args.reports)
    print(f"{name}: {found.get('result')}: {found.get('cause')} (report: {path})", flush=True)
    return found.get("status", status.UNEXPECTED)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inventory", nargs="?", default="inventory/sandbox.py")
    parser.add_argument("--host", required=True, help="the node the A/B runs on")
    parser.add_argument("--profiles", required=True, help="comma-separated profile names or paths")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of every prompt at every max_tokens")
    parser.add_argument("--max-tokens", default="32,96", help="comma-separated max_tokens of the requests")
    parser.add_argument("--prompt", action="append", help="a prompt (default: the profile's, else two)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed requests before each benchmark")
    parser.add_argument("--reports", default=str(REPORTS), help="where the A/B's JSON goes")
    args = parser.parse_args(argv)
    with exit_on_deploy_error():
        return run(args)


if __name__ == "__main__":
    sys.exit(main())
