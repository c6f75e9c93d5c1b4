"""The stand-in's /metrics against SGLang 0.5.23's: its families (names, types, help texts, labels,
buckets; sglang/srt/observability/metrics_collector.py), printed exactly as prometheus_client's
MultiProcessCollector prints the same samples, with values that follow the load and the
configured decode rate. The HTTP handler and its state run in-process, on a free port."""

import http.client
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

STANDIN = Path(__file__).resolve().parents[2] / "engine-standin"
sys.path.insert(0, str(STANDIN))

from sglang.srt.entrypoints.http_api import ServerState, make_server  # noqa: E402
from sglang.srt.observability import metrics_collector  # noqa: E402
from sglang.srt.observability.exposition import Registry, go_float  # noqa: E402
from sglang.srt.sandbox.knobs import Knobs  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402

parser = pytest.importorskip("prometheus_client.parser", reason="prometheus-client (requirements.txt)")

RATE = 200.0  # tokens/s per request: quick tests, still paced
SCHEDULER_LABELS = {"model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"}
TOKENIZER_LABELS = {"model_name", "engine_type"}
# What SGLang 0.5.23 declares for the families the stand-in serves: type, labels (beyond the
# collector's own), help text.
EXPECTED = {
    "sglang:num_running_reqs": ("gauge", SCHEDULER_LABELS, "The number of running requests."),
    "sglang:num_queue_reqs": ("gauge", SCHEDULER_LABELS, "The number of requests in the waiting queue."),
    "sglang:gen_throughput": ("gauge", SCHEDULER_LABELS, "The generation throughput (token/s)."),
    "sglang:token_usage": ("gauge", SCHEDULER_LABELS, "The token usage."),
    "sglang:max_total_num_tokens": (
        "gauge",
        SCHEDULER_LABELS,
        "Maximum total number of tokens in the KV cache pool.",
    ),
    "sglang:prompt_tokens_total": (
        "counter",
        TOKENIZER_LABELS | {"is_streaming"},
        "Number of prefill tokens processed.",
    ),
    "sglang:generation_tokens_total": (
        "counter",
        TOKENIZER_LABELS | {"is_streaming"},
        "Number of generation tokens processed.",
    ),
    "sglang:num_requests_total": (
        "counter",
        TOKENIZER_LABELS | {"is_streaming"},
        "Number of requests processed.",
    ),
    "sglang:time_to_first_token_seconds": (
        "histogram",
        TOKENIZER_LABELS | {"is_streaming"},
        "Histogram of time to first token in seconds.",
    ),
    "sglang:inter_token_latency_seconds": (
        "histogram",
        TOKENIZER_LABELS,
        "Histogram of inter-token latency in seconds.",
    ),
    "sglang:e2e_request_latency_seconds": (
        "histogram",
        TOKENIZER_LABELS | {"is_streaming"},
        "Histogram of End-to-end request latency in seconds",
    ),
}
# TokenizerMetricsCollector's default time-to-first-token buckets in 0.5.23.
SGLANG_TTFT_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400]


class Engine:
    """A ServerState behind a real HTTP server on 127.0.0.1, warm (no warmup wait)."""

    def __init__(self, enable_metrics=True, max_running_requests=4096, rate=RATE):
        args = ServerArgs(model_path="/models/tiny", served_model_name="tiny", enable_metrics=enable_metrics)
        knobs = Knobs(warmup_seconds=0.0, tokens_per_second=rate)
        infos = [{"max_total_num_tokens": 100000, "max_running_requests": max_running_requests}]
        self.state = ServerState(args, knobs, {"model_type": "llama"}, 4096, infos)
        self.server = make_server("127.0.0.1", 0, self.state, dummy=False)
        self.port = self.server.server_address[1]
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def request(self, method, path, body=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, path, body=json.dumps(body) if body is not None else None)
            resp = conn.getresponse()
            return resp.status, resp.read().decode()
        finally:
            conn.close()

    def generate(self, tokens, stream=False):
        body = {"text": "hello there", "sampling_params": {"max_new_tokens": tokens}, "stream": stream}
        status, text = self.request("POST", "/generate", body)
        assert status == 200, text
        return text

    def generate_in_background(self, tokens):
        t = threading.Thread(target=self.generate, args=(tokens,), daemon=True)
        t.start()
        return t

    def metrics(self):
        status, text = self.request("GET", "/metrics")
        assert status == 200, text
        return text


@pytest.fixture
def engine():
    e = Engine()
    yield e
    e.close()


def families(text):
    return {f.name: f for f in parser.text_string_to_metric_families(text)}


def value(text, sample_name, **labels):
    """The one sample of that name whose labels include `labels`."""
    found = [
        s.value
        for f in parser.text_string_to_metric_families(text)
        for s in f.samples
        if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) == 1, (sample_name, labels, found)
    return found[0]


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.02)
    raise AssertionError("condition not reached")


# ---------------------------------------------------------------------- gating
def test_no_metrics_endpoint_without_enable_metrics():
    e = Engine(enable_metrics=False)
    try:
        e.generate(3)
        status, body = e.request("GET", "/metrics")
        assert status == 404 and json.loads(body) == {"detail": "Not Found"}
        assert e.state.generator.metrics is None
    finally:
        e.close()


# ---------------------------------------------------------------------- names, types, labels
def test_families_carry_sglangs_names_types_help_and_labels(engine):
    engine.generate(5)
    engine.generate(5, stream=True)
    got = families(engine.metrics())
    for name, (kind, labelnames, help_text) in EXPECTED.items():
        # prometheus_client's parser names a counter's family without its _total.
        family = got.get(name[: -len("_total")] if kind == "counter" else name)
        assert family is not None, f"{name} missing"
        assert (family.type, family.documentation) == (kind, help_text), name
        for sample in family.samples:
            assert set(sample.labels) - {"le"} == labelnames, (name, sample)
    ttft = got["sglang:time_to_first_token_seconds"]
    bounds = [s.labels["le"] for s in ttft.samples if s.name.endswith("_bucket")]
    per_series = [float(b) for b in bounds[: len(SGLANG_TTFT_BUCKETS) + 1]]
    assert per_series == SGLANG_TTFT_BUCKETS + [float("inf")]
    running = got["sglang:num_running_reqs"].samples[0].labels
    assert running == {
        "model_name": "tiny",
        "engine_type": "unified",
        "tp_rank": "0",
        "pp_rank": "0",
        "moe_ep_rank": "0",
    }


def test_before_any_request_only_the_start_up_constants_are_there(engine):
    got = families(engine.metrics())
    assert set(got) == {"sglang:max_total_num_tokens", "sglang:context_len"}
    assert got["sglang:context_len"].samples[0].value == 4096.0


# ---------------------------------------------------------------------- values follow the load
def test_counters_move_when_requests_finish(engine):
    engine.generate(7)
    engine.generate(4, stream=True)
    text = engine.metrics()
    assert value(text, "sglang:generation_tokens_total", is_streaming="false") == 7.0
    assert value(text, "sglang:generation_tokens_total", is_streaming="true") == 4.0
    assert value(text, "sglang:num_requests_total", is_streaming="false") == 1.0
    assert value(text, "sglang:prompt_tokens_total", is_streaming="false") == 2.0  # "hello there"
    assert value(text, "sglang:e2e_request_latency_seconds_count", is_streaming="true") == 1.0
    # Streamed: one inter-token latency per token after the first, each about 1/RATE.
    assert value(text, "sglang:inter_token_latency_seconds_count") == 3.0
    itl_sum = value(text, "sglang:inter_token_latency_seconds_sum")
    assert 3 / RATE * 0.5 < itl_sum < 3 / RATE * 3


def test_time_to_first_token_is_observed_into_its_bucket(engine):
    engine.generate(2)
    text = engine.metrics()
    ttft = value(text, "sglang:time_to_first_token_seconds_sum", is_streaming="false")
    # The first token comes one token-time after admission.
    assert 1 / RATE * 0.8 < ttft < 0.1
    assert value(text, "sglang:time_to_first_token_seconds_bucket", is_streaming="false", le="0.1") == 1.0


def test_running_requests_and_throughput_follow_the_configured_rate(engine):
    threads = [engine.generate_in_background(int(RATE * 2)) for _ in range(3)]  # 2 s each
    window = engine.state.generator.decode_log_window  # 40 steps at RATE: 0.2 s

    def three_running_with_a_window():
        text = engine.metrics()
        if "sglang:num_running_reqs" not in text:
            return None
        if value(text, "sglang:num_running_reqs") == 3.0 and value(text, "sglang:gen_throughput") > 0:
            return text
        return None

    time.sleep(window * 2)
    text = wait_for(three_running_with_a_window)
    # Three requests, each at RATE tokens/s: the scheduler's window measures about 3 x RATE.
    assert 3 * RATE * 0.7 < value(text, "sglang:gen_throughput") < 3 * RATE * 1.2
    assert value(text, "sglang:num_queue_reqs") == 0.0
    assert value(text, "sglang:token_usage") > 0.0
    for t in threads:
        t.join()
    idle = engine.metrics()
    assert value(idle, "sglang:num_running_reqs") == 0.0
    assert value(idle, "sglang:gen_throughput") == 0.0
    assert value(idle, "sglang:token_usage") == 0.0
    assert value(idle, "sglang:generation_tokens_total", is_streaming="false") == 3 * int(RATE * 2)


def test_a_slower_decode_rate_reads_lower():
    e = Engine(rate=50.0)
    try:
        t = e.generate_in_background(100)  # 2 s
        time.sleep(e.state.generator.decode_log_window * 1.5)  # 40 steps at 50/s: 0.8 s
        text = e.metrics()
        assert 50 * 0.7 < value(text, "sglang:gen_throughput") < 50 * 1.2
        t.join()
    finally:
        e.close()


def test_requests_beyond_max_running_requests_wait_in_the_queue():
    e = Engine(max_running_requests=1)
    try:
        first = e.generate_in_background(int(RATE))  # 1 s
        wait_for(lambda: e.state.generator.running == 1)
        second = e.generate_in_background(2)
        text = wait_for(lambda: (t := e.metrics()) and value(t, "sglang:num_queue_reqs") == 1.0 and t)
        assert value(text, "sglang:num_running_reqs") == 1.0
        _, load = e.request("GET", "/get_load")
        assert json.loads(load)[0]["num_waiting_reqs"] == 1
        second.join()
        first.join()
        text = e.metrics()
        assert value(text, "sglang:num_queue_reqs") == 0.0
        # The queued request's time to first token includes its wait (about 1 s).
        assert value(text, "sglang:time_to_first_token_seconds_bucket", is_streaming="false", le="0.4") == 1.0
        assert value(text, "sglang:time_to_first_token_seconds_count", is_streaming="false") == 2.0
    finally:
        e.close()


def test_a_client_that_goes_away_counts_as_aborted(engine):
    import socket

    body = json.dumps({"text": "hi", "sampling_params": {"max_new_tokens": 1000}, "stream": True}).encode()
    with socket.create_connection(("127.0.0.1", engine.port)) as s:
        s.sendall(
            b"POST /generate HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(body), body)
        )
        s.recv(1024)  # headers and a first chunk
    text = wait_for(lambda: (t := engine.metrics()) and "num_aborted_requests_total" in t and t)
    assert value(text, "sglang:num_aborted_requests_total") == 1.0
    assert value(text, "sglang:num_running_reqs") == 0.0
    assert "sglang:num_requests_total" not in text


# ---------------------------------------------------------------------- the exact text format
PROMETHEUS_CLIENT_TWIN = textwrap.dedent(
    """
    import json, sys
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess
    spec = json.load(sys.stdin)
    made = {}
    for name, kind, doc, labelnames, buckets in spec["families"]:
        if kind == "gauge":
            made[name] = Gauge(name, doc, labelnames, multiprocess_mode="mostrecent")
        elif kind == "counter":
            made[name] = Counter(name, doc, labelnames)
        else:
            made[name] = Histogram(name, doc, labelnames, buckets=buckets)
    for name, labels, op, value in spec["calls"]:
        getattr(made[name].labels(**labels), op)(value)
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    sys.stdout.write(generate_latest(registry).decode())
    """
)


def test_text_is_what_prometheus_clients_multiprocess_collector_prints(tmp_path):
    """The same families and samples through prometheus_client (SGLang's exposition path, in
    a process of its own: the multiprocess directory is read at import) and through the
    stand-in: the same lines, up to the order of families and series."""
    labels = {"model_name": "m", "engine_type": "unified"}
    registry = Registry()
    g = registry.family("sglang:num_running_reqs", "The number of running requests.", "gauge", list(labels))
    c = registry.family(
        "sglang:prompt_tokens_total", "Number of prefill tokens processed.", "counter", list(labels)
    )
    h = registry.family(
        "sglang:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        "histogram",
        list(labels),
        metrics_collector.TIME_TO_FIRST_TOKEN_BUCKETS,
    )
    registry.family(
        "sglang:num_aborted_requests_total", "Number of requests aborted.", "counter", list(labels)
    )
    calls = [
        ("sglang:num_running_reqs", labels, "set", 3),
        ("sglang:prompt_tokens_total", labels, "inc", 12),
        ("sglang:prompt_tokens_total", {**labels, "model_name": "n"}, "inc", 1234567),
        ("sglang:time_to_first_token_seconds", labels, "observe", 0.15),
        ("sglang:time_to_first_token_seconds", labels, "observe", 7.5),
    ]
    by_name = {f.name: f for f in (g, c, h)}
    for name, lab, op, v in calls:
        getattr(by_name[name], op)(lab, v)
    spec = {
        "families": [
            [f.name, f.kind, f.documentation, list(f.labelnames), list(f.buckets[:-1]) or None]
            for f in registry.families
        ],
        "calls": calls,
    }
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    twin = subprocess.run(
        [sys.executable, "-c", PROMETHEUS_CLIENT_TWIN],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout

    def blocks(text):
        out, current = {}, None
        for line in text.splitlines():
            if line.startswith("# HELP "):
                current = line.split()[2]
                out[current] = []
            out[current].append(line)
        return {name: (lines[:2], sorted(lines[2:])) for name, lines in out.items()}

    assert blocks(registry.exposition()) == blocks(twin)
    assert "sglang:num_aborted_requests_total" not in twin  # no sample, no family


def test_go_float_format():
    assert [go_float(v) for v in (1, 0.1, 400, 1234567, float("inf"), 2400)] == [
        "1.0",
        "0.1",
        "400.0",
        "1.234567e+06",
        "+Inf",
        "2400.0",
    ]
