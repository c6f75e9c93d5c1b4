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

from pyinfra import logger

from sglang_deploy.facts.metrics import EngineMetrics
from sglang_deploy.report import canary as judging
from sglang_deploy.report.canary import Scrape
from sglang_deploy.rollout.rendezvous import Rendezvous

# A participant that never reports (its greenlet died) is waited for this long past the bake.
REPORT_GRACE_S = 300.0


class Bake:
    """One canary wave's bake. ``canaries``: the canary wave; ``old``: the serving nodes of
    later waves (still on the old configuration); ``models``: {node: served model};
    ``settings``: a host's settings.canary. Two meetings (rollout/rendezvous.py): every
    canary's restart ends, the last one starts the bake; then every participant reports its
    scrapes, the last one judges."""

    def __init__(self, canaries, old, models, settings, run):
        self.canaries, self.old = tuple(canaries), tuple(old)
        self.models, self.settings, self.run = dict(models), settings, run
        self.serving = []  # canaries that serve the new configuration, back in rotation
        self.start = Rendezvous(self.canaries, self._begin)  # each canary, once its restart ended
        self.reports = None  # the serving canaries and the old nodes, with their scrapes
        self.begun_at = None
        self.verdict = None

    def restarted(self, name, served):
        """A canary's restart ended (``served``: it serves the new configuration)."""
        if served:
            self.serving.append(name)
        self.start.arrive(name, served)

    def _begin(self, arrived):
        self.begun_at = time.monotonic()
        self.reports = Rendezvous([*self.old, *self.serving], self._judge)
        logger.info(
            f"canary bake: {', '.join(self.serving) or 'no canary'} on the new configuration, "
            f"{', '.join(self.old)} on the old, for {self.settings.rolling_canary_bake_s:g}s"
        )

    def take_part(self, name, scrape):
        """In ``name``'s greenlet: read its metrics at the bake's start and end (``scrape()``:
        a Scrape), report, and return the verdict once there is one."""
        self.start.wait()
        reports = self.reports
        if name in reports.names and name not in reports.arrived:
            start = _safe(scrape)
            time_left = self.begun_at + self.settings.rolling_canary_bake_s - time.monotonic()
            if time_left > 0:
                reports.planned.wait(time_left)  # never set before every report: a sleep
            reports.arrive(name, (start, _safe(scrape)))
        reports.wait(self.settings.rolling_canary_bake_s + REPORT_GRACE_S)  # then judged with what came
        return self.verdict

    def _judge(self, scrapes):
        """{node: (start Scrape, end Scrape)} of those that reported."""
        missing = Scrape(error="its scrape never reported (its restart operation ended)")
        passed, failures, warnings = True, [], []
        for model in dict.fromkeys(self.models[name] for name in self.canaries):
            ours = {n: scrapes.get(n, (missing, missing)) for n in self.serving if self.models[n] == model}
            theirs = {n: scrapes.get(n, (missing, missing)) for n in self.old if self.models[n] == model}
            verdict = judging.judge(ours, theirs, self.settings)
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
