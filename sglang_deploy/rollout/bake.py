"""A canary wave's bake across the run's nodes (rollout/waves.py's WaveRun holds one): once
every canary restarted, each canary that serves the new configuration and each serving node
still on the old one reads its own SGLang /metrics and its own series on every router's
exporter (facts/metrics.py), waits the bake, reads them again; the last to report judges
(report/canary.py, per served model; what could not be judged is said as a warning). A bake
that fails stops the run (Rollout.stop) and every canary goes back to the configuration it
served before (operations/canary.py roll_back).
"""

from __future__ import annotations

import time

from gevent.event import Event
from pyinfra import logger

from sglang_deploy.facts.metrics import EngineMetrics
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
