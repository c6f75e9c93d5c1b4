#!/usr/bin/env python3
"""Staging one model to every node with the controller's uplink capped: fan-out (node to
node, plan/fanout.py) against controller-only.

    python3 bench/fanout.py [--size-mb 400] [--uplink-kib 20480] [--degree 2]

Needs 8 sandbox nodes (`python3 sandbox/sandbox.py up --nodes 8`). Writes a model of
--size-mb (4 shards of random bytes plus the stand-in's config files) on the controller and,
twice, removes it from every node and deploys a profile whose model comes from it, with
the controller's uplink (--uplink-kib) shared by the copies it makes at once: rsync's --bwlimit
caps one copy, so `controller_bwlimit_kib` is set to the uplink's share of each, uplink / copies
at once (eight with `fanout=off`: every node from the controller; `--degree` with `fanout=on`:
the controller feeds only the roots; each verified node feeds `--degree` children; the nodes'
hops are loopback, uncapped, as a datacenter's are fast against an office uplink). Capping every
copy at the whole uplink instead would give the controller eight uplinks without fan-out.
Reports each run's wall time, the bytes the controller sent (the tree's roots' share), the
tree's levels, every node's manifest digest (all equal, all verified) and the ratio of the
two wall times (goal: at most 0.5). Output to stdout and bench/results/fanout-<date>.txt.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from common import ANSI, Report, fmt_s  # noqa: E402

sys.path.insert(0, str(REPO))
from sglang_deploy.node import model_manifest  # noqa: E402
from sglang_deploy.plan.hosts import sandbox_hosts, ssh_argv  # noqa: E402

MODEL_DIR = "/models/fanout-bench"
STANDIN = REPO / "sandbox" / "models" / "tiny-standin"


def nodes():
    hosts = sandbox_hosts()
    if len(hosts) < 8:
        sys.exit(f"{len(hosts)} sandbox nodes: python3 sandbox/sandbox.py up --nodes 8")
    return hosts[:8]


def ssh(host, command):
    name, data = host
    return subprocess.run(ssh_argv(name, data, command), capture_output=True, text=True, timeout=300)


def write_model(directory: Path, size_mb: int) -> dict:
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "tokenizer_config.json"):
        if (STANDIN / name).is_file():
            (directory / name).write_bytes((STANDIN / name).read_bytes())
    shard = size_mb * (1 << 20) // 4
    for index in range(4):
        path = directory / f"model-{index + 1:05d}-of-00004.safetensors"
        if not path.is_file() or path.stat().st_size != shard:
            with open(path, "wb") as f:
                for _ in range(shard // (1 << 20)):
                    f.write(os.urandom(1 << 20))
    return model_manifest.build(str(directory))


def write_profile(directory: Path, model: Path) -> Path:
    path = directory / "fanout-bench.yml"
    path.write_text(
        f"extends: {REPO / 'profiles' / 'sandbox.yml'}\n"
        f"model:\n  path: {MODEL_DIR}\n  source: {{controller: {model}}}\n"
    )
    return path


def wipe(hosts):
    for host in hosts:
        ssh(host, f"rm -rf {MODEL_DIR} {MODEL_DIR}.sglang-deploy-staging {MODEL_DIR}.sglang-deploy-old")


def digests(hosts):
    found = {}
    for host in hosts:
        done = ssh(host, f"cat {MODEL_DIR}/{model_manifest.MANIFEST_NAME}")
        try:
            found[host[0]] = model_manifest.digest(json.loads(done.stdout))
        except ValueError:
            found[host[0]] = None
    return found


def staged(hosts, profile, mode, bwlimit, degree):
    """One deploy of ``profile`` to every node: (seconds of its model staging operation, from
    its start to the next operation's, whole deploy seconds, output). The nodes restart onto
    the new model after; that part is the same in both runs and not the staging's."""
    names = [name for name, _ in hosts]
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "SGLANG_DEPLOY_SANDBOX_PROFILES": ",".join(f"{n}={profile}" for n in names),
    }
    data = [f"fanout={mode}", f"fanout_degree={degree}", f"controller_bwlimit_kib={bwlimit}"]
    command = [sys.executable, "-m", "pyinfra", "-y", "inventory/sandbox.py", "deploy.py"]
    for item in data:
        command += ["--data", item]
    for name in names:
        command += ["--limit", name]
    started, lines = time.monotonic(), []
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    for line in process.stdout:
        lines.append((time.monotonic(), ANSI.sub("", line.rstrip("\n"))))
    whole = time.monotonic() - started
    output = "\n".join(text for _, text in lines)
    if process.wait() != 0:
        sys.exit(f"fanout={mode}: the deploy failed:\n{output[-4000:]}")
    starts = [(when, text) for when, text in lines if "Starting operation:" in text]
    index = next(i for i, (_, text) in enumerate(starts) if f"Model {MODEL_DIR}" in text)
    ended = starts[index + 1][0] if index + 1 < len(starts) else lines[-1][0]
    return ended - starts[index][0], whole, output


def roots(output, total_nodes):
    """Nodes the controller fed (from the tree's lines; all of them without fan-out)."""
    fed = re.findall(r"(\S+) <- controller", output)
    return len(set(fed)) if fed else total_nodes


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=400)
    parser.add_argument(
        "--uplink-kib", type=int, default=20480, help="the controller's uplink (KiB/s), shared by its copies"
    )
    parser.add_argument("--degree", type=int, default=2)
    args = parser.parse_args(argv)
    hosts = nodes()
    report = Report()
    with tempfile.TemporaryDirectory(prefix="fanout-bench-") as scratch:
        model = Path(scratch) / "model"
        manifest = write_model(model, args.size_mb)
        size = model_manifest.total_size(manifest)
        profile = write_profile(Path(scratch), model)
        rows, walls = [], {}
        for mode in ("off", "on"):
            wipe(hosts)
            at_once = len(hosts) if mode == "off" else min(args.degree, len(hosts))
            took, whole, output = staged(
                hosts, profile, mode, max(1, args.uplink_kib // at_once), args.degree
            )
            found = digests(hosts)
            verified = sum(d == model_manifest.digest(manifest) for d in found.values())
            fed = roots(output, len(hosts))
            levels = len(re.findall(r"fan-out \S+ \(.*\): level \d+", output)) or 1
            walls[mode] = took
            rows.append(
                [
                    "controller only" if mode == "off" else f"fan-out (degree {args.degree})",
                    at_once,
                    max(1, args.uplink_kib // at_once),
                    fmt_s(took, 1),
                    fmt_s(whole, 1),
                    f"{fed * size / 1e6:.0f}",
                    levels,
                    f"{verified}/{len(hosts)}",
                ]
            )
        report(
            f"Staging a {size / 1e6:.0f} MB model to {len(hosts)} sandbox nodes, the controller's uplink "
            f"{args.uplink_kib} KiB/s shared by its copies at once ({time.strftime('%Y-%m-%d')})"
        )
        report()
        report.table(
            [
                "run",
                "copies at once",
                "KiB/s each",
                "staging s",
                "deploy s",
                "controller MB sent",
                "levels",
                "verified",
            ],
            rows,
        )
        report()
        ratio = walls["on"] / walls["off"]
        report(
            f"staging wall time, fan-out / controller only: {ratio:.2f} (goal <= 0.5: {'met' if ratio <= 0.5 else 'NOT met'})"
        )
    wipe(hosts)
    report.save(REPO / "bench" / "results" / f"fanout-{time.strftime('%Y-%m-%d')}.txt")
    return 0 if ratio <= 0.5 else 1


if __name__ == "__main__":
    sys.exit(main())
