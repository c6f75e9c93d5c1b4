"""Request handling for the generation endpoints: /generate (native), /v1/completions and
/v1/chat/completions (OpenAI-compatible), with SGLang's response shapes.

Each handler returns either `Json(status, body)` or `Stream(events)`, where events yields
the JSON objects of a server-sent-events stream; the HTTP layer writes `data: <json>` per
event and a final `data: [DONE]`. Generation is paced by the shared Generator.

Defaults where a request names no length: /generate 128 new tokens (SGLang's
max_new_tokens), /v1/completions 16 (OpenAI's), /v1/chat/completions 128 (SGLang would run
to EOS or the context limit; a fixed default keeps a careless benchmark short).
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, ValidationError

from sglang.srt.sandbox.textgen import Generator, count_tokens


@dataclasses.dataclass
class Json:
    status: int
    body: Any


@dataclasses.dataclass
class Stream:
    events: Iterator[dict]


class ApiError(Exception):
    def __init__(self, status: int, message: str, err_type: str = "BadRequestError"):
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type

    def openai_body(self) -> dict:
        return {
            "object": "error",
            "message": self.message,
            "type": self.err_type,
            "param": None,
            "code": self.status,
        }


THINKING_SHARE = (3, 4)


class Backend:
    """What the endpoints need from the server: model facts, pacing, warmup gating."""

    def __init__(
        self,
        served_model_name: str,
        context_len: int,
        generator: Generator,
        first_forward_at: float,
        broken_at: Optional[float] = None,
        hangs: bool = False,
        reasoning: bool = False,
    ):
        self.served_model_name = served_model_name
        self.context_len = context_len
        self.generator = generator
        # The first forward pass (JIT, graph replay set-up) finishes at this monotonic time;
        # requests that arrive earlier wait for it, as the warmup request does.
        self.first_forward_at = first_forward_at
        # SGLANG_STANDIN_FAIL=warmup-fails: from this time on every generation fails.
        self.broken_at = broken_at
        # SGLANG_STANDIN_FAIL=hang-warmup: the first forward pass never returns (what a
        # deadlocked first all-reduce looks like): no answer, no more log lines.
        self.hangs = hangs
        self.on_request = None  # called at the start of every generation request
        # --reasoning-parser: a chat answer's first THINKING_SHARE of tokens is the model's
        # thinking, which SGLang streams as delta.reasoning_content (seen on 0.5.17), the rest
        # its content.
        self.reasoning = reasoning

    def thinking_tokens(self, n: int) -> int:
        """How many of a chat answer's ``n`` tokens are thinking (reasoning_content)."""
        return (n * THINKING_SHARE[0]) // THINKING_SHARE[1] if self.reasoning else 0

    def prepare(self, prompt_tokens: int, max_new_tokens: Any) -> int:
        if self.on_request is not None:
            self.on_request()  # TokenizerManager.generate_request -> auto_create_handle_loop
        if self.hangs:
            with self.generator.held():  # counted by a drain, like any request in flight
                threading.Event().wait()
        if self.broken_at is not None:
            delay = self.broken_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            raise ApiError(
                500,
                "The scheduler did not answer the first forward pass "
                "(sandbox failure injection: warmup-fails).",
                "InternalServerError",
            )
        if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or max_new_tokens < 0:
            raise ApiError(400, f"max_new_tokens must be a non-negative integer, got {max_new_tokens!r}")
        if prompt_tokens >= self.context_len:
            raise ApiError(
                400,
                f"The input ({prompt_tokens} tokens) is longer than the model's "
                f"context length ({self.context_len} tokens).",
            )
        delay = self.first_forward_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        return min(max_new_tokens, self.context_len - prompt_tokens)

    def health_token(self) -> None:
        """The /health check's generation (input_ids=[0], max_new_tokens=1): it waits for the
        first forward pass, hangs or fails like any request; a failure is never answered."""
        try:
            self.prepare(1, 1)
        except ApiError:
            return
        self.generator.health_token()

    def tokens(
        self, prompt_tokens: int, n: int, rid: Optional[str], stream: bool, received: float
    ) -> Iterator[str]:
        """The request's tokens; `received` is when the server got it (its time to first token
        counts from there)."""
        return self.generator.tokens(prompt_tokens, n, rid, stream=stream, created=received)


def _prompt_tokens(prompt: Any) -> int:
    if isinstance(prompt, str):
        return count_tokens(prompt)
    if isinstance(prompt, list) and all(isinstance(x, int) for x in prompt):
        return len(prompt)
    raise ApiError(400, "prompt must be a string or a list of token ids")


def _usage(prompt_tokens: int, completion_tokens: int, reasoning_tokens: int = 0) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
        "reasoning_tokens": reasoning_tokens,
    }


def _token_id(token_index: int) -> int:
    return 100 + token_index % 22


# ---------------------------------------------------------------------- /generate
def generate(backend: Backend, body: dict):
    """SGLang's native API: {"text": ..., "sampling_params": {"max_new_tokens": n}}."""
    received = time.monotonic()
    text = body.get("text")
    input_ids = body.get("input_ids")
    params = body.get("sampling_params") or {}
    if not isinstance(params, dict):
        raise ApiError(400, "sampling_params must be an object")
    max_new = params.get("max_new_tokens", 128)
    if isinstance(text, list) or (
        isinstance(input_ids, list) and input_ids and isinstance(input_ids[0], list)
    ):
        if body.get("stream"):
            raise ApiError(400, "Batched streaming is not supported by the sandbox stand-in")
        prompts = text if isinstance(text, list) else input_ids
        results = _generate_batch(backend, [_prompt_tokens(p) for p in prompts], max_new, received)
        return Json(200, results)
    if text is None and input_ids is None:
        raise ApiError(400, "Either text or input_ids should be provided.")
    prompt_tokens = _prompt_tokens(text if text is not None else input_ids)
    n = backend.prepare(prompt_tokens, max_new)
    rid = body.get("rid") or uuid.uuid4().hex
    start = time.monotonic()

    def meta(count: int, done: bool) -> dict:
        return {
            "id": rid,
            "finish_reason": {"type": "length", "length": count} if done else None,
            "prompt_tokens": prompt_tokens,
            "weight_version": "default",
            "completion_tokens": count,
            "cached_tokens": 0,
            "e2e_latency": round(time.monotonic() - start, 6),
        }

    if body.get("stream"):

        def events():
            out, ids = "", []
            for i, token in enumerate(backend.tokens(prompt_tokens, n, rid, True, received)):
                out += token
                ids.append(_token_id(i))
                yield {"text": out, "output_ids": list(ids), "meta_info": meta(i + 1, i + 1 == n)}
            if n == 0:
                yield {"text": "", "output_ids": [], "meta_info": meta(0, True)}

        return Stream(events())
    tokens = list(backend.tokens(prompt_tokens, n, rid, False, received))
    return Json(
        200,
        {"text": "".join(tokens), "output_ids": [_token_id(i) for i in range(n)], "meta_info": meta(n, True)},
    )


def _generate_batch(backend: Backend, prompt_counts: list[int], max_new: Any, received: float) -> list:
    """A batch decodes in lock-step: the same pace, one result per prompt."""
    ns = [backend.prepare(p, max_new) for p in prompt_counts]
    start = time.monotonic()
    tokens = list(backend.tokens(sum(prompt_counts), max(ns, default=0), None, False, received))
    latency = round(time.monotonic() - start, 6)
    return [
        {
            "text": "".join(tokens[:n]),
            "output_ids": [_token_id(i) for i in range(n)],
            "meta_info": {
                "id": uuid.uuid4().hex,
                "finish_reason": {"type": "length", "length": n},
                "prompt_tokens": p,
                "weight_version": "default",
                "completion_tokens": n,
                "cached_tokens": 0,
                "e2e_latency": latency,
            },
        }
        for p, n in zip(prompt_counts, ns)
    ]


# ---------------------------------------------------------------------- /v1/completions
def completions(backend: Backend, body: dict):
    received = time.monotonic()
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(x, str) for x in prompt):
        prompt = prompt[0]  # one choice per request in the stand-in
    prompt_tokens = _prompt_tokens(prompt)
    max_tokens = body.get("max_tokens")
    n = backend.prepare(prompt_tokens, 16 if max_tokens is None else max_tokens)
    rid, created, model = uuid.uuid4().hex, int(time.time()), body.get("model") or backend.served_model_name
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

    if body.get("stream"):

        def events():
            count = 0
            for token in backend.tokens(prompt_tokens, n, rid, True, received):
                count += 1
                yield {
                    "id": rid,
                    "object": "text_completion",
                    "created": created,
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "text": token,
                            "logprobs": None,
                            "finish_reason": None,
                            "matched_stop": None,
                        }
                    ],
                }
            yield {
                "id": rid,
                "object": "text_completion",
                "created": created,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "text": "",
                        "logprobs": None,
                        "finish_reason": "length",
                        "matched_stop": None,
                    }
                ],
            }
            if include_usage:
                yield {
                    "id": rid,
                    "object": "text_completion",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": _usage(prompt_tokens, count),
                }

        return Stream(events())
    text = "".join(backend.tokens(prompt_tokens, n, rid, False, received))
    return Json(
        200,
        {
            "id": rid,
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [
                {"index": 0, "text": text, "logprobs": None, "finish_reason": "length", "matched_stop": None}
            ],
            "usage": _usage(prompt_tokens, n),
        },
    )


# ---------------------------------------------------------------------- /v1/chat/completions
class ChatCompletionRequest(BaseModel):
    """The fields of SGLang's ChatCompletionRequest (entrypoints/openai/protocol.py, a pydantic
    model) that the stand-in reads, validated as pydantic validates them there (lax: "8" is 8,
    "eight" is refused); the other fields pass through."""

    model_config = ConfigDict(extra="allow")
    messages: list
    model: Optional[str] = None
    max_tokens: Optional[int] = None
    max_completion_tokens: Optional[int] = None
    stream: bool = False
    stream_options: Optional[dict] = None


def _validated(model: type[BaseModel], body: Any) -> dict:
    """``body`` as ``model`` validates it; a refusal is SGLang's validation_exception_handler's
    answer: 400, type "Bad Request", pydantic's message and its error list."""
    try:
        return model.model_validate(body).model_dump()
    except ValidationError as exc:
        raise ApiError(400, f"{exc} {exc.errors()}", "Bad Request") from None


def _chat_prompt_tokens(messages: Any) -> int:
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list")
    total = 0
    for message in messages:
        if not isinstance(message, dict):
            raise ApiError(400, "each message must be an object")
        content = message.get("content") or ""
        if isinstance(content, list):  # content parts
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        total += count_tokens(str(content)) + 4  # role markers of the chat template
    return total + 2


def chat_completions(backend: Backend, body: dict):
    received = time.monotonic()
    body = _validated(ChatCompletionRequest, body)
    prompt_tokens = _chat_prompt_tokens(body.get("messages"))
    max_new = body.get("max_completion_tokens")
    if max_new is None:
        max_new = body.get("max_tokens")
    n = backend.prepare(prompt_tokens, 128 if max_new is None else max_new)
    rid, created, model = uuid.uuid4().hex, int(time.time()), body.get("model") or backend.served_model_name
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    thinking = backend.thinking_tokens(n)

    def chunk(delta: dict, finish: Optional[str]) -> dict:
        return {
            "id": rid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, "matched_stop": None}
            ],
        }

    if body.get("stream"):

        def events():
            yield chunk({"role": "assistant", "content": ""}, None)
            count = 0
            for token in backend.tokens(prompt_tokens, n, rid, True, received):
                field = "reasoning_content" if count < thinking else "content"
                count += 1
                yield chunk({field: token}, None)
            yield chunk({}, "length")
            if include_usage:
                yield {
                    "id": rid,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": _usage(prompt_tokens, count, min(count, thinking)),
                }

        return Stream(events())
    tokens = list(backend.tokens(prompt_tokens, n, rid, False, received))
    reasoning, text = "".join(tokens[:thinking]), "".join(tokens[thinking:])
    return Json(
        200,
        {
            "id": rid,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": text,
                        "reasoning_content": reasoning or None,
                        "tool_calls": None,
                    },
                    "logprobs": None,
                    "finish_reason": "length",
                    "matched_stop": None,
                }
            ],
            "usage": _usage(prompt_tokens, n, thinking),
        },
    )
