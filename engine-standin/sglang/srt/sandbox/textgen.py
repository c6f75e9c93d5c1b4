"""Token generation at a fixed rate, so a benchmark measures SGLANG_STANDIN_TOKENS_PER_SECOND.

Every request decodes independently at the configured rate (the first token after one
token-time of "prefill"), like a GPU whose decode step time does not depend on the small
batch. The text is a fixed cycle of words: deterministic, one word per token.

Admission is the scheduler's: a request runs once fewer than max_running_requests run and the
KV pool holds its prompt and new tokens; until then it waits in the queue. With
--enable-metrics the generator also does what SGLang's scheduler and tokenizer manager record
(observability/metrics_collector.py): the scheduler's snapshot at each admission and end, every
decode_log_interval (40) decode steps and when it goes idle; per request its time to first
token, inter-token latencies (streamed), and at its end its tokens, latency and time per token.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Optional

from sglang.srt.observability.metrics_collector import EngineMetrics
from sglang.srt.sandbox.speculation import Speculation

_WORDS = (
    " The",
    " sandbox",
    " node",
    " serves",
    " tokens",
    " at",
    " a",
    " steady",
    " rate",
    " so",
    " that",
    " every",
    " benchmark",
    " can",
    " measure",
    " throughput",
    " and",
    " latency",
    " without",
    " a",
    " GPU",
    ".",
)
_TOKEN_RE = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    """A rough token count (words and punctuation), at least 1 for a non-empty prompt."""
    return max(1, len(_TOKEN_RE.findall(text))) if text else 0


# SGLang's --decode-log-interval default: the scheduler logs its stats (and measures
# gen_throughput over the window) every 40 decode steps.
DECODE_LOG_INTERVAL = 40
# metrics_reporter.GEN_THROUGHPUT_STALENESS_SECONDS: an older window's figure reads 0.
GEN_THROUGHPUT_STALENESS_SECONDS = 30.0


@dataclasses.dataclass
class _Request:
    created: float  # when the server received it (SGLang's created_time)
    stream: bool
    prompt_tokens: int
    reserved: int  # KV slots it may take: prompt + new tokens
    first_token: float = 0.0
    last_chunk: float = 0.0
    completion_tokens: int = 0


class Generator:
    """Paces tokens, admits requests as the scheduler does, keeps what /get_load, /server_info
    and /metrics report."""

    def __init__(
        self,
        tokens_per_second: float,
        max_running_requests: int = 4096,
        max_total_num_tokens: int = 1 << 40,
        metrics: Optional[EngineMetrics] = None,
        speculation: Optional[Speculation] = None,
    ):
        # A decode step: one token at the target's rate; with speculation a verify step that
        # costs step_cost target steps and yields accept_length tokens on average, in a burst.
        self.speculation = speculation
        self.step_seconds = (speculation.step_cost if speculation else 1.0) / tokens_per_second
        self.tokens_per_step = speculation.accept_length if speculation else 1.0
        self.tokens_per_second = self.tokens_per_step / self.step_seconds
        self.max_running_requests = max_running_requests
        self.max_total_num_tokens = max_total_num_tokens
        self.metrics = metrics
        self._lock = threading.Lock()
        self._admitted = threading.Condition(self._lock)
        self.running = 0
        self.queued = 0
        self._reserved = 0  # KV slots promised to running requests
        self.used_tokens = 0  # KV slots they hold now: prompts and tokens generated so far
        self._active = {}  # rid -> True, for "Remaining requests" while draining
        # gen_throughput: tokens of every request over the last decode-log window.
        self.last_gen_throughput = 0.0
        self._window_start = time.monotonic()
        self._window_tokens = 0
        self._window_steps = 0
        # Speculation's totals since the start (SGLang's avg_spec_accept_length in /server_info).
        self.spec_tokens = 0
        self.spec_steps = 0
        # Monotonic time of the last token of any request (SGLang's last_receive_tstamp: when
        # the tokenizer manager last heard from the detokenizer); /health compares against it.
        self.last_receive = time.monotonic()
        # Set once a scheduler is gone: no more tokens come (SGLang's requests then hang).
        self.halted = threading.Event()

    @property
    def decode_log_window(self) -> float:
        """Seconds of DECODE_LOG_INTERVAL decode steps at the configured rate."""
        return DECODE_LOG_INTERVAL * self.step_seconds

    @property
    def avg_spec_accept_length(self) -> Optional[float]:
        """Tokens per verify step since the start (None: no speculation or no step yet)."""
        if self.speculation is None or not self.spec_steps:
            return None
        return self.spec_tokens / self.spec_steps

    def halt(self) -> None:
        self.halted.set()

    def _wait_if_halted(self) -> None:
        if self.halted.is_set():
            threading.Event().wait()

    @contextlib.contextmanager
    def held(self):
        """A request the engine holds without producing tokens (a hung first forward pass)."""
        rid = uuid.uuid4().hex
        with self._lock:
            self._active[rid] = True
        try:
            yield rid
        finally:
            with self._lock:
                self._active.pop(rid, None)

    def active_rids(self) -> list[str]:
        with self._lock:
            return list(self._active)

    def tokens(
        self,
        prompt_tokens: int,
        max_new_tokens: int,
        rid: Optional[str] = None,
        stream: bool = False,
        created: Optional[float] = None,
    ) -> Iterator[str]:
        """Yield max_new_tokens tokens, token i at the end of the decode step that yields it:
        admission + ceil((i + 1) / tokens per step) steps (one token a step without speculation)."""
        rid = rid or uuid.uuid4().hex
        req = _Request(
            created=time.monotonic() if created is None else created,
            stream=stream,
            prompt_tokens=prompt_tokens,
            reserved=prompt_tokens + max_new_tokens,
        )
        with self._lock:
            self._active[rid] = True
        admitted = False
        try:
            self._admit(req)
            admitted = True
            start = time.monotonic()
            for i in range(max_new_tokens):
                delay = (
                    start
                    + math.ceil((i + 1) / self.tokens_per_step - 1e-9) * self.step_seconds
                    - time.monotonic()
                )
                if delay > 0:
                    time.sleep(delay)
                self._wait_if_halted()
                self._record_token(
                    req,
                    new_step=i == 0
                    or math.ceil((i + 1) / self.tokens_per_step - 1e-9)
                    > math.ceil(i / self.tokens_per_step - 1e-9),
                )
                yield _WORDS[i % len(_WORDS)]
        finally:
            with self._lock:
                self._active.pop(rid, None)
                if admitted:
                    self._finish(req, completed=req.completion_tokens == max_new_tokens)
                else:
                    self.queued -= 1
                    self._log_stats(time.monotonic())

    def _admit(self, req: _Request) -> None:
        """Wait in the queue until the scheduler can run the request (one that fits the pool
        alone always runs: SGLang would run it too)."""
        with self._lock:
            self.queued += 1
            self._log_stats(time.monotonic())
            while self.running and (
                self.running >= self.max_running_requests
                or self._reserved + req.reserved > self.max_total_num_tokens
            ):
                self._admitted.wait()
            self.queued -= 1
            now = time.monotonic()
            if not self.running:
                self._window_start, self._window_tokens = now, 0  # decoding starts again
                self._window_steps = 0
            self.running += 1
            self._reserved += req.reserved
            self.used_tokens += req.prompt_tokens
            self._log_stats(now)

    def _record_token(self, req: _Request, new_step: bool = True) -> None:
        with self._lock:
            now = time.monotonic()
            self.last_receive = now
            self.used_tokens += 1
            req.completion_tokens += 1
            self._window_tokens += 1
            self.spec_tokens += 1
            self.spec_steps += new_step
            self._window_steps += new_step
            if self.metrics is not None:
                if req.completion_tokens == 1:
                    req.first_token = now
                    self.metrics.observe_time_to_first_token(now - req.created, req.stream)
                elif req.stream:
                    self.metrics.observe_inter_token_latency(now - req.last_chunk, 1)
            req.last_chunk = now
            elapsed = now - self._window_start
            if elapsed >= self.decode_log_window:
                self.last_gen_throughput = self._window_tokens / elapsed
                if self.metrics is not None:  # SGLang's decode log: 0 without speculation
                    spec, length = self.speculation, self._window_tokens / max(1, self._window_steps)
                    self.metrics.log_speculation(
                        *((length, (length - 1) / spec.steps) if spec else (0.0, 0.0))
                    )
                self._window_steps = 0
                self._window_start, self._window_tokens = now, 0
                self._log_stats(now)

    def _finish(self, req: _Request, completed: bool) -> None:
        """With the lock held: the request leaves the batch, finished or aborted."""
        now = time.monotonic()
        self.running -= 1
        self._reserved -= req.reserved
        self.used_tokens -= req.prompt_tokens + req.completion_tokens
        self._admitted.notify_all()
        if self.metrics is not None:
            if completed:
                tpot = None
                if req.completion_tokens > 1 and now > req.first_token:
                    tpot = (now - req.first_token) / (req.completion_tokens - 1)
                self.metrics.observe_one_finished_request(
                    req.prompt_tokens, req.completion_tokens, now - req.created, req.stream, tpot
                )
            else:
                self.metrics.observe_one_aborted_request()
        self._log_stats(now)

    def _log_stats(self, now: float) -> None:
        """With the lock held: the scheduler's snapshot (idle: no throughput)."""
        if self.metrics is None:
            return
        if now - self._window_start > GEN_THROUGHPUT_STALENESS_SECONDS:
            self.last_gen_throughput = 0.0
        self.metrics.log_stats(
            running=self.running,
            queued=self.queued,
            gen_throughput=self.last_gen_throughput if self.running else 0.0,
            used_tokens=self.used_tokens,
            max_total_num_tokens=self.max_total_num_tokens,
        )

    def health_token(self) -> None:
        """The health check's one token: not counted as a request (log_metrics=False)."""
        time.sleep(self.step_seconds)
        self._wait_if_halted()
        with self._lock:
            self.last_receive = time.monotonic()
