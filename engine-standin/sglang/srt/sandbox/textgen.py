"""Token generation at a fixed rate, so a benchmark measures SGLANG_STANDIN_TOKENS_PER_SECOND.

Every request decodes independently at the configured rate (the first token after one
token-time of "prefill"), like a GPU whose decode step time does not depend on the small
batch. The text is a fixed cycle of words: deterministic, one word per token.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Optional

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


class Generator:
    """Paces tokens and keeps the counters behind /get_load and /metrics."""

    def __init__(self, tokens_per_second: float):
        self.tokens_per_second = tokens_per_second
        self._lock = threading.Lock()
        self.running = 0
        self.num_requests = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self._active = {}  # rid -> True, for "Remaining requests" while draining
        # Monotonic time of the last token of any request (SGLang's last_receive_tstamp: when
        # the tokenizer manager last heard from the detokenizer); /health compares against it.
        self.last_receive = time.monotonic()
        # Set once a scheduler is gone: no more tokens come (SGLang's requests then hang).
        self.halted = threading.Event()

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

    def tokens(self, prompt_tokens: int, max_new_tokens: int, rid: Optional[str] = None) -> Iterator[str]:
        """Yield max_new_tokens tokens, token i at start + (i + 1) / rate."""
        interval = 1.0 / self.tokens_per_second
        rid = rid or uuid.uuid4().hex
        with self._lock:
            self.running += 1
            self.num_requests += 1
            self.prompt_tokens_total += prompt_tokens
            self._active[rid] = True
        try:
            start = time.monotonic()
            for i in range(max_new_tokens):
                delay = start + (i + 1) * interval - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                self._wait_if_halted()
                with self._lock:
                    self.generation_tokens_total += 1
                    self.last_receive = time.monotonic()
                yield _WORDS[i % len(_WORDS)]
        finally:
            with self._lock:
                self.running -= 1
                self._active.pop(rid, None)

    def health_token(self) -> None:
        """The health check's one token: not counted as a request (log_metrics=False)."""
        time.sleep(1.0 / self.tokens_per_second)
        self._wait_if_halted()
        with self._lock:
            self.last_receive = time.monotonic()
