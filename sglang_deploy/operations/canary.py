"""A canary wave's bake across the run's nodes (operations/rollout.py's WaveRun holds one):
once every canary restarted, each canary that serves the new configuration and each serving
node still on the old one reads its own SGLang /metrics and its own series on every router's
exporter (facts/metrics.py), waits the bake, reads them again; the last to report judges
(report/canary.py, per served model; what could not be judged is said as a warning). A bake that
fails stops the run (Rollout.stop) and every canary goes back to the configuration it served
before (the record kept aside before it restarted: lastgood.py keep / reinstate), out of
rotation like any restart.
"""

from __future__ import annotations

import time

from gevent.event import Event
from pyinfra import logger
from pyinfra.api import StringCommand

from sglang_deploy.facts.metrics import EngineMetrics
from sglang_deploy.node.lib import result, status
from sglang_deploy.operations import remote
from sglang_deploy.operations.files import hook_paths
from sglang_deploy.operations.service import fail_with, run_cycle, script_cause
from sglang_deploy.report import canary as judging
from sglang_deploy.report.canary import Scrape

# A participant that never reports (its greenlet died) is waited for this long past the bake.
REPORT_GRACE_S = 300.0


class Bake:
    """One canary wave's bake. ``canaries``: the canary wave; ``old``: the serving nodes of
    later waves (still on the old configuration); ``models``: {node: served model}."""

    def __init__(self, canaries, old, models, rolling, run):
        self.canaries, self.old = tuple(canaries), tuple(old)
        self.models, self.rolling, self.run = dict(models), rolling, run
        self.unrestarted = set(self.canaries)  # canaries whose restart has not ended
        self.serving = []  # canaries that serve the new configuration, back in rotation
        self.pending = set(self.old)  # participants that have not reported (canaries join)
        self.scrapes = {}  # node -> (start Scrape, end Scrape)
        self.started, self.done = Event(), Event()
        self.begun_at = None
        self.verdict = None

    def restarted(self, name, served):
        """A canary's restart ended (``served``: it serves the new configuration)."""
        if served:
            self.serving.append(name)
            self.pending.add(name)
        self.unrestarted.discard(name)
        if not self.unrestarted and not self.started.is_set():
            self.begun_at = time.monotonic()
            logger.info(
                f"canary bake: {', '.join(self.serving) or 'no canary'} on the new configuration, "
                f"{', '.join(self.old)} on the old, for {self.rolling.canary_bake_s:g}s"
            )
            self.started.set()

    def take_part(self, name, scrape):
        """In ``name``'s greenlet: read its metrics at the bake's start and end (``scrape()``:
        a Scrape), report, and return the verdict once there is one."""
        self.started.wait()
        if name in self.pending:
            start = _safe(scrape)
            time_left = self.begun_at + self.rolling.canary_bake_s - time.monotonic()
            if time_left > 0:
                self.done.wait(time_left)  # never set before every report: a sleep
            self.report(name, start, _safe(scrape))
        if not self.done.wait(self.rolling.canary_bake_s + REPORT_GRACE_S):
            self.judge()
        return self.verdict

    def report(self, name, start, end):
        self.scrapes[name] = (start, end)
        self.pending.discard(name)
        if not self.pending:
            self.judge()

    def judge(self):
        if self.done.is_set():
            return
        missing = Scrape(error="its scrape never reported (its restart operation ended)")
        passed, failures, warnings = True, [], []
        for model in dict.fromkeys(self.models[name] for name in self.canaries):
            ours = {
                n: self.scrapes.get(n, (missing, missing)) for n in self.serving if self.models[n] == model
            }
            theirs = {n: self.scrapes.get(n, (missing, missing)) for n in self.old if self.models[n] == model}
            verdict = judging.judge(ours, theirs, self.rolling.canary_limits)
            for line in verdict.lines:
                logger.info(f"canary bake ({model}): {line}")
            for line in verdict.warnings:
                logger.warning(f"canary bake ({model}): {line}")
            passed = passed and verdict.passed
            failures += verdict.failures
            warnings += [f"{model}: {line}" for line in verdict.warnings]
        self.verdict = judging.Verdict(passed, failures, warnings=warnings)
        if passed:
            alone = f" (not everything judged: {'; '.join(warnings)})" if warnings else ""
            logger.info(f"canary bake passed: {', '.join(self.canaries)}; the others follow{alone}")
        else:
            why = f"canary {', '.join(self.canaries)} failed its bake: {self.verdict.cause()}"
            logger.error(why)
            self.run.stop(why)
        self.done.set()


def _safe(scrape):
    try:
        return scrape()
    except Exception as exc:  # the connection went: no metrics, said as such
        return Scrape(error=f"{type(exc).__name__}: {exc}")


def scraper(host, rotation):
    """This node's scrape, for Bake.take_part: its SGLang /metrics and its series on every
    router's exporter."""
    return lambda: host.get_fact(
        EngineMetrics,
        port=rotation.local_port,
        worker_url=rotation.worker_url,
        gateways=tuple(rotation.gateway_metrics),
        host=rotation.local_host,
    )


def keep_last_good(host, scripts):
    """Copy the canary's last known good aside before it restarts; why not, or None."""
    ok, output = remote.run(host, StringCommand(scripts.keep_last_good()))
    found = result.parse(output.stdout_lines) or {}
    if ok and found.get("status") == status.READY:
        return None
    return f"its last known good could not be kept for a rollback ({script_cause(output)})"


def roll_back(state, host, scripts, hook_python, rotation, run, why):
    """A canary that failed its bake, back on the configuration it served before, out of
    rotation (rotation.py around cycle.py --revert). Always False: the canary failed."""
    command = rotation.wrap(
        scripts.directory, scripts.revert_cycle(hook_paths(hook_python)), scripts.restore_last_good()
    )
    run.failed(host.name, why)
    try:
        found, output = run_cycle(host, command, scripts)
    except Exception as exc:  # the connection went away mid-rollback
        found, output = None, None
        cause = f"{type(exc).__name__}: {exc}"
    else:
        cause = (found or {}).get("cause") or (script_cause(output) if output else "no result")
    if found and found.get("outcome") == "rolled_back":
        previous = found.get("profile") or "its previous configuration"
        run.note(host.name, f"canary rolled back: serves {previous}")
        return fail_with(state, host, f"{why}; rolled back to {previous}")
    run.note(host.name, f"canary NOT rolled back ({cause}): check it")
    return fail_with(state, host, f"{why}; its rollback failed: {cause}")
