"""Writes sglang_0.5.3_metrics_{start,end}.txt: /metrics as SGLang 0.5.3 answers it, produced by
prometheus_client itself in multiprocess mode (SGLang sets PROMETHEUS_MULTIPROC_DIR under
--enable-metrics and serves MultiProcessCollector's generate_latest), with the metrics the
canary bake reads declared as python/sglang/srt/metrics/collector.py declares them (names,
help, label names, buckets, the scheduler gauges' multiprocess_mode="mostrecent") and a few
others around them. Between the two scrapes the node finishes 40 requests and aborts 1.

    python -m venv /tmp/prom && /tmp/prom/bin/pip install prometheus-client==0.26.0
    /tmp/prom/bin/python tests/unit/captured/capture_sglang_metrics.py tests/unit/captured
"""

import os
import random
import sys
import tempfile

OUT = sys.argv[1] if len(sys.argv) > 1 else "."
os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp()

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest  # noqa: E402
from prometheus_client.multiprocess import MultiProcessCollector  # noqa: E402

TTFT_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400]
E2E_BUCKETS = [
    0.1,
    0.2,
    0.4,
    0.6,
    0.8,
    1,
    2,
    4,
    6,
    8,
    10,
    20,
    40,
    60,
    80,
    100,
    200,
    400,
    600,
    1200,
    1800,
    2400,
]
TOKENIZER = {"model_name": "qwen3-8b"}
SCHEDULER = {"model_name": "qwen3-8b", "engine_type": "unified", "tp_rank": "0", "pp_rank": "0"}

prompt_tokens = Counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.", TOKENIZER.keys())
generation_tokens = Counter(
    "sglang:generation_tokens_total", "Number of generation tokens processed.", TOKENIZER.keys()
)
num_requests = Counter("sglang:num_requests_total", "Number of requests processed.", TOKENIZER.keys())
aborted = Counter("sglang:num_aborted_requests_total", "Number of requests aborted.", TOKENIZER.keys())
ttft = Histogram(
    "sglang:time_to_first_token_seconds",
    "Histogram of time to first token in seconds.",
    TOKENIZER.keys(),
    buckets=TTFT_BUCKETS,
)
e2e = Histogram(
    "sglang:e2e_request_latency_seconds",
    "Histogram of End-to-end request latency in seconds",
    TOKENIZER.keys(),
    buckets=E2E_BUCKETS,
)
gen_throughput = Gauge(
    "sglang:gen_throughput",
    "The generation throughput (token/s).",
    SCHEDULER.keys(),
    multiprocess_mode="mostrecent",
)
running = Gauge(
    "sglang:num_running_reqs",
    "The number of running requests.",
    SCHEDULER.keys(),
    multiprocess_mode="mostrecent",
)
token_usage = Gauge(
    "sglang:token_usage", "The token usage.", SCHEDULER.keys(), multiprocess_mode="mostrecent"
)

random.seed(5)


def serve(requests):
    for _ in range(requests):
        first = random.uniform(0.05, 0.5)
        tokens = random.randint(64, 256)
        prompt_tokens.labels(**TOKENIZER).inc(random.randint(20, 400))
        generation_tokens.labels(**TOKENIZER).inc(tokens)
        num_requests.labels(**TOKENIZER).inc()
        ttft.labels(**TOKENIZER).observe(first)
        e2e.labels(**TOKENIZER).observe(first + tokens / 41.0)


def scrape(name):
    registry = CollectorRegistry()
    MultiProcessCollector(registry)
    with open(os.path.join(OUT, name), "wb") as f:
        # A comment line, as the format allows: where the file comes from.
        f.write(b"# Captured with capture_sglang_metrics.py (prometheus_client 0.26.0, multiprocess)\n")
        f.write(generate_latest(registry))


serve(25)
gen_throughput.labels(**SCHEDULER).set(812.37)
running.labels(**SCHEDULER).set(3)
token_usage.labels(**SCHEDULER).set(0.04)
scrape("sglang_0.5.3_metrics_start.txt")
serve(40)
aborted.labels(**TOKENIZER).inc()
gen_throughput.labels(**SCHEDULER).set(790.02)
running.labels(**SCHEDULER).set(5)
scrape("sglang_0.5.3_metrics_end.txt")
