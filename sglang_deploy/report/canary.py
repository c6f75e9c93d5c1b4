"""A canary's bake, judged: the canaries' SGLang /metrics against the nodes still on the old
configuration, each read at the start and at the end of the bake, then what the gateway saw of
each of them (report/canary_gateway.py: its error rate per worker, from every router's
exporter). Pure: the scrapes are given.

Per node, over the bake (counter deltas; a counter that went down restarted, so its end value
is the delta, as Prometheus' rate() takes it):

- **error rate**: aborted requests (``sglang:num_aborted_requests_total``) of the requests it
  finished or aborted (``sglang:num_requests_total`` + aborted);
- **TTFT p95**: from the deltas of ``sglang:time_to_first_token_seconds``' cumulative buckets,
  interpolated inside the bucket as Prometheus' histogram_quantile() does (the old nodes'
  buckets pooled);
- **decode tok/s**, on the best basis every compared node exports: per request
  (``sglang:generation_tokens_total`` over the time requests spent after their first token:
  ``sglang:e2e_request_latency_seconds`` sum minus the TTFT sum), else SGLang's own
  ``sglang:gen_throughput`` gauge at the end, else the node's tokens per second of the bake.
  Behind a round-robin router every node finishes about as many requests, so the last basis
  sees a slower node only once it saturates; the basis used is said.

A canary fails when its error rate is more than ``max_error_rate`` above the old nodes', its
TTFT p95 more than ``max_ttft_regression_pct`` % above theirs, or its decode tok/s more than
``max_decode_regression_pct`` % below their median. A bake without evidence fails too, saying
why: a node whose /metrics could not be read (a canary, or every old node), fewer than
``min_requests`` requests, or a metric one side exports and the other does not. A canary that
does worse through the gateway fails naming it (``gateway: error rate``); gateway figures that
could not be read are said (a warning, or a failure with ``require_gateway_metrics``).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from sglang_deploy.report import canary_gateway, prom_text

REQUESTS = "sglang:num_requests_total"
ABORTED = "sglang:num_aborted_requests_total"
TTFT = "sglang:time_to_first_token_seconds"
E2E = "sglang:e2e_request_latency_seconds"
TOKENS = "sglang:generation_tokens_total"
GEN_THROUGHPUT = "sglang:gen_throughput"
# What a scrape keeps (the node filters /metrics to these families before sending it).
FAMILIES = (REQUESTS, ABORTED, TTFT, E2E, TOKENS, GEN_THROUGHPUT)
GATEWAY_FAMILIES = canary_gateway.FAMILIES  # of each router's exporter, the node's own series

PER_REQUEST, GAUGE, PER_NODE = "per request", "sglang:gen_throughput", "node tokens/s"


@dataclass(frozen=True)
class Scrape:
    """One read of a node's /metrics: ``text`` at ``at`` (the node's clock, seconds), or
    ``error`` saying why there is none; with the routers', ``gateway``: {exporter URL: Scrape},
    and ``worker``: the URL the routers know the node by (their series' ``worker`` label)."""

    at: float = 0.0
    text: str | None = None
    error: str | None = None
    worker: str | None = None
    gateway: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Rates:
    node: str
    seconds: float
    requests: float  # finished or aborted during the bake
    aborted: float
    ttft_buckets: dict  # {upper bound: count during the bake}, cumulative; empty: not exported
    decode: dict  # {basis: tok/s} for every basis this node exports

    @property
    def error_rate(self) -> float | None:
        return self.aborted / self.requests if self.requests else None

    @property
    def ttft_p95_s(self) -> float | None:
        return quantile(0.95, self.ttft_buckets)


@dataclass
class Verdict:
    passed: bool
    failures: list = field(default_factory=list)  # (node or "bake", metric, why)
    lines: list = field(default_factory=list)  # what the run says of the comparison
    warnings: list = field(default_factory=list)  # what could not be judged, and why

    def cause(self) -> str:
        return "; ".join(f"{node}: {metric}: {why}" for node, metric, why in self.failures)


def rates(node: str, start: Scrape, end: Scrape) -> Rates:
    """A node's rates over the bake; ValueError saying why when a scrape is missing or unreadable."""
    for which, scrape in (("start", start), ("end", end)):
        if scrape.text is None:
            raise ValueError(f"no /metrics at the bake's {which}: {scrape.error or 'nothing read'}")
    try:
        a, b = prom_text.parse(start.text), prom_text.parse(end.text)
    except prom_text.ParseError as exc:
        raise ValueError(f"/metrics unreadable: {exc}") from None
    if b.total(REQUESTS) is None:
        raise ValueError(f"/metrics has no {REQUESTS} (is the server started with --enable-metrics?)")
    seconds = max(end.at - start.at, 1e-9)
    aborted = prom_text.increase(a.total(ABORTED), b.total(ABORTED)) or 0.0
    finished = prom_text.increase(a.total(REQUESTS), b.total(REQUESTS))
    buckets = _bucket_deltas(a.buckets(TTFT), b.buckets(TTFT))
    tokens = prom_text.increase(a.total(TOKENS), b.total(TOKENS))
    decode = {}
    if tokens is not None:
        decode[PER_NODE] = tokens / seconds
        busy = prom_text.increase(a.total(E2E + "_sum"), b.total(E2E + "_sum"))
        first = prom_text.increase(a.total(TTFT + "_sum"), b.total(TTFT + "_sum"))
        if busy is not None and first is not None and busy - first > 0 and tokens > 0:
            decode[PER_REQUEST] = tokens / (busy - first)
    gauge = b.total(GEN_THROUGHPUT)
    if gauge is not None and gauge > 0:
        decode[GAUGE] = gauge
    return Rates(node, seconds, finished + aborted, aborted, buckets, decode)


def _bucket_deltas(start: dict, end: dict) -> dict:
    if not end:
        return {}
    if any(end.get(bound, 0.0) < count for bound, count in start.items()):
        return dict(end)  # the histogram restarted during the bake
    return {bound: count - start.get(bound, 0.0) for bound, count in end.items()}


def quantile(q: float, buckets: dict) -> float | None:
    """histogram_quantile(q) of cumulative ``buckets`` {upper bound: count}; None without
    observations. Inside a bucket linear from its lower bound (0 for the first); in the +Inf
    bucket the highest finite bound."""
    if not buckets:
        return None
    bounds = sorted(buckets)
    total = buckets[bounds[-1]]
    if total <= 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower


def pooled(all_rates) -> dict:
    """The cumulative TTFT buckets of several nodes, summed."""
    found = {}
    for r in all_rates:
        for bound, count in r.ttft_buckets.items():
            found[bound] = found.get(bound, 0.0) + count
    return dict(sorted(found.items()))


def judge(canaries: dict, old: dict, limits) -> Verdict:
    """The bake's verdict. ``canaries`` / ``old``: {node: (start Scrape, end Scrape)};
    ``limits``: a host's settings.canary (plan/settings/groups_rollout.py Canary)."""
    verdict = Verdict(passed=False)
    fail = verdict.failures.append
    canary_rates, old_rates, unread = {}, {}, {}
    for node, (start, end) in canaries.items():
        try:
            canary_rates[node] = rates(node, start, end)
        except ValueError as exc:
            fail((node, "metrics", str(exc)))
    for node, (start, end) in old.items():
        try:
            old_rates[node] = rates(node, start, end)
        except ValueError as exc:
            unread[node] = str(exc)
            verdict.lines.append(f"{node} (old configuration) left out: {exc}")
    if not canaries:
        fail(("bake", "metrics", "no canary serves the new configuration to compare"))
    if not old_rates:
        why = "; ".join(f"{n}: {text}" for n, text in unread.items()) or "no such node in the run"
        fail(("bake", "metrics", f"no metrics from any node on the old configuration ({why})"))
    if verdict.failures:
        return verdict
    baseline = list(old_rates.values())
    old_requests = sum(r.requests for r in baseline)
    old_aborted = sum(r.aborted for r in baseline)
    if old_requests < limits.rolling_canary_min_requests:
        fail(
            (
                "bake",
                "requests",
                f"the old nodes finished {old_requests:g} requests during the bake, fewer than "
                f"rolling_canary_min_requests ({limits.rolling_canary_min_requests}): no traffic to compare under",
            )
        )
    old_error = old_aborted / old_requests if old_requests else 0.0
    old_p95 = quantile(0.95, pooled(baseline))
    basis = _basis([*canary_rates.values(), *baseline])
    old_decode = statistics.median(r.decode[basis] for r in baseline) if basis else None
    verdict.lines.append(_summary("old configuration", old_requests, old_error, old_p95, basis, old_decode))
    for node, r in canary_rates.items():
        verdict.lines.append(
            _summary(node, r.requests, r.error_rate, r.ttft_p95_s, basis, r.decode.get(basis))
        )
        if r.requests < limits.rolling_canary_min_requests:
            fail(
                (
                    node,
                    "requests",
                    f"{r.requests:g} requests during the bake, fewer than rolling_canary_min_requests "
                    f"({limits.rolling_canary_min_requests}): no evidence",
                )
            )
            continue
        if r.error_rate - old_error > limits.rolling_canary_max_error_rate:
            fail(
                (
                    node,
                    "error rate",
                    f"{r.error_rate:.1%} of its requests aborted against {old_error:.1%} on the old "
                    f"configuration (rolling_canary_max_error_rate {limits.rolling_canary_max_error_rate:g})",
                )
            )
        _compare_ttft(node, r, old_p95, limits, fail)
        if basis is None:
            fail((node, "decode tok/s", f"no {TOKENS} on every compared node"))
        elif old_decode and r.decode[basis] < old_decode * (
            1 - limits.rolling_canary_max_decode_regression_pct / 100
        ):
            fail(
                (
                    node,
                    "decode tok/s",
                    f"{r.decode[basis]:.1f} against {old_decode:.1f} on the old configuration ({basis}), "
                    f"{_pct(r.decode[basis], old_decode)} (rolling_canary_max_decode_regression_pct "
                    f"{limits.rolling_canary_max_decode_regression_pct:g})",
                )
            )
    canary_gateway.judge(
        {node: canaries[node] for node in canary_rates},
        {node: old[node] for node in old_rates},
        limits,
        verdict,
    )
    verdict.passed = not verdict.failures
    return verdict


def _compare_ttft(node, r, old_p95, limits, fail):
    mine = r.ttft_p95_s
    if mine is None and old_p95 is None:
        return  # neither side exports the histogram (or saw a first token): nothing to compare
    if mine is None or old_p95 is None:
        side = node if mine is None else "the old configuration"
        fail((node, "TTFT p95", f"no {TTFT} observations on {side}: cannot compare"))
        return
    if mine > old_p95 * (1 + limits.rolling_canary_max_ttft_regression_pct / 100):
        fail(
            (
                node,
                "TTFT p95",
                f"{mine * 1000:.0f} ms against {old_p95 * 1000:.0f} ms on the old configuration, "
                f"{_pct(mine, old_p95)} (rolling_canary_max_ttft_regression_pct {limits.rolling_canary_max_ttft_regression_pct:g})",
            )
        )


def _basis(all_rates):
    """The best decode basis every node exports, or None."""
    for basis in (PER_REQUEST, GAUGE, PER_NODE):
        if all(basis in r.decode for r in all_rates):
            return basis
    return None


def _pct(value, against):
    return f"{(value / against - 1) * 100:+.0f}%" if against else "n/a"


def _summary(who, requests, error, p95, basis, decode):
    p95_text = f"{p95 * 1000:.0f} ms" if p95 is not None else "n/a"
    error_text = f"{error:.1%}" if error is not None else "n/a"
    decode_text = f"{decode:.1f} ({basis})" if decode is not None else "n/a"
    return f"{who}: {requests:g} requests, error rate {error_text}, TTFT p95 {p95_text}, decode tok/s {decode_text}"
