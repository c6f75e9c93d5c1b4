"""Decode throughput per profile: deploy each profile to one host, then stream chat completions
and time the tokens as they arrive. "EAGLE-3 vs baseline" becomes a table, not a memory.

    python bench/throughput.py --host node3        # sandbox: sandbox=82 vs sandbox-eagle3=60 tok/s
    python bench/throughput.py --inventory inventory/gpu.py --host gpu1 \
        --profile baseline --profile eagle3-2step --profile eagle3-3step --tunnel

Per profile: a deploy (`python -m pyinfra -y INVENTORY deploy.py --limit HOST` with that
profile; restarts only if it differs from what runs), --warmup-requests untimed requests, then
--requests streaming POST /v1/chat/completions, one at a time (batch 1, as in the incident's
figures). Per request: tokens = stream chunks carrying content (the final usage chunk's
completion_tokens wins where the server packs several tokens into one chunk, as speculative
decoding may); decode tok/s = (tokens - 1) / (last token's arrival - first token's arrival),
so prefill and time-to-first-token are left out. The measuring is the deploy's own decode check
(sglang_deploy/node/lib/decode_rate.py, run on the node after every restart): one definition. The table shows the median over requests,
ms/token = 1000 / that median, and the ratio against the first profile (the baseline).

`--profile NAME=RATE` (sandbox stand-in only) sets SGLANG_STANDIN_TOKENS_PER_SECOND=RATE in a
profile extending NAME: the stand-in then decodes at that configured rate, so on sandbox nodes
the bench measures the tool and the path, not a GPU. Prints a table; asserts nothing.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, Report, deploy, fmt_s, median, node_of, write_profile  # noqa: E402

from sglang_deploy.node.lib import decode_rate  # noqa: E402
from sglang_deploy.plan.fleet import worker_url  # noqa: E402

PROMPT = decode_rate.DEFAULT_PROMPT
RATE_VAR = "SGLANG_STANDIN_TOKENS_PER_SECOND"


def parse_profile(spec):
    name, sep, rate = spec.partition("=")
    if sep and not rate:
        raise argparse.ArgumentTypeError(f"{spec!r}: expected NAME or NAME=TOKENS_PER_SECOND")
    return name, float(rate) if sep else None


class Tunnel:
    """ssh -L to the server's port on the node (for nodes whose port is not reachable), where
    the node's own probes ask it (service.probe_host)."""

    def __init__(self, node, port, host="127.0.0.1"):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.local = s.getsockname()[1]
        argv = node.ssh_argv("")[:-1]  # without the (empty) remote command
        there = f"[{host}]" if ":" in host else host
        argv[1:1] = ["-N", "-L", f"127.0.0.1:{self.local}:{there}:{port}", "-o", "ExitOnForwardFailure=yes"]
        self.process = subprocess.Popen(argv)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.local), timeout=1).close()
                return
            except OSError:
                time.sleep(0.2)
        self.close()
        raise RuntimeError(f"ssh tunnel to {node.name}:{port} did not come up")

    def close(self):
        self.process.terminate()
        self.process.wait(timeout=10)


def stream_once(url, model, max_tokens, timeout):
    """One streaming chat completion: (tokens, decode seconds, time to first token), measured
    by the deploy's own decode check code (sglang_deploy/node/lib/decode_rate.py)."""
    return decode_rate.stream_once(url, model, PROMPT, max_tokens, timeout)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--inventory", default="inventory/sandbox.py")
    p.add_argument("--host", required=True)
    p.add_argument(
        "--profile",
        action="append",
        type=parse_profile,
        metavar="NAME[=RATE]",
        help="profile to measure (repeat; the first is the baseline). Default on the "
        "sandbox: sandbox=82 and sandbox-eagle3=60",
    )
    p.add_argument("--requests", type=int, default=8, help="timed requests per profile")
    p.add_argument("--warmup-requests", type=int, default=1)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--timeout", type=float, default=600.0, help="per request, seconds")
    p.add_argument(
        "--no-deploy",
        dest="deploy",
        action="store_false",
        help="measure what the host serves now (one profile, named for the table only)",
    )
    p.add_argument("--tunnel", action="store_true", help="reach the port through an SSH tunnel")
    p.add_argument(
        "--out", default=str(REPO / "bench" / "results" / f"throughput-{time.strftime('%Y-%m-%d')}.txt")
    )
    args = p.parse_args(argv)
    node = node_of(args.inventory, args.host)
    profiles = args.profile or ([("sandbox", 82.0), ("sandbox-eagle3", 60.0)] if node.is_sandbox else None)
    if not profiles:
        p.error("--profile is required outside the sandbox")
    if not args.deploy and len(profiles) > 1:
        p.error("--no-deploy measures one profile (the one the host serves)")
    if any(rate for _, rate in profiles) and not node.is_sandbox:
        p.error("NAME=RATE sets the sandbox stand-in's rate; on real nodes give profile names only")

    out = Report()
    out(
        f"# bench/throughput.py, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, host {node.name} ({args.inventory}); "
        f"{args.requests} streaming /v1/chat/completions per profile, one at a time, max_tokens "
        f"{args.max_tokens}, after {args.warmup_requests} untimed"
    )
    if any(rate for _, rate in profiles):
        out(
            f"# sandbox stand-in: its decode rate is a setting ({RATE_VAR}); these rows emulate the "
            f"incident's figures (baseline 82-83 tok/s, EAGLE-3 59-61 tok/s), not a GPU"
        )
    out()
    tmp = tempfile.mkdtemp(prefix="bench-throughput-")
    rows, baseline = [], None
    for name, rate in profiles:
        label = name if rate is None else f"{name} ({RATE_VAR}={rate:g})"
        path = write_profile(tmp, f"{name}-{rate:g}tps", name, {RATE_VAR: rate}) if rate else name
        profile = node.profile(path)
        if args.deploy:
            run = deploy(node, path)
            if run.returncode != 0:
                out(f"{label}: deploy failed (exit {run.returncode}); skipped. Last lines:\n{run.tail(30)}")
                continue
            restarted = "restarted" if run.first("] ready in ") else "no restart needed"
            out(f"{label}: deployed to {node.name} ({run.ended - run.started:.1f} s, {restarted})")
        service = profile.service
        tunnel = Tunnel(node, service.port, service.probe_host) if args.tunnel else None
        base = (
            f"http://127.0.0.1:{tunnel.local}"
            if tunnel
            else worker_url(service.reached_at(node.http_host()), service.port)
        )
        url = base + "/v1/chat/completions"
        try:
            for _ in range(args.warmup_requests):
                stream_once(url, profile.model.served_name, args.max_tokens, args.timeout)
            results = [
                stream_once(url, profile.model.served_name, args.max_tokens, args.timeout)
                for _ in range(args.requests)
            ]
        finally:
            if tunnel:
                tunnel.close()
        rates = [decode_rate.decode_rate(r.tokens, r.seconds) for r in results]
        tps = median(rates)
        baseline = baseline or tps
        out(f"  per request tok/s: {', '.join(f'{r:.1f}' for r in rates)}")
        rows.append(
            (
                label,
                len(results),
                sum(t for t, _, _ in results),
                fmt_s(tps, 1),
                fmt_s(min(rates), 1),
                fmt_s(max(rates), 1),
                fmt_s(1000 / tps, 2),
                fmt_s(1000 * median([f for _, _, f in results]), 0),
                f"{tps / baseline:.3f}",
            )
        )
    out()
    out.table(
        [
            "profile",
            "requests",
            "tokens",
            "tok/s median",
            "min",
            "max",
            "ms/token",
            "TTFT ms",
            "ratio vs baseline",
        ],
        rows,
    )
    out.save(args.out)
    print(f"saved to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
