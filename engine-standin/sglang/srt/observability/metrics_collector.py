"""SGLang 0.5.23's Prometheus metrics with its names, types, help texts, labels and buckets
(sglang/srt/observability/metrics_collector.py: SchedulerMetricsCollector,
TokenizerMetricsCollector), created only with --enable-metrics, as SGLang creates them.

Scheduler gauges, labels model_name, engine_type ("unified": no disaggregation), tp_rank,
pp_rank, moe_ep_rank (all 0: only the stats-logging rank, TP0, sets them). Set at start-up:
sglang:max_total_num_tokens, sglang:context_len (emit_constants). Set whenever the scheduler
logs its stats (a request admitted or finished, every decode_log_interval decode steps, idle):
sglang:num_running_reqs, sglang:num_queue_reqs, sglang:num_grammar_queue_reqs,
sglang:gen_throughput, sglang:cache_hit_rate, sglang:decode_sum_seq_lens, sglang:token_usage,
sglang:full_token_usage, sglang:num_used_tokens, sglang:kv_available_tokens,
sglang:kv_evictable_tokens, sglang:kv_used_tokens.

Tokenizer metrics, labels model_name, engine_type (+ is_streaming where SGLang adds it), once a
request produced its first token or finished: sglang:prompt_tokens_total,
sglang:generation_tokens_total, sglang:num_requests_total (at a request's end, as SGLang counts
them), sglang:num_aborted_requests_total, and the histograms
sglang:time_to_first_token_seconds, sglang:inter_token_latency_seconds (streamed requests:
SGLang observes it per output chunk after the first), sglang:request_time_per_output_token_seconds,
sglang:e2e_request_latency_seconds.

sglang:spec_accept_length and sglang:spec_accept_rate: at each decode log of a server started
with --speculative-algorithm (sandbox/speculation.py).

Not served (they would read 0 or stay absent here: the rest of speculative decoding, disaggregation, LoRA,
hierarchical cache, grammar and per-stage timings): the rest of SGLang's families.
"""

from __future__ import annotations

from typing import Optional

from sglang.srt.observability.exposition import Registry

# TokenizerMetricsCollector's default buckets.
TIME_TO_FIRST_TOKEN_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
E2E_REQUEST_LATENCY_BUCKETS = TIME_TO_FIRST_TOKEN_BUCKETS + (600, 1200, 1800, 2400)
INTER_TOKEN_LATENCY_BUCKETS = (
    0.002,
    0.004,
    0.006,
    0.008,
    0.010,
    0.015,
    0.020,
    0.025,
    0.030,
    0.035,
    0.040,
    0.060,
    0.080,
    0.100,
    0.200,
    0.400,
    0.600,
    0.800,
    1.000,
    2.000,
    4.000,
    6.000,
    8.000,
)

_SCHEDULER_GAUGES = (
    ("num_running_reqs", "The number of running requests."),
    ("num_queue_reqs", "The number of requests in the waiting queue."),
    ("num_grammar_queue_reqs", "The number of requests in the grammar waiting queue."),
    ("gen_throughput", "The generation throughput (token/s)."),
    ("cache_hit_rate", "The prefix cache hit rate."),
    ("decode_sum_seq_lens", "The sum of all sequence lengths in decode."),
    ("token_usage", "The token usage."),
    ("full_token_usage", "The token usage for full attention layers."),
    ("num_used_tokens", "The number of used tokens."),
    ("kv_available_tokens", "Number of free token slots in the KV cache pool."),
    ("kv_evictable_tokens", "Number of evictable (radix-cached) token slots in the KV cache pool."),
    ("kv_used_tokens", "Number of actively used token slots in the KV cache pool."),
)
# Set at each decode log of a speculating scheduler (0 otherwise, as SGLang leaves them).
_SPEC_GAUGES = (
    (
        "spec_accept_length",
        "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).",
    ),
    ("spec_accept_rate", "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch)."),
)
_CONSTANT_GAUGES = (
    ("max_total_num_tokens", "Maximum total number of tokens in the KV cache pool."),
    ("context_len", "Maximum context length."),
)


def _stream_label(stream: bool) -> str:
    return "true" if stream else "false"


class EngineMetrics:
    """Both collectors on one registry: the launcher serves what the schedulers and the
    tokenizer manager write (SGLang: PROMETHEUS_MULTIPROC_DIR, read by /metrics)."""

    def __init__(self, served_model_name: str):
        self.registry = Registry()
        self.tokenizer_labels = {"model_name": served_model_name, "engine_type": "unified"}
        self.scheduler_labels = {**self.tokenizer_labels, "tp_rank": 0, "pp_rank": 0, "moe_ep_rank": 0}
        scheduler_names = tuple(self.scheduler_labels)
        self._gauges = {
            key: self.registry.family(f"sglang:{key}", doc, "gauge", scheduler_names)
            for key, doc in _SCHEDULER_GAUGES + _SPEC_GAUGES + _CONSTANT_GAUGES
        }
        tok = tuple(self.tokenizer_labels)
        streamed = tok + ("is_streaming",)
        family = self.registry.family
        self.prompt_tokens_total = family(
            "sglang:prompt_tokens_total", "Number of prefill tokens processed.", "counter", streamed
        )
        self.generation_tokens_total = family(
            "sglang:generation_tokens_total", "Number of generation tokens processed.", "counter", streamed
        )
        self.num_requests_total = family(
            "sglang:num_requests_total", "Number of requests processed.", "counter", streamed
        )
        self.num_aborted_requests_total = family(
            "sglang:num_aborted_requests_total", "Number of requests aborted.", "counter", tok
        )
        self.time_to_first_token = family(
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            "histogram",
            streamed,
            TIME_TO_FIRST_TOKEN_BUCKETS,
        )
        self.inter_token_latency = family(
            "sglang:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            "histogram",
            tok,
            INTER_TOKEN_LATENCY_BUCKETS,
        )
        self.request_time_per_output_token = family(
            "sglang:request_time_per_output_token_seconds",
            "Per-request TPOT in seconds: (finished_time - first_token_time) / (completion_tokens - 1).",
            "histogram",
            streamed,
            INTER_TOKEN_LATENCY_BUCKETS,
        )
        self.e2e_request_latency = family(
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            "histogram",
            streamed,
            E2E_REQUEST_LATENCY_BUCKETS,
        )

    # ------------------------------------------------------------------ scheduler side
    def emit_constants(self, max_total_num_tokens: int, context_len: int) -> None:
        self._gauges["max_total_num_tokens"].set(self.scheduler_labels, max_total_num_tokens)
        self._gauges["context_len"].set(self.scheduler_labels, context_len)

    def log_stats(
        self, running: int, queued: int, gen_throughput: float, used_tokens: int, max_total_num_tokens: int
    ) -> None:
        """SchedulerMetricsCollector.log_stats: one snapshot of the scheduler's state."""
        usage = used_tokens / max_total_num_tokens if max_total_num_tokens else 0.0
        values = {
            "num_running_reqs": running,
            "num_queue_reqs": queued,
            "num_grammar_queue_reqs": 0,
            "gen_throughput": gen_throughput,
            "cache_hit_rate": 0.0,
            "decode_sum_seq_lens": used_tokens,
            "token_usage": usage,
            "full_token_usage": usage,
            "num_used_tokens": used_tokens,
            "kv_available_tokens": max(0, max_total_num_tokens - used_tokens),
            "kv_evictable_tokens": 0,
            "kv_used_tokens": used_tokens,
        }
        for key, value in values.items():
            self._gauges[key].set(self.scheduler_labels, value)

    def log_speculation(self, accept_length: float, accept_rate: float) -> None:
        """The decode log's speculation figures (SchedulerMetricsCollector's spec gauges)."""
        self._gauges["spec_accept_length"].set(self.scheduler_labels, accept_length)
        self._gauges["spec_accept_rate"].set(self.scheduler_labels, accept_rate)

    # ------------------------------------------------------------------ tokenizer side
    def observe_time_to_first_token(self, seconds: float, stream: bool) -> None:
        labels = {**self.tokenizer_labels, "is_streaming": _stream_label(stream)}
        self.time_to_first_token.observe(labels, seconds)

    def observe_inter_token_latency(self, interval: float, num_new_tokens: int) -> None:
        if num_new_tokens <= 0:
            return
        self.inter_token_latency.observe(self.tokenizer_labels, interval / num_new_tokens, num_new_tokens)

    def observe_one_finished_request(
        self,
        prompt_tokens: int,
        generation_tokens: int,
        e2e_latency: float,
        stream: bool,
        time_per_output_token: Optional[float],
    ) -> None:
        labels: dict[str, object] = {**self.tokenizer_labels, "is_streaming": _stream_label(stream)}
        self.prompt_tokens_total.inc(labels, prompt_tokens)
        self.generation_tokens_total.inc(labels, generation_tokens)
        self.num_requests_total.inc(labels, 1)
        self.e2e_request_latency.observe(labels, e2e_latency)
        if time_per_output_token is not None:
            self.request_time_per_output_token.observe(labels, time_per_output_token)

    def observe_one_aborted_request(self) -> None:
        self.num_aborted_requests_total.inc(self.tokenizer_labels, 1)

    def exposition(self) -> str:
        return self.registry.exposition()
