"""The stand-in's knobs: SGLANG_STANDIN_* environment variables (engine-standin/README.md, "Knobs").

Read once, in the launching process, and handed to every subprocess, so that all ranks
agree; a value that does not parse is an error at start (exit 2), never a silent default.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Optional

FAILURES = (
    "crash-load",
    "cuda-oom",
    "nccl-error",
    "hang",
    "hang-warmup",
    "scheduler-dies-after-ready",
    "warmup-fails",
)


class KnobError(ValueError):
    """A SGLANG_STANDIN_* variable with a value the stand-in does not understand."""


@dataclasses.dataclass(frozen=True)
class Knobs:
    load_seconds: float = 3.0  # port closed while "loading" + "capturing CUDA graphs"
    warmup_seconds: float = 1.0  # /health answers 503 this long after HTTP is up
    tokens_per_second: float = 80.0  # generation rate, per request
    fail: Optional[str] = None  # one of FAILURES
    fail_after_seconds: float = 1.0  # relative to the start of the failure's phase
    real_nccl: bool = False  # torch.distributed NCCL init + one all-reduce
    fail_rank: Optional[int] = None  # only this --node-rank fails (None: every node)
    # How long the multi-node rendezvous waits (torch's NCCL default: SGLang passes no timeout
    # unless --dist-timeout is given).
    dist_timeout_seconds: float = 600.0
    # Speculative decoding (sandbox/speculation.py): each draft token accepted with this
    # probability; the verify pass's extra cost and one draft step's, in target decode steps.
    spec_accept_prob: float = 0.6
    spec_verify_cost: float = 1.0
    spec_draft_cost: float = 0.33


def _number(env: Mapping[str, str], name: str, default: float, positive: bool = False) -> float:
    raw = env.get(name, "").strip()
    if raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise KnobError(f"{name}={raw!r} is not a number")
    if value != value or value in (float("inf"), float("-inf")):
        raise KnobError(f"{name}={raw!r} is not a finite number")
    if value < 0 or (positive and value == 0):
        raise KnobError(f"{name}={raw!r} must be {'> 0' if positive else '>= 0'}")
    return value


def from_environ(env: Mapping[str, str]) -> Knobs:
    """Parse the knobs from an environment mapping; KnobError names the bad variable."""
    fail = env.get("SGLANG_STANDIN_FAIL", "").strip() or None
    if fail is not None and fail not in FAILURES:
        raise KnobError(
            f"SGLANG_STANDIN_FAIL={fail!r} is not a failure mode; expected one of: " + ", ".join(FAILURES)
        )
    real = env.get("SGLANG_STANDIN_REAL_NCCL", "").strip().lower()
    if real not in ("", "0", "1", "false", "true", "no", "yes"):
        raise KnobError(f"SGLANG_STANDIN_REAL_NCCL={real!r} must be 1 or 0")
    fail_rank_raw = env.get("SGLANG_STANDIN_FAIL_RANK", "").strip()
    fail_rank = None
    if fail_rank_raw:
        if not fail_rank_raw.isdigit():
            raise KnobError(f"SGLANG_STANDIN_FAIL_RANK={fail_rank_raw!r} must be a node rank (0, 1, ...)")
        if fail is None:
            raise KnobError("SGLANG_STANDIN_FAIL_RANK is set but SGLANG_STANDIN_FAIL is not")
        fail_rank = int(fail_rank_raw)
    accept_prob = _number(env, "SGLANG_STANDIN_SPEC_ACCEPT_PROB", 0.6)
    if accept_prob >= 1:
        raise KnobError(f"SGLANG_STANDIN_SPEC_ACCEPT_PROB={accept_prob!r} must be below 1")
    return Knobs(
        load_seconds=_number(env, "SGLANG_STANDIN_LOAD_SECONDS", 3.0),
        warmup_seconds=_number(env, "SGLANG_STANDIN_WARMUP_SECONDS", 1.0),
        tokens_per_second=_number(env, "SGLANG_STANDIN_TOKENS_PER_SECOND", 80.0, positive=True),
        fail=fail,
        fail_after_seconds=_number(env, "SGLANG_STANDIN_FAIL_AFTER_SECONDS", 1.0),
        real_nccl=real in ("1", "true", "yes"),
        fail_rank=fail_rank,
        dist_timeout_seconds=_number(env, "SGLANG_STANDIN_DIST_TIMEOUT_SECONDS", 600.0, positive=True),
        spec_accept_prob=accept_prob,
        spec_verify_cost=_number(env, "SGLANG_STANDIN_SPEC_VERIFY_COST", 1.0),
        spec_draft_cost=_number(env, "SGLANG_STANDIN_SPEC_DRAFT_COST", 0.33),
    )
