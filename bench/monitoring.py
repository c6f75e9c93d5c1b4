#!/usr/bin/env python3
"""How soon the shipped alerts fire, what Prometheus costs in memory, and how long a passport takes.

On a sandbox fleet (8 serving nodes, a router, a monitoring node):

    python3 sandbox/sandbox.py up --nodes 8 --routers 1 --monitoring 1
    make deploy ROUTERS=1                                  # the fleet, the router, Prometheus
    python3 bench/monitoring.py [--decode-host node1] [--stop-host node8]
        [--good-rate 82] [--low-rate 60] [--max-regression-pct 10] [--warm-s SECONDS]
        [--scenarios decode,down,memory,passport] [--prometheus-url URL] [--out FILE]

Four figures, in one run (about 26 minutes with every scenario: the decode alert needs its 10m
rate window filled with traffic, then the window's crossing and 10m of `for:`):

decode  SGLangDecodeBelowLastGood. The decode host gets a profile extending --base-profile
        (sandbox) with the stand-in at --good-rate tok/s and throughput.max_regression_pct set
        (the rule needs both figures in the node's metrics textfile, and the sandbox profile sets
        no max_regression_pct); its decode check records the last known good's figure. Streamed
        requests then run against it one at a time for the whole run (the rule reads the
        inter-token latency histogram: no streamed traffic, no alert). After --warm-s (default:
        the rule's rate window), its rate falls to --low-rate without a deploy, as on a node
        that got slower under the same configuration: SGLANG_STANDIN_TOKENS_PER_SECOND in a
        runtime drop-in's EnvironmentFile (/run/systemd/system/<unit>.d/, read after the
        unit's own env file, so it wins), then `systemctl restart` under the node's deploy
        lock. The stand-in reads its rate only at start, and a deploy at the lower rate would
        run the decode check, which would either accept the lower figure as the new last known
        good (on_regression: warn, and no alert could fire) or fail the deploy. Time zero is
        the end of that restart: journald's `fired up` line of the new start.
down    SGLangEngineDown. `systemctl stop` of the stop host's unit (under its deploy lock);
        time zero is when the stop returned. The unit is started again once the alert fired.
memory  Prometheus's RSS (VmRSS and VmHWM of its main process, over SSH) and its own
        process_resident_memory_bytes, with every target of the fleet scraped, at the start and
        again at the end of the run (its head grows as it scrapes), with its head series.
passport  `passport.py collect --write <state_dir>/passport.json` as the deploy runs it, over
        SSH on every serving node, --passport-runs times each: the wall time on the
        controller, on the node (date around the command) and the passport's own took_s.

Each alert's latency is printed against the rules' own figures, read from Prometheus
(/api/v1/status/config, /api/v1/rules) and from templates/prometheus/sglang-alerts.rules.yml:
expected = scrape interval + evaluation interval + for (+ for the decode alert, the computed time
the rate window's mean takes to cross the threshold). The first scrape that sees the change
comes within one scrape interval and the first evaluation after it within one evaluation
interval; the alert fires `for` after that evaluation. The firing is seen by polling
/api/v1/alerts every --poll-s seconds (its resolution). Times are time.time() on the controller
and journald's on the node: on sandbox nodes one clock.

Prometheus is read over SSH on the monitoring host (python3 on the node, its loopback), or at
--prometheus-url. At the end the decode host's drop-in is removed and its inventory profile
deployed again. Prints tables and ratios to stdout and to bench/results/monitoring-<date>.txt;
asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    REPO,
    SANDBOX_INVENTORY,
    DeployLock,
    Node,
    Report,
    deploy,
    fmt_s,
    median,
    stamp,
    unit_show,
    wait_journal,
    write_profile,
)

from sglang_deploy.node.lib import decode_rate, result  # noqa: E402
from sglang_deploy.plan.commands import passport_command  # noqa: E402
from sglang_deploy.plan.fleet import is_monitoring, serves  # noqa: E402
from sglang_deploy.plan.hosts import inventory_hosts  # noqa: E402
from sglang_deploy.plan.monitoring import PROMETHEUS_UNIT  # noqa: E402
from sglang_deploy.plan.settings import settings_of  # noqa: E402

DECODE_ALERT, DOWN_ALERT = "SGLangDecodeBelowLastGood", "SGLangEngineDown"
RULES_FILE = REPO / "templates" / "prometheus" / "sglang-alerts.rules.yml"
SCENARIOS = ("decode", "down", "memory", "passport")
READY_LINE = r"The server is fired up and ready to roll!"
DROP_IN = "zz-bench-monitoring-rate.conf"
RATE_ENV_FILE = "/run/sglang-deploy-bench-monitoring.env"
PROMPT = "Count from one to one hundred, one number per line."
# Prometheus' API read on the monitoring host itself (stdlib: every node has python3).
FETCH = (
    "import sys, urllib.request as u; "
    "sys.stdout.write(u.build_opener(u.ProxyHandler({})).open(sys.argv[1], timeout=10).read().decode())"
)
DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


# -- What Prometheus answers (pure: tests/unit/test_bench_monitoring.py) ----------------------


def seconds_of(duration):
    """A Prometheus duration ("15s", "10m", "1h30m") in seconds; None when it is not one."""
    parts = DURATION.findall(duration or "")
    if not parts or "".join(n + u for n, u in parts) != duration:
        return None
    return sum(float(n) * UNITS[u] for n, u in parts)


def unix_of(rfc3339):
    """Prometheus' time ("2026-12-02T03:04:05.123456789Z", Go's RFC 3339 with nanoseconds) as
    Unix seconds; None without one."""
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$", rfc3339 or "")
    if not m:
        return None
    zone = "+00:00" if m.group(3) == "Z" else m.group(3)
    whole = datetime.fromisoformat(m.group(1) + zone).timestamp()
    return whole + float(m.group(2) or 0)


def rate_window(query):
    """The longest range ("[10m]") in a rule's expression, in seconds; None without one."""
    ranges = [seconds_of(r) for r in re.findall(r"\[([0-9a-z.]+)\]", query or "")]
    ranges = [r for r in ranges if r]
    return max(ranges) if ranges else None


@dataclass(frozen=True)
class Alert:
    state: str  # "pending" or "firing"
    active_at: float | None  # when it went pending (Unix seconds)
    value: float | None


def alert_of(alerts_data, name, instance):
    """The alert ``name`` of the target ``instance`` in /api/v1/alerts' data, or None."""
    for alert in alerts_data.get("alerts") or ():
        labels = alert.get("labels") or {}
        if labels.get("alertname") == name and labels.get("instance") == instance:
            try:
                value = float(alert.get("value"))
            except (TypeError, ValueError):
                value = None
            return Alert(alert.get("state", ""), unix_of(alert.get("activeAt")), value)
    return None


@dataclass(frozen=True)
class Rule:
    name: str
    for_s: float
    group_interval_s: float | None
    query: str


def rules_of(rules_data):
    """{alert name: Rule} from /api/v1/rules' data (a rule's ``duration`` is its `for:`)."""
    found = {}
    for group in rules_data.get("groups") or ():
        for rule in group.get("rules") or ():
            if rule.get("type") == "alerting":
                found[rule["name"]] = Rule(
                    rule["name"],
                    float(rule.get("duration") or 0),
                    group.get("interval"),
                    rule.get("query", ""),
                )
    return found


def engine_instance(targets_data, host):
    """The ``instance`` label of ``host``'s engine target (job sglang) in /api/v1/targets' data."""
    for target in targets_data.get("activeTargets") or ():
        labels = target.get("labels") or {}
        if labels.get("job") == "sglang" and labels.get("host") == host:
            return labels.get("instance")
    return None


def wait_scraped(prom, timeout, poll_s=1.0):
    """/api/v1/targets' data once every active target was scraped at least once (its health no
    longer "unknown"), or at ``timeout`` seconds as it is then."""
    deadline = time.monotonic() + timeout
    while True:
        data = prom.get("/api/v1/targets", state="active")
        targets = data.get("activeTargets") or ()
        if (targets and all(t.get("health") != "unknown" for t in targets)) or time.monotonic() > deadline:
            return data
        time.sleep(poll_s)


def window_crossing_s(good, low, threshold, window_s, warm_s, step=0.5):
    """Seconds after the rate fell from ``good`` to ``low`` until the rate window's mean (traffic
    at ``good`` for ``warm_s`` before the fall, the window ``window_s`` long) is below
    ``threshold``; None when it never gets there (``low`` is not below it)."""
    if not all(x == x for x in (good, low, threshold)) or low >= threshold:
        return None  # a NaN figure (nothing measured), or a rate that never crosses
    t = 0.0
    while True:
        after = min(t, window_s)
        before = min(warm_s, window_s - after)
        if after > 0 and (good * before + low * after) / (before + after) < threshold:
            return t
        t += step


# -- Prometheus, the nodes --------------------------------------------------------------------


class Prometheus:
    """Prometheus' HTTP API: over SSH on the monitoring host, or at ``url`` from here."""

    def __init__(self, node, port, url=None):
        self.node, self.base = node, (url or f"http://127.0.0.1:{port}").rstrip("/")
        self.direct = url is not None

    def get(self, path, **params):
        url = self.base + path + ("?" + urllib.parse.urlencode(params) if params else "")
        if self.direct:
            with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=10) as resp:
                body = resp.read().decode()
        else:
            body = self.node.ssh(f"python3 -c {shlex.quote(FETCH)} {shlex.quote(url)}", timeout=30)
        return json.loads(body)["data"]

    def value(self, expr):
        """The first sample's value of an instant query, or None."""
        found = self.get("/api/v1/query", query=expr).get("result") or []
        return float(found[0]["value"][1]) if found else None


def fleet(inventory, monitoring_host=None):
    """(serving Nodes, the monitoring Node) of an inventory, in its order."""
    hosts = inventory_hosts(inventory)
    serving = [Node(n, d, inventory) for n, d in hosts if serves(d)]
    monitors = [Node(n, d, inventory) for n, d in hosts if n == monitoring_host or is_monitoring(d)]
    if monitoring_host:
        monitors = [m for m in monitors if m.name == monitoring_host]
    if not monitors or len(serving) < 2:
        raise SystemExit(
            f"{inventory}: needs 2 serving nodes and a monitoring host "
            "(python3 sandbox/sandbox.py up --nodes 8 --routers 1 --monitoring 1, then a deploy)"
        )
    return serving, monitors[0]


def scripts_dir(node):
    return f"{settings_of(node.data, node.name).sglang_deploy_dir}/node"


# -- The intervals and rules ------------------------------------------------------------------


def intervals(prom):
    """(scrape s, evaluation s) of the running configuration's global section."""
    config = yaml.safe_load(prom.get("/api/v1/status/config")["yaml"]) or {}
    glob = config.get("global") or {}
    # Prometheus' own defaults when the configuration names none.
    return seconds_of(glob.get("scrape_interval", "1m")), seconds_of(glob.get("evaluation_interval", "1m"))


def template_for_s():
    """{alert: for s} as templates/prometheus/sglang-alerts.rules.yml sets them."""
    doc = yaml.safe_load(RULES_FILE.read_text())
    return {
        rule["alert"]: seconds_of(str(rule.get("for", "0s"))) or 0.0
        for group in doc["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }


# -- Load: streamed requests, one at a time ---------------------------------------------------


@dataclass
class Load:
    url: str
    model: str
    max_tokens: int
    done: list = field(default_factory=list)  # (end time, decode tok/s)
    errors: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self):
        while not self.stop.is_set():
            try:
                timed = decode_rate.stream_once(self.url, self.model, PROMPT, self.max_tokens, 60)
                self.done.append((time.time(), decode_rate.decode_rate(timed.tokens, timed.seconds)))
            except (decode_rate.MeasureError, OSError, ValueError):
                self.errors += 1  # the restart's seconds: the port is closed, then warming up
                self.stop.wait(0.5)

    def start(self):
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        return self

    def close(self):
        self.stop.set()
        self.thread.join(timeout=90)

    def rate(self, since, until=float("inf")):
        """(median tok/s, requests) of the requests that ended between ``since`` and ``until``."""
        rates = [rate for when, rate in self.done if since <= when < until]
        return median(rates), len(rates)


# -- Alerts, waited for ------------------------------------------------------------------------


@dataclass
class Seen:
    alert: str
    event_at: float
    active_at: float | None = None  # Prometheus: went pending
    firing_seen: float | None = None  # the first poll that read it firing
    value: float | None = None
    note: str = ""


def wait_firing(prom, name, instance, event_at, timeout, poll_s):
    """Poll /api/v1/alerts until ``name`` fires for ``instance`` (a failed read is read again)."""
    seen = Seen(name, event_at)
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            alert = alert_of(prom.get("/api/v1/alerts"), name, instance)
        except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired):
            alert = None
        if alert:
            seen.active_at, seen.value = alert.active_at, alert.value
            if alert.state == "firing":
                seen.firing_seen = time.time()
                return seen
        time.sleep(poll_s)
    seen.note = f"not firing {timeout:.0f} s after the event"
    return seen


def said(seen):
    return seen.note or f"firing seen at {stamp(seen.firing_seen)}"


def engine_down(prom, node, instance, timeout, poll_s, out):
    """SGLangEngineDown after `systemctl stop` of ``node``'s unit (its deploy lock held)."""
    service = node.profile(node.data["profile"]).service.name
    unit = f"{service}.service"
    out(f"down: systemctl stop {unit} on {node.name} ({instance})")
    with DeployLock(node, service):
        node.ssh(f"systemctl stop {shlex.quote(unit)}")
        stopped = time.time()
        try:
            seen = wait_firing(prom, DOWN_ALERT, instance, stopped, timeout, poll_s)
        finally:
            node.ssh(f"systemctl start {shlex.quote(unit)}")
    out(f"down: stopped at {stamp(stopped)}; {said(seen)}; started again")
    return seen


class Decode:
    """SGLangDecodeBelowLastGood on one node: its profile deployed, streamed load, the fall."""

    def __init__(self, prom, node, instance, rule, args, out):
        self.prom, self.node, self.instance, self.rule = prom, node, instance, rule
        self.args, self.out = args, out
        self.window = rate_window(rule.query) or 600.0
        self.load = self.unit = None
        self.facts = {"window": self.window}

    def prepare(self, directory, scrape_s):
        """Deploy the bench profile, start the load, read the figures the rule compares with;
        False when the deploy did not pass and save its last known good."""
        args, out = self.args, self.out
        path = bench_profile(directory, args)
        prof = self.node.profile(path)
        self.unit = f"{prof.service.name}.service"
        out(f"decode: deploying {args.base_profile} at {args.good_rate:g} tok/s to {self.node.name}")
        run = deploy(self.node, path)
        if run.returncode != 0 or not run.first("as last known good"):
            out(f"decode: the deploy did not pass and save (exit {run.returncode}); skipped:\n{run.tail(25)}")
            return False
        url = f"http://{self.node.http_host()}:{prof.service.port}/v1/chat/completions"
        self.load = Load(url, prof.model.served_name, args.max_tokens).start()
        self.load_started = time.time()
        last_good, pct = wait_textfile(self.prom, self.node, run.started, 4 * scrape_s + 10)
        self.facts.update(last_good=last_good, pct=pct)
        self.facts["threshold"] = last_good * (1 - pct / 100) if last_good and pct is not None else None
        out(
            f"decode: last known good {fmt_s(last_good, 1)} tok/s, max_regression_pct {fmt_s(pct, 0)} "
            f"in Prometheus (threshold {fmt_s(self.facts['threshold'], 1)}); "
            f"rate window {self.window:.0f} s; load running"
        )
        return True

    def live_rate(self):
        """The rule's left-hand side now: the window's decode rate of the node's streams."""
        sel, w = f'{{instance="{self.instance}"}}', f"[{int(self.window)}s]"
        return self.prom.value(
            f"rate(sglang:inter_token_latency_seconds_count{sel}{w})"
            f" / rate(sglang:inter_token_latency_seconds_sum{sel}{w})"
        )

    def fall_and_wait(self, scrape_s, eval_s):
        args, out, facts = self.args, self.out, self.facts
        warm = args.warm_s if args.warm_s is not None else self.window
        left = self.load_started + warm - time.time()
        if left > 0:
            out(f"decode: {left:.0f} s more of load at {args.good_rate:g} tok/s (the rate window fills)")
            time.sleep(left)
        before = alert_of(self.prom.get("/api/v1/alerts"), DECODE_ALERT, self.instance)
        facts.update(before=before and before.state, live_before=self.live_rate())
        fell = time.time()
        out(f"decode: the rate falls to {args.low_rate:g} tok/s (a runtime drop-in, restart of {self.unit})")
        ready = rate_falls(self.node, self.unit, self.unit[: -len(".service")], args.low_rate) or fell
        facts.update(warm_s=fell - self.load_started, restart_s=ready - fell)
        good = facts["live_before"] or self.load.rate(self.load_started, fell)[0]
        facts["crossing"] = (
            window_crossing_s(good, args.low_rate, facts["threshold"], self.window, facts["warm_s"])
            if facts["threshold"]
            else None
        )
        timeout = (facts["crossing"] or self.window) + self.rule.for_s + 3 * (scrape_s + eval_s) + 120
        seen = wait_firing(self.prom, DECODE_ALERT, self.instance, ready, timeout, args.poll_s)
        facts.update(
            good=self.load.rate(self.load_started, fell), low=self.load.rate(ready), errors=self.load.errors
        )
        out(f"decode: {said(seen)}")
        return seen

    def cleanup(self):
        """The load stopped, the drop-in gone, the node's inventory profile deployed again."""
        if self.load:
            self.load.close()
        if self.unit:
            rate_restored(self.node, self.unit)
            profile = self.node.data["profile"]
            run = deploy(self.node, profile)
            self.out(f"decode: {self.node.name} back on {profile} (deploy exit {run.returncode})")


def bench_profile(directory, args):
    """The decode host's profile: the base at --good-rate, with max_regression_pct set."""
    path = write_profile(
        directory,
        "bench-monitoring",
        args.base_profile,
        # A new turn every run: the deploy restarts and its decode check records a figure.
        {"SGLANG_STANDIN_TOKENS_PER_SECOND": args.good_rate, "SGLANG_DEPLOY_BENCH_TURN": int(time.time())},
    )
    with open(path, "a") as f:
        f.write(f"throughput:\n  max_regression_pct: {args.max_regression_pct}\n")
    return path


def wait_textfile(prom, node, deployed_at, timeout):
    """The decode host's last known good figure and max_regression_pct once Prometheus holds
    those of the deploy just made (its textfile, scraped by the node exporter); (None, None)
    if it does not in ``timeout`` s."""
    where = f'host="{node.name}"'
    deadline = time.time() + timeout
    while time.time() < deadline:
        checked = prom.value(f"sglang_deploy_decode_check_timestamp_seconds{{{where}}}")
        if checked is not None and checked >= int(deployed_at) - 1:
            return (
                prom.value(f"sglang_deploy_last_good_decode_tokens_per_second{{{where}}}"),
                prom.value(f"sglang_deploy_max_regression_pct{{{where}}}"),
            )
        time.sleep(2)
    return None, None


def rate_falls(node, unit, service, rate):
    """The stand-in's rate set to ``rate`` by a runtime drop-in, then a restart; journald's time
    of the new start's `fired up` line (None if it did not come)."""
    drop_in_dir = f"/run/systemd/system/{unit}.d"
    drop_in = f"[Service]\nEnvironmentFile={RATE_ENV_FILE}\n"
    env = f"SGLANG_STANDIN_TOKENS_PER_SECOND={rate:g}\n"
    with DeployLock(node, service):
        node.ssh(
            f"printf %s {shlex.quote(env)} > {RATE_ENV_FILE} && mkdir -p {drop_in_dir}"
            f" && printf %s {shlex.quote(drop_in)} > {drop_in_dir}/{DROP_IN}"
            f" && systemctl daemon-reload && systemctl restart {shlex.quote(unit)}"
        )
        invocation = unit_show(node, unit, "InvocationID")["InvocationID"]
        fired = wait_journal(node, invocation, READY_LINE, timeout=120)
    return fired and fired[0]


def rate_restored(node, unit):
    node.ssh(
        f"rm -f /run/systemd/system/{unit}.d/{DROP_IN} {RATE_ENV_FILE} && systemctl daemon-reload",
        check=False,
    )


# -- Memory, passports -------------------------------------------------------------------------


def memory(prom, monitor):
    pid = int(unit_show(monitor, PROMETHEUS_UNIT, "MainPID")["MainPID"])
    status = monitor.ssh(f"cat /proc/{pid}/status")
    kib = dict(re.findall(r"^(VmRSS|VmHWM):\s+(\d+) kB", status, re.M))
    targets = prom.get("/api/v1/targets", state="active")["activeTargets"]
    return {
        "uptime_s": prom.value('time() - process_start_time_seconds{job="prometheus"}'),
        "rss_mib": int(kib.get("VmRSS", 0)) / 1024,
        "hwm_mib": int(kib.get("VmHWM", 0)) / 1024,
        "self_mib": (prom.value('process_resident_memory_bytes{job="prometheus"}') or float("nan")) / 2**20,
        "head_series": prom.value("prometheus_tsdb_head_series"),
        "targets": len(targets),
        "up": sum(1 for t in targets if t.get("health") == "up"),
        "jobs": ", ".join(
            f"{job} {n}" for job, n in sorted(_count(t["labels"].get("job") for t in targets).items())
        ),
    }


def _count(items):
    counts = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return counts


def passport_times(node, runs):
    """[(over SSH s, on the node s, the passport's took_s)] of ``runs`` collections."""
    state_dir = settings_of(node.data, node.name).state_dir
    command = passport_command(scripts_dir(node), f"{state_dir}/passport.json")
    timed = (
        f"start=$(date +%s%N); out=$({command}); end=$(date +%s%N); "
        'printf "%s\\n" "$out"; echo "bench-ns $((end - start))"'
    )
    times = []
    for _ in range(runs):
        started = time.monotonic()
        output = node.ssh(timed, timeout=300)
        wall = time.monotonic() - started
        on_node = int(re.search(r"^bench-ns (\d+)$", output, re.M).group(1)) / 1e9
        found = result.parse(output.splitlines()) or {}
        times.append((wall, on_node, (found.get("passport") or {}).get("took_s")))
    return times


# -- The run -----------------------------------------------------------------------------------


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inventory", default=SANDBOX_INVENTORY)
    parser.add_argument("--decode-host", help="whose rate falls (default: the first serving node)")
    parser.add_argument("--stop-host", help="whose unit stops (default: the last serving node)")
    parser.add_argument("--monitoring-host", help="the Prometheus host (default: the inventory's first)")
    parser.add_argument("--prometheus-url", help="read Prometheus here, not over SSH on its host")
    parser.add_argument("--base-profile", default="sandbox", help="what the decode host's profile extends")
    parser.add_argument("--good-rate", type=float, default=82.0, help="tok/s before (the incident's 82)")
    parser.add_argument("--low-rate", type=float, default=60.0, help="tok/s after (the incident's 60)")
    parser.add_argument("--max-regression-pct", type=float, default=10.0)
    parser.add_argument("--max-tokens", type=int, default=128, help="tokens per streamed request")
    parser.add_argument("--warm-s", type=float, help="load before the fall (default: the rule's rate window)")
    parser.add_argument(
        "--poll-s", type=float, default=1.0, help="seconds between two reads of /api/v1/alerts"
    )
    parser.add_argument("--passport-runs", type=int, default=3)
    parser.add_argument(
        "--scenarios", default=",".join(SCENARIOS), help="a comma list of " + ", ".join(SCENARIOS)
    )
    parser.add_argument("--out", help="results file (default bench/results/monitoring-<date>.txt)")
    args = parser.parse_args(argv)
    scenarios = [s for s in args.scenarios.split(",") if s]
    if set(scenarios) - set(SCENARIOS):
        parser.error(f"--scenarios: unknown {', '.join(sorted(set(scenarios) - set(SCENARIOS)))}")

    serving, monitor = fleet(args.inventory, args.monitoring_host)
    by_name = {n.name: n for n in serving}
    decode_node = by_name.get(args.decode_host or serving[0].name)
    stop_node = by_name.get(args.stop_host or serving[-1].name)
    if not decode_node or not stop_node or decode_node is stop_node:
        parser.error(f"--decode-host and --stop-host: two different serving nodes of {', '.join(by_name)}")
    prom = Prometheus(monitor, settings_of(monitor.data, monitor.name).prometheus_port, args.prometheus_url)
    out = Report()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    out(
        f"monitoring bench: {len(serving)} serving nodes, Prometheus on {monitor.name} "
        f"(commit {commit}, {time.strftime('%Y-%m-%d %H:%M')}; {args.inventory})"
    )

    try:
        scrape_s, eval_s = intervals(prom)
    except (RuntimeError, OSError, ValueError, KeyError) as e:
        raise SystemExit(f"Prometheus on {monitor.name} does not answer (is the fleet deployed?): {e}") from e
    rules, template = rules_of(prom.get("/api/v1/rules")), template_for_s()
    # A Prometheus the deploy just restarted has not scraped every target yet.
    targets = wait_scraped(prom, timeout=3 * scrape_s + 30)
    instances = {n.name: engine_instance(targets, n.name) for n in (decode_node, stop_node)}
    for scenario, name, alert in (
        ("decode", decode_node.name, DECODE_ALERT),
        ("down", stop_node.name, DOWN_ALERT),
    ):
        if scenario in scenarios and (instances[name] is None or alert not in rules):
            scenarios.remove(scenario)
            why = "is not loaded" if alert not in rules else f"has no engine target of {name} to fire for"
            out(f"{scenario}: skipped ({alert} {why})")
    out(
        f"scrape interval {fmt_s(scrape_s, 0)} s, evaluation interval {fmt_s(eval_s, 0)} s "
        "(the configuration Prometheus runs)"
    )
    out()

    mem_start = memory(prom, monitor) if "memory" in scenarios else None
    decode = decode_seen = down_seen = passports = mem_end = None
    if "decode" in scenarios:
        decode = Decode(prom, decode_node, instances[decode_node.name], rules[DECODE_ALERT], args, out)
    with tempfile.TemporaryDirectory() as workdir:
        try:
            # The decode alert's load runs from here to its end; the rest fills that time.
            ready = decode and decode.prepare(workdir, scrape_s)
            if "passport" in scenarios:
                passports = {n.name: passport_times(n, args.passport_runs) for n in serving}
            if "down" in scenarios:
                timeout = rules[DOWN_ALERT].for_s + 3 * (scrape_s + eval_s) + 60
                down_seen = engine_down(prom, stop_node, instances[stop_node.name], timeout, args.poll_s, out)
            if ready:
                decode_seen = decode.fall_and_wait(scrape_s, eval_s)
            if "memory" in scenarios:
                mem_end = memory(prom, monitor)
        finally:
            if decode:
                decode.cleanup()

    out()
    report_rules(out, rules, template, scrape_s, eval_s)
    if decode_seen or down_seen:
        report_latency(out, decode_seen, down_seen, rules, scrape_s, eval_s, decode and decode.facts, args)
    if mem_start:
        report_memory(out, [("start", mem_start)] + ([("end", mem_end)] if mem_end else []))
    if passports:
        report_passports(out, passports)
    out.save(args.out or REPO / "bench" / "results" / f"monitoring-{time.strftime('%Y-%m-%d')}.txt")
    return 0


# -- The tables ---------------------------------------------------------------------------------


def report_rules(out, rules, template, scrape_s, eval_s):
    out("Alert rules (for: in the template vs as Prometheus loaded them; expected = scrape + eval + for):")
    out.table(
        ["rule", "for (template) s", "for (Prometheus) s", "group interval s", "expected s"],
        [
            (
                name,
                fmt_s(template.get(name), 0),
                fmt_s(rule.for_s, 0),
                fmt_s(rule.group_interval_s, 0),
                fmt_s(scrape_s + eval_s + rule.for_s, 0),
            )
            for name, rule in rules.items()
        ],
    )
    missing = sorted(set(template) - set(rules))
    if missing:
        out(f"in the template but not loaded by Prometheus: {', '.join(missing)}")
    out()


def report_latency(out, decode_seen, down_seen, rules, scrape_s, eval_s, facts, args):
    rows = []
    for seen, extra, event in (
        (decode_seen, facts.get("crossing") or 0.0, "restarted slower (fired up)"),
        (down_seen, 0.0, "systemctl stop returned"),
    ):
        if not seen:
            continue
        expected = scrape_s + eval_s + rules[seen.alert].for_s + extra
        firing = (seen.firing_seen - seen.event_at) if seen.firing_seen else None
        rows.append(
            (
                seen.alert,
                event,
                fmt_s(seen.active_at - seen.event_at if seen.active_at else None, 1),
                fmt_s(firing, 1),
                fmt_s(rules[seen.alert].for_s, 0),
                fmt_s(extra, 0) if extra else "-",
                fmt_s(expected, 0),
                f"{firing / expected:.2f}" if firing else "-",
            )
        )
    out(f"Alert latency (polled every {args.poll_s:g} s; expected = scrape + eval + for + window crossing):")
    out.table(
        [
            "alert",
            "from",
            "-> pending s",
            "-> firing s",
            "for s",
            "window crossing s",
            "expected s",
            "firing / expected",
        ],
        rows,
        aligns=["<", "<"] + [">"] * 6,
    )
    for seen in (decode_seen, down_seen):
        if seen and seen.note:
            out(f"{seen.alert}: {seen.note}")
    if decode_seen:
        (good, n_good), (low, n_low) = facts["good"], facts["low"]
        out(f"{DECODE_ALERT}: the stand-in at {args.good_rate:g}, then {args.low_rate:g} tok/s")
        out(
            f"  streamed load: {fmt_s(good, 1)} tok/s median ({n_good} requests over "
            f"{fmt_s(facts['warm_s'], 0)} s), then {fmt_s(low, 1)} ({n_low} requests); "
            f"{facts['errors']} failed (the restart, {fmt_s(facts['restart_s'], 1)} s)"
        )
        out(
            f"  Prometheus' rate before the fall {fmt_s(facts['live_before'], 1)} tok/s (alert: "
            f"{facts['before'] or 'none'}); when firing {fmt_s(decode_seen.value, 1)} tok/s"
        )
        out(
            f"  threshold {fmt_s(facts['threshold'], 1)} tok/s = last known good "
            f"{fmt_s(facts['last_good'], 1)} x (1 - {fmt_s(facts['pct'], 0)} %); the "
            f"{fmt_s(facts['window'], 0)} s window's mean crosses it"
            f" {fmt_s(facts['crossing'], 0)} s after the fall (computed, the window crossing above)"
        )
    out()


def report_memory(out, samples):
    out("Prometheus memory (RSS of its main process, and its own process_resident_memory_bytes):")
    out.table(
        [
            "when",
            "uptime s",
            "targets up",
            "head series",
            "VmRSS MiB",
            "VmHWM MiB",
            "self MiB",
            "RSS / self",
            "MiB / target",
        ],
        [
            (
                when,
                fmt_s(m["uptime_s"], 0),
                f"{m['up']}/{m['targets']}",
                fmt_s(m["head_series"], 0),
                fmt_s(m["rss_mib"], 1),
                fmt_s(m["hwm_mib"], 1),
                fmt_s(m["self_mib"], 1),
                f"{m['rss_mib'] / m['self_mib']:.2f}"
                if m["self_mib"] == m["self_mib"] and m["self_mib"]
                else "-",
                f"{m['rss_mib'] / m['targets']:.1f}" if m["targets"] else "-",
            )
            for when, m in samples
        ],
    )
    out(f"targets by job: {samples[0][1]['jobs']}")
    out()


def report_passports(out, passports):
    rows = []
    for name, times in passports.items():
        wall, node, took = ([t[i] for t in times if t[i] is not None] for i in range(3))
        rows.append((name, len(times), median(node), median(took), median(wall)))
    out("Hardware passport collection (passport.py collect --write, as the deploy runs it):")
    out.table(
        ["node", "runs", "on node s", "took_s s", "over SSH s", "SSH / on node"],
        [
            (name, n, fmt_s(node, 3), fmt_s(took, 3), fmt_s(wall, 3), f"{wall / node:.2f}" if node else "-")
            for name, n, node, took, wall in rows
        ]
        + [
            (
                "median",
                "",
                fmt_s(statistics.median(r[2] for r in rows), 3),
                fmt_s(median([r[3] for r in rows if r[3] == r[3]]), 3),
                fmt_s(statistics.median(r[4] for r in rows), 3),
                "",
            )
        ],
    )
    out()


if __name__ == "__main__":
    sys.exit(main())
