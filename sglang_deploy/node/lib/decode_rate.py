"""Decode tok/s of a server, measured the way the incident's figures were: streaming chat
completions at temperature 0, one at a time (batch 1). Standard library only: decode_check.py
runs it on the node, bench/throughput.py from the controller.

Per request: tokens = stream chunks carrying content or, with a reasoning parser, reasoning
content (SGLang streams a reasoning model's thinking as delta.reasoning_content), unless the final usage chunk's
completion_tokens says more (a server may pack several tokens into one chunk, as speculative
decoding does); decode tok/s = (tokens - 1) / (last token's arrival - first token's arrival),
so prefill and the time to the first token (TTFT, reported apart) are left out. Both channels
are counted and reported apart (``channels``: chunks of content and of reasoning), so a
reasoning model's figure says how much of it was thinking. With the server's API key (``key``)
every request sends it (lib/engine_auth.py).
"""

import http.client
import json
import time
import urllib.parse
from typing import NamedTuple

if __package__:
    from . import engine_auth
else:  # lib/ itself on sys.path
    import engine_auth

DEFAULT_PROMPT = "Explain in a few paragraphs how tensor parallelism splits a transformer layer across GPUs."


class MeasureError(Exception):
    """A request that could not be timed (HTTP error, error in the stream, too few tokens)."""


class Stream(NamedTuple):
    """One timed request: tokens, decode seconds, seconds to the first token, and the chunks
    that carried content and reasoning content."""

    tokens: int
    seconds: float
    ttft: float
    content: int = 0
    reasoning: int = 0


def stream_once(url, model, prompt, max_tokens, timeout, key=None):
    """One streaming chat completion to ``url`` (…/v1/chat/completions), timed: a Stream."""
    parts = urllib.parse.urlsplit(url)
    body = json.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
    chunks, usage, first, last = 0, None, None, None
    channels = {"content": 0, "reasoning_content": 0}
    try:
        sent = time.perf_counter()
        connection.request(
            "POST",
            parts.path or "/",
            body=body,
            headers={
                "Content-Type": "application/json",
                "Accept": "text/event-stream",
                **engine_auth.headers(key),
            },
        )
        response = connection.getresponse()
        if response.status != 200:
            raise MeasureError(
                "HTTP %d: %s" % (response.status, response.read(300).decode("utf-8", "replace"))
            )
        for raw in response:
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[len(b"data:") :].strip()
            if data == b"[DONE]":
                break
            event = json.loads(data)
            if "error" in event:
                raise MeasureError("server error in stream: %s" % (event["error"],))
            if event.get("usage"):
                usage = event["usage"].get("completion_tokens")
            for choice in event.get("choices") or ():
                delta = choice.get("delta") or {}
                carried = [field for field in channels if delta.get(field)]
                if carried:
                    now = time.perf_counter()
                    chunks += 1
                    for field in carried:
                        channels[field] += 1
                    first = first or now
                    last = now
    finally:
        connection.close()
    tokens = usage if usage and usage > chunks else chunks
    if first is None or tokens < 2 or last <= first:
        raise MeasureError("too few tokens streamed to time the decode (%d)" % tokens)
    return Stream(tokens, last - first, first - sent, channels["content"], channels["reasoning_content"])


def decode_rate(tokens, seconds):
    """tok/s of one request's decode: (tokens - 1) over the first-to-last arrival time."""
    return (tokens - 1) / seconds


def median(values):
    ordered = sorted(values)
    n = len(ordered)
    if not n:
        raise ValueError("median of nothing")
    middle = n // 2
    return ordered[middle] if n % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def summary(results):
    """The figures of a run from its requests' Streams."""
    results = [Stream(*r) for r in results]
    rates = [decode_rate(r.tokens, r.seconds) for r in results]
    ttfts = [r.ttft for r in results]
    return {
        "requests": len(results),
        "tokens": sum(r.tokens for r in results),
        "channels": {
            "content": sum(r.content for r in results),
            "reasoning": sum(r.reasoning for r in results),
        },
        "decode_tok_s": round(median(rates), 2),
        "decode_tok_s_min": round(min(rates), 2),
        "decode_tok_s_max": round(max(rates), 2),
        "ttft_ms": round(1000 * median(ttfts), 1),
    }


def measure(url, model, prompts, requests, warmup, max_tokens, timeout, key=None):
    """``warmup`` untimed requests, then ``requests`` timed ones, one at a time, cycling
    through ``prompts``: their summary."""
    prompts = list(prompts) or [DEFAULT_PROMPT]
    for i in range(warmup):
        stream_once(url, model, prompts[i % len(prompts)], max_tokens, timeout, key)
    results = [
        stream_once(url, model, prompts[i % len(prompts)], max_tokens, timeout, key) for i in range(requests)
    ]
    return summary(results)
