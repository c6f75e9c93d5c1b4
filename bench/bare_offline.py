#!/usr/bin/env python3
"""Two bare nodes with no route to the Python index, provisioned one after the other: times, diff.

Both from the same commit: each one's wall time from bare to serving and its parts, then
`manifest diff` across the two.

    python3 sandbox/sandbox.py up --nodes 2 --bare 2 && make wheelhouse PROFILE=sandbox
    python3 bench/bare_offline.py [--nodes node1 node2] [--profile sandbox] [--out FILE]

Needs two sandbox nodes booted bare and never deployed (no python3-venv, curl, pciutils,
rsync or iproute2, no /models, no /opt/sglang-deploy): `up` keeps nodes that ran before, so
after a run, `python3 sandbox/sandbox.py down` first. Before the deploys, each node gets what
tests/e2e/test_bare_node.py gives it: pypi.org and files.pythonhosted.org resolving to a
closed port (/etc/hosts; checked unreachable before and after) and a shim logging every apt
call. The bench then deploys node A, then node B, with the deploy command bench/common.py
builds (`python -m pyinfra -y inventory/sandbox.py deploy.py --limit NODE`, the profile given
through SGLANG_DEPLOY_SANDBOX_PROFILES), each output line stamped with the controller's clock
as it arrives.

The parts come from those stamps: the deploy's `--> Starting operation:` lines cut it into its
steps, grouped as below; the restart step is cut by the gate's `ready in` line and the line
before the `decode check:` line (as bench/decode_check.py does). "bare -> serving" ends at the
gate's `ready in` line; "deploy" at the deploy's exit (the decode check, last known good,
records and the rest after it). apt's own time is the shim's log (the node's clock; on sandbox
nodes the controller's). Steps a part does not name are listed under "other".

Afterwards the engine manifests the two deploys recorded (reports/manifests/<node>/latest.json)
go through `python -m sglang_deploy.report.manifest diff A B`: the bench prints its lines and
their number (0 when both nodes run the same distributions, versions and RECORDs). Finally
/etc/hosts and the apt shim are put back (--keep-blocked leaves them). Nothing is asserted.

Output to stdout and bench/results/bare-offline-<date>.txt (--out).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

from common import SANDBOX_INVENTORY, Report, deploy, fmt_s, node_of, resolve_profile  # noqa: E402
from decode_check import CHECK_LINE  # noqa: E402

from sglang_deploy.errors import DeployError  # noqa: E402
from sglang_deploy.plan.locked_engine import locked_engine  # noqa: E402
from sglang_deploy.profile.schema import load_profile  # noqa: E402
from sglang_deploy.report.manifest import MANIFESTS_DIR  # noqa: E402
from tests.e2e.sandbox import STATE_FILE  # noqa: E402
from tests.e2e.test_bare_node import APT_LOG, APT_SHIM, INDEX_PROBE, NO_INDEX, STEP  # noqa: E402

BARE_MISSING = ("python3-venv", "curl", "pciutils", "rsync", "iproute2")
APT_VERBS = ("update", "install", "upgrade", "remove", "purge", "autoremove")
UP = "python3 sandbox/sandbox.py down && python3 sandbox/sandbox.py up --nodes 2 --bare 2"
RESTART = "Restart (configuration changed)"
READY = "] ready in "
# (part, how a step's name is recognised), in the deploy's order; the restart step is cut apart.
PARTS = (
    ("OS packages (apt)", lambda n: n == "OS prerequisites"),
    ("deploy lock, node scripts", lambda n: n in ("Deploy lock", "On-node scripts")),
    ("GPU node settings", lambda n: n.startswith(("GPU persistence", "ACS", "Clear ACS", "No ACS"))),
    ("model staging", lambda n: n.startswith("Model ") or n == "Hugging Face Hub client venv"),
    ("preflight, passport", lambda n: n.startswith(("Preflight", "Group preflight", "Hardware passport"))),
    ("wheel upload (wheelhouse)", lambda n: n.startswith("Engine wheelhouse")),
    ("uv on the node", lambda n: n == "uv"),
    ("engine venv (uv install)", lambda n: n == "Engine venv and pinned packages"),
    ("server files", lambda n: n in ("Env directory", "Env file", "Start-up hook", "systemd unit")),
)
RESTART_PARTS = ("start + gate", "workers check", "decode check", "save, rest of the cycle")
AFTER_RESTART = "serving, records"  # every step after the restart's


def steps_of(lines, started, ended):
    """[(step name, start, seconds)] from the `--> Starting operation:` lines; the time
    before the first one is "connect, facts, plan"."""
    marks = [(STEP.search(text).group(1), when) for when, text in lines if STEP.search(text)]
    first = marks[0][1] if marks else ended
    out = [("connect, facts, plan", started, first - started)]
    for (name, t1), (_, t2) in zip(marks, [*marks[1:], ("end", ended)]):
        out.append((name, t1, t2 - t1))
    return out


def restart_cut(lines, start, end):
    """{restart part: seconds} of the restart step running from ``start`` to ``end``, cut at
    the gate's `ready in` line and at the line before the first `decode check:` line;
    None when the step shows no `ready in` (the start failed: the step is one figure)."""
    inside = [(when, text) for when, text in lines if start <= when <= end]
    ready = next((when for when, text in inside if READY in text), None)
    if ready is None:
        return None
    check = next((i for i, (_, text) in enumerate(inside) if CHECK_LINE in text and i > 0), None)
    before, checked = (inside[check - 1][0], inside[check][0]) if check is not None else (ready, ready)
    return dict(zip(RESTART_PARTS, (ready - start, before - ready, checked - before, end - checked)))


def deploy_parts(lines, started, ended):
    """({part: seconds}, [(step, seconds)] in no part, seconds from the start to the first
    `ready in` line or None)."""
    parts = {"connect, facts, plan": 0.0, **{label: 0.0 for label, _ in PARTS}}
    other, after_restart = [], False
    for name, start, seconds in steps_of(lines, started, ended):
        part = next((label for label, wanted in PARTS if wanted(name)), None)
        if name == "connect, facts, plan":
            parts[name] += seconds
        elif name == RESTART:
            cut = restart_cut(lines, start, start + seconds) or {"restart (no `ready in` line)": seconds}
            for label, value in cut.items():
                parts[label] = parts.get(label, 0.0) + value
            after_restart = True
        elif after_restart:
            parts[AFTER_RESTART] = parts.get(AFTER_RESTART, 0.0) + seconds
        elif part:
            parts[part] += seconds
        else:
            other.append((name, seconds))
    parts["other"] = sum(seconds for _, seconds in other)
    ready = next((when for when, text in lines if READY in text), None)
    return parts, other, (None if ready is None else ready - started)


def apt_calls(node):
    """[(start, end, arguments)] of the apt calls the node's shim logged."""
    calls, begun = [], None
    for line in node.ssh(f"cat {APT_LOG} 2>/dev/null || true").splitlines():
        stamp, what, rest = (line.split(" ", 2) + [""])[:3]
        if what == "start":
            begun = (float(stamp), rest)
        elif begun:
            calls.append((begun[0], float(stamp), begun[1]))
            begun = None
    return calls


def apt_verb(arguments):
    """``update``, ``install``, ... of an apt call's logged arguments."""
    return next((w for w in arguments.split() if w in APT_VERBS), "?")


def is_bare(node):
    """What makes ``node`` not bare (empty: bare)."""
    found = node.ssh(
        f"for p in {' '.join(BARE_MISSING)}; do "
        "[ \"$(dpkg-query -W -f '${db:Status-Status}' $p 2>/dev/null)\" = installed ] && echo $p; done; "
        "test -e /models && echo /models; test -e /opt/sglang-deploy && echo /opt/sglang-deploy; true"
    )
    return found.split()


def block_index(node):
    subprocess.run(
        node.ssh_argv("grep -q 'sglang-deploy e2e: no index' /etc/hosts || cat >> /etc/hosts"),
        input=NO_INDEX,
        text=True,
        check=True,
    )
    for tool in ("apt-get", "apt"):
        subprocess.run(
            node.ssh_argv(f"cat > /usr/local/sbin/{tool} && chmod 755 /usr/local/sbin/{tool}"),
            input=APT_SHIM,
            text=True,
            check=True,
        )
    node.ssh(f"rm -f {APT_LOG}")


def unblock_index(node):
    """/etc/hosts rewritten in place (nspawn may bind-mount it), the apt shim removed."""
    node.ssh(
        "grep -v 'sglang-deploy e2e: no index' /etc/hosts > /root/hosts; cat /root/hosts > /etc/hosts; "
        "rm -f /root/hosts /usr/local/sbin/apt-get /usr/local/sbin/apt",
        check=False,
    )


def index_reachable(node):
    return not node.ssh(INDEX_PROBE, check=False).startswith("unreachable")


def manifest_diff(a, b):
    """(exit status, output lines) of `python -m sglang_deploy.report.manifest diff A B`."""
    done = subprocess.run(
        [sys.executable, "-m", "sglang_deploy.report.manifest", "diff", str(a), str(b)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    return done.returncode, (done.stdout + done.stderr).strip().splitlines()


def commit():
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True, text=True
    )
    return head.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", nargs=2, metavar=("A", "B"), help="default: the first two bare nodes")
    parser.add_argument("--profile", default="sandbox")
    parser.add_argument("--timeout", type=float, default=1800, help="per deploy, seconds")
    parser.add_argument(
        "--keep-blocked", action="store_true", help="leave the index blocked and the apt shim"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO / "bench" / "results" / f"bare-offline-{time.strftime('%Y-%m-%d')}.txt",
    )
    args = parser.parse_args(argv)

    if not STATE_FILE.is_file():
        sys.exit(f"no sandbox: {UP}")
    recorded = {n["name"]: n for n in json.loads(STATE_FILE.read_text())["nodes"]}
    names = (
        args.nodes
        or [n for n, r in recorded.items() if r.get("bare") and r.get("role", "node") == "node"][:2]
    )
    if len(names) < 2 or any(not recorded.get(n, {}).get("bare") for n in names):
        sys.exit(f"needs two bare sandbox nodes (found {', '.join(names) or 'none'}): {UP}")
    nodes = [node_of(SANDBOX_INVENTORY, n) for n in names]
    for node in nodes:
        found = is_bare(node)
        if found:
            sys.exit(f"{node.name} is not bare any more ({', '.join(found)}): {UP}")
    profile_path = resolve_profile(args.profile)
    profile = load_profile(profile_path)
    locked = locked_engine(profile, "/opt/sglang-deploy")
    if locked is None:
        sys.exit(
            f"{profile.name} has no lock: it would install from the index (`make lock PROFILE={profile.name}`)"
        )
    try:
        wheels = locked.wheels()
    except DeployError as exc:
        sys.exit(str(exc))

    out = Report()
    began = time.time()
    out(
        f"Bare node -> serving with no route to the Python index: {names[0]} then {names[1]}, profile "
        f"{profile.name}, lock {locked.local_lock.name} ({len(locked.lock.entries)} distributions, "
        f"{len(wheels)} wheels with uv's), commit {commit()}, {time.strftime('%Y-%m-%d %H:%M')}"
    )
    runs, apt, ready, reachable = {}, {}, {}, {}
    try:
        for node in nodes:
            block_index(node)
            if index_reachable(node):
                sys.exit(f"{node.name} still reaches pypi.org after /etc/hosts: not an offline run")
        for node in nodes:
            print(f"deploying {node.name} ...", flush=True)
            runs[node.name] = deploy(node, profile_path, timeout=args.timeout)
            apt[node.name] = apt_calls(node)
            reachable[node.name] = index_reachable(node)
            run = runs[node.name]
            if run.returncode != 0:
                print(run.tail(60), file=sys.stderr)
    finally:
        if not args.keep_blocked:
            for node in nodes:
                unblock_index(node)

    out()
    figures = {}
    for name, run in runs.items():
        parts, other, ready[name] = deploy_parts(run.lines, run.started, run.ended)
        figures[name] = (parts, other)
    labels = ["connect, facts, plan", *(label for label, _ in PARTS)]
    labels += [p for p in RESTART_PARTS if any(p in f[0] for f in figures.values())]
    labels += [p for f in figures.values() for p in f[0] if p not in labels and p not in ("other",)]
    labels += ["other"]
    rows = []
    for label in dict.fromkeys(labels):
        values = [figures[n][0].get(label) for n in names]
        share = values[0] / (runs[names[0]].ended - runs[names[0]].started) if values[0] else None
        rows.append([label, *(fmt_s(v, 1) for v in values), "-" if share is None else f"{share:.0%}"])
    walls = {n: runs[n].ended - runs[n].started for n in names}
    rows.append(["bare -> serving (`ready in`)", *(fmt_s(ready[n], 1) for n in names), ""])
    rows.append(["deploy (to its exit)", *(fmt_s(walls[n], 1) for n in names), "100%"])
    out.table(["part", f"{names[0]} s", f"{names[1]} s", f"share of {names[0]}"], rows)
    out()
    out(f"  {names[1]} / {names[0]} deploy: {walls[names[1]] / walls[names[0]]:.2f}")
    for name in names:
        run = runs[name]
        calls = apt[name]
        said = ", ".join(f"{apt_verb(c[2])} {c[1] - c[0]:.1f} s" for c in calls)
        out(
            f"  {name}: deploy exit {run.returncode}; apt calls {len(calls)} "
            f"({sum(c[1] - c[0] for c in calls):.1f} s: {said or 'none'}); index reachable after: "
            f"{'YES' if reachable[name] else 'no'}"
        )
        out(
            f"    steps: {json.dumps({s: round(v, 1) for s, _, v in steps_of(run.lines, run.started, run.ended)})}"
        )
        if figures[name][1]:
            out(f"    other: {', '.join(f'{s} {v:.1f} s' for s, v in figures[name][1])}")

    out()
    manifests = [MANIFESTS_DIR / name / "latest.json" for name in names]
    fresh = [m.is_file() and m.stat().st_mtime >= began for m in manifests]
    if all(fresh):
        code, lines = manifest_diff(*manifests)
        differences = 0 if code == 0 else len(lines)
        sizes = [len(json.loads(m.read_text())["distributions"]) for m in manifests]
        out(
            f"python -m sglang_deploy.report.manifest diff {manifests[0].relative_to(REPO)} "
            f"{manifests[1].relative_to(REPO)}: {differences} differences "
            f"({sizes[0]} and {sizes[1]} distributions; exit {code})"
        )
        for line in lines[:20]:
            out(f"  {line}")
    else:
        stale = [n for n, ok in zip(names, fresh) if not ok]
        out(f"manifest diff: not run: no manifest recorded by this run for {', '.join(stale)}")
    out()
    out(f"Whole bench: {time.time() - began:.0f} s.")
    out.save(args.out)
    print(f"saved to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
