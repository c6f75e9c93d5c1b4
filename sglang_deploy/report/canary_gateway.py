"""A canary's bake, the gateway's side: what requests sent through SGLang's gateway got from
each node, the canaries against the nodes still on the old configuration. Each node reads its
own series from every router's exporter at the bake's start and end, beside its SGLang
/metrics (facts/metrics.py); this module judges what they read (pure: the scrapes are given).

What smg 1.13.0's exporter (``--prometheus-port``) labels by worker URL, read from the real
gateway's /metrics (tests/unit/captured/capture_smg_metrics.py): the counters
``smg_worker_cb_outcomes_total{worker, outcome}`` (each answer a worker gave, ``success`` or
``failure`` as its circuit breaker counts it, counted with the breaker disabled too) and
``smg_worker_requests_total{worker, model}`` (sends, retries included), and gauges (health,
breaker state, requests running). Its latencies (``smg_router_request_duration_seconds``,
``smg_router_ttft_seconds``) are labelled by model, not by worker, so the gateway does not
say a node's latency: SGLang's TTFT p95 judges that alone.

- **gateway error rate**: a node's failed answers of all it gave over the bake (counter
  increases, summed over the exporters every compared node read at both ends; a series that
  went down means the gateway restarted, and the node's series count from zero). A failure a
  retry hid from the client still counts: a canary that fails requests other nodes then
  serve is still a bad canary. It fails when more than ``max_error_rate`` above the old nodes'
  pooled share, the limit SGLang's error rate has.
- **not judged**: an exporter some compared node could not read (the router's exporter off,
  bound to loopback, firewalled) is left out, said; with none left, or fewer than
  ``min_requests`` answers through the gateway, the gateway's figures are not judged, said
  as a warning, and SGLang's figures judge alone. With ``require_gateway_metrics``
  (rolling_canary_require_gateway_metrics) that fails the bake instead.
"""

from __future__ import annotations

from sglang_deploy.report import prom_text

OUTCOMES = "smg_worker_cb_outcomes_total"
FAILURE = "failure"
# What a node keeps of an exporter's answer: these families, its own worker's series only.
FAMILIES = (OUTCOMES,)


def answers(exporter: str, start, end) -> tuple[float, float]:
    """(answers, failed answers) a node gave through the router of ``exporter`` over the bake;
    ValueError saying why when an end was not read or is unreadable."""
    counted = [
        _outcomes(exporter, which, scrape, end.worker) for which, scrape in (("start", start), ("end", end))
    ]
    before, after = counted
    if any(after.get(outcome, 0.0) < count for outcome, count in before.items()):
        before = {}  # the gateway restarted during the bake: every series counts from zero
    grew = {outcome: prom_text.increase(before.get(outcome), count) for outcome, count in after.items()}
    return sum(grew.values()), grew.get(FAILURE, 0.0)


def _outcomes(exporter, which, scrape, worker) -> dict:
    """{outcome: count} of ``worker`` in ``scrape``'s read of ``exporter``."""
    read = scrape.gateway.get(exporter)
    if read is None or read.text is None:
        raise ValueError(f"no /metrics at the bake's {which}: {read.error if read else 'not read'}")
    try:
        exposition = prom_text.parse(read.text)
    except prom_text.ParseError as exc:
        raise ValueError(f"/metrics unreadable: {exc}") from None
    found = {}
    for sample in exposition.samples:
        if sample.name == OUTCOMES and sample.labels.get("worker") == worker:
            outcome = sample.labels.get("outcome")
            found[outcome] = found.get(outcome, 0.0) + sample.value
    return found


def judge(canaries: dict, old: dict, limits, verdict) -> None:
    """Adds the gateway's side to ``verdict`` (report/canary.Verdict: its failures, lines and
    warnings). ``canaries`` / ``old``: {node: (start Scrape, end Scrape)} of the nodes SGLang's
    side compares; ``limits``: a host's settings.canary (plan/settings/groups_rollout.py
    Canary). No exporter named in any scrape: the fleet has no router, nothing to say (unless
    the gateway's figures are required)."""
    nodes = {**canaries, **old}
    exporters = list(dict.fromkeys(url for ends in nodes.values() for s in ends for url in s.gateway))
    if not exporters:
        if limits.rolling_canary_require_gateway_metrics:
            _not_judged(verdict, limits, "bake", "no router's exporter to read (no router in the fleet)")
        return
    totals = {node: [0.0, 0.0] for node in nodes}
    read, left_out = [], []
    for exporter in exporters:
        found, unread = {}, None
        for node, ends in nodes.items():
            try:
                found[node] = answers(exporter, *ends)
            except ValueError as exc:
                unread = f"{node}: {exc}"
                break
        if unread:
            left_out.append(f"{exporter} ({unread})")
            continue
        read.append(exporter)
        for node, (total, failed) in found.items():
            totals[node][0] += total
            totals[node][1] += failed
    for text in left_out:
        verdict.lines.append(f"gateway: {text}: left out")
    if not read:
        why = "; ".join(left_out)
        _not_judged(verdict, limits, "bake", f"metrics not reachable: {why}")
        return
    source = f"{OUTCOMES}, {len(read)} router(s)"
    old_total = sum(totals[node][0] for node in old)
    old_failed = sum(totals[node][1] for node in old)
    old_rate = old_failed / old_total if old_total else None
    verdict.lines.append(_summary("old configuration", old_total, old_rate, source))
    few_old = old_total < limits.rolling_canary_min_requests
    if few_old:
        _not_judged(
            verdict,
            limits,
            "bake",
            f"the old nodes gave {old_total:g} answers through the gateway during the bake, fewer than "
            f"rolling_canary_min_requests ({limits.rolling_canary_min_requests})",
        )
    for node in canaries:
        total, failed = totals[node]
        rate = failed / total if total else None
        verdict.lines.append(_summary(node, total, rate, source))
        if few_old:
            continue
        if total < limits.rolling_canary_min_requests:
            _not_judged(
                verdict,
                limits,
                node,
                f"{node} gave {total:g} answers through the gateway during the bake, fewer than "
                f"rolling_canary_min_requests ({limits.rolling_canary_min_requests})",
            )
        elif rate - old_rate > limits.rolling_canary_max_error_rate:
            verdict.failures.append(
                (
                    node,
                    "gateway: error rate",
                    f"{failed:g} of its {total:g} answers failed ({rate:.1%}) against {old_rate:.1%} on the old "
                    f"configuration ({OUTCOMES}; rolling_canary_max_error_rate {limits.rolling_canary_max_error_rate:g})",
                )
            )


def _not_judged(verdict, limits, who, why):
    if limits.rolling_canary_require_gateway_metrics:
        verdict.failures.append((who, "gateway", f"{why} (rolling_canary_require_gateway_metrics)"))
    else:
        verdict.warnings.append(f"gateway: {why}: not judged there, SGLang's /metrics judge alone")


def _summary(who, total, rate, source):
    rate_text = f"{rate:.1%}" if rate is not None else "n/a"
    return f"gateway: {who}: {total:g} answers, error rate {rate_text} ({source})"
