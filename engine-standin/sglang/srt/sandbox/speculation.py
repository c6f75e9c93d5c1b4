"""Speculative decoding as the deploy sees it: a decode rate and an accept length.

With --speculative-algorithm each decode step drafts k tokens (k: --speculative-num-steps, or
--speculative-num-draft-tokens - 1, else SGLang's usual 3) and verifies them in one forward
pass of the target model. Each draft token is accepted with probability p, in order, and the
verify step adds one token of its own, so a step yields on average

    accept length L = 1 + p + p^2 + ... + p^k = (1 - p^(k+1)) / (1 - p)

tokens (SGLang's sglang:spec_accept_length; its accept rate is accepted drafts over proposed
drafts, (L - 1) / k). A step costs the target's decode step (1 / SGLANG_STANDIN_TOKENS_PER_SECOND)
times 1 + verify + k * draft: `verify` is what the wider verify pass adds (on PCIe GPUs its
all-reduce, the incident's cause), `draft` one draft model step. So the decode rate is

    tokens_per_second * L / (1 + verify + k * draft)

and speculation pays only where L beats the step's cost. The defaults (p 0.6, verify 1.0,
draft 0.33) at 82 tok/s reproduce ../shared/reference/incident.md: EAGLE-3 with 2 steps
~60 tok/s (L 1.96), 3 steps ~60 tok/s (L 2.18).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

DEFAULT_STEPS = 3


@dataclasses.dataclass(frozen=True)
class Speculation:
    algorithm: str
    steps: int
    accept_length: float  # tokens per verify step, the bonus token included
    accept_rate: float  # accepted drafts / proposed drafts
    step_cost: float  # a verify step's time in target decode steps

    def tokens_per_second(self, target_rate: float) -> float:
        return target_rate * self.accept_length / self.step_cost


def steps_of(server_args) -> int:
    if server_args.speculative_num_steps:
        return int(server_args.speculative_num_steps)
    if server_args.speculative_num_draft_tokens and server_args.speculative_num_draft_tokens > 1:
        return int(server_args.speculative_num_draft_tokens) - 1
    return DEFAULT_STEPS


def of(server_args, knobs) -> Optional[Speculation]:
    """The server's speculation (None without --speculative-algorithm)."""
    if not server_args.speculative_algorithm:
        return None
    k, p = steps_of(server_args), knobs.spec_accept_prob
    accept_length = sum(p**i for i in range(k + 1))
    return Speculation(
        algorithm=server_args.speculative_algorithm.upper(),
        steps=k,
        accept_length=accept_length,
        accept_rate=(accept_length - 1) / k,
        step_cost=1 + knobs.spec_verify_cost + k * knobs.spec_draft_cost,
    )
