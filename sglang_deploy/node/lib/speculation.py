"""What a speculating server says of its speculation, read from its /server_info: the server
args it runs (speculative_algorithm, speculative_num_steps, speculative_num_draft_tokens) and
each scheduler's average accept length since its start (internal_states[].avg_spec_accept_length,
SGLang 0.5.17 and 0.5.23: accepted tokens, the verify step's own included, per verify step).

The accept rate is SGLang's own (scheduler metrics_reporter): accepted drafts over proposed
drafts, (accept length - 1) / drafts per round, drafts per round being num_draft_tokens - 1 when
set, else num_steps.
"""


def of_server_info(info):
    """{"algorithm", "steps", "accept_length", "accept_rate"} of a speculating server (figures
    None until it decoded), or None for a server that does not speculate."""
    algorithm = (info or {}).get("speculative_algorithm")
    if not algorithm:
        return None
    lengths = [
        state["avg_spec_accept_length"]
        for state in info.get("internal_states") or []
        if isinstance(state, dict) and isinstance(state.get("avg_spec_accept_length"), (int, float))
    ]
    length = sum(lengths) / len(lengths) if lengths else None
    steps = info.get("speculative_num_steps")
    drafts = info.get("speculative_num_draft_tokens")
    per_round = drafts - 1 if isinstance(drafts, int) and drafts > 1 else steps
    rate = (
        (length - 1) / per_round if length is not None and isinstance(per_round, int) and per_round else None
    )
    return {
        "algorithm": str(algorithm).upper(),
        "steps": steps,
        "accept_length": None if length is None else round(length, 3),
        "accept_rate": None if rate is None else round(rate, 3),
    }


def describe(spec):
    """'EAGLE3 accept length 1.96 (rate 0.48)'."""
    if spec.get("accept_length") is None:
        return "%s accept length not reported" % spec["algorithm"]
    text = "%s accept length %.2f" % (spec["algorithm"], spec["accept_length"])
    return text + (" (rate %.2f)" % spec["accept_rate"] if spec.get("accept_rate") is not None else "")
