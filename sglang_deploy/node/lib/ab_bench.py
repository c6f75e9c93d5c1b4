"""The A/B of serving profiles on one node (node/ab.py, `make ab`): its benchmark and its verdict.
Standard library only: ab.py measures on the node, the controller (report/ab_runner.py) prints
the table and `make report` draws it from the same figures.

A profile's benchmark: ``repeats`` rounds, each round one request of every prompt at every
max_tokens, one at a time (lib/decode_rate.py's stream_once: batch 1, temperature 0, decode
tok/s without the time to the first token). A round's figure is the median decode tok/s of its
requests; the profile's figure is the median of its rounds, its spread half the range of its
rounds (±): how far the same configuration measured again moves. TTFT p50/p95 over every request.

The verdict: the fastest profile leads the next by ``lead`` tok/s; the lead counts only beyond
the spread, the two profiles' spreads added (each figure may sit that far from where it would
land again).
"""

if __package__:
    from . import decode_rate
else:  # lib/ itself on sys.path
    import decode_rate


def requests_of(prompts, max_tokens, repeats):
    """The benchmark's requests in order: (round, prompt index, max_tokens) for every prompt at
    every max_tokens, in each of ``repeats`` rounds."""
    return [
        (round_no, index, tokens)
        for round_no in range(repeats)
        for tokens in max_tokens
        for index in range(len(prompts))
    ]


def bench(url, model, prompts, max_tokens, repeats, warmup, timeout, key=None, stream=None):
    """Run the benchmark against ``url`` (…/v1/chat/completions): one record per timed request,
    {"round", "prompt", "max_tokens", "tokens", "tok_s", "ttft_ms"}. ``stream``: stream_once's
    stand-in for a test."""
    stream = stream or decode_rate.stream_once
    prompts = list(prompts) or [decode_rate.DEFAULT_PROMPT]
    for i in range(warmup):
        stream(url, model, prompts[i % len(prompts)], max(max_tokens), timeout, key)
    records = []
    for round_no, index, tokens in requests_of(prompts, max_tokens, repeats):
        one = stream(url, model, prompts[index], tokens, timeout, key)
        records.append(
            {
                "round": round_no,
                "prompt": index,
                "max_tokens": tokens,
                "tokens": one.tokens,
                "tok_s": round(decode_rate.decode_rate(one.tokens, one.seconds), 3),
                "ttft_ms": round(1000 * one.ttft, 2),
            }
        )
    return records


def percentile(values, pct):
    """The nearest-rank ``pct`` percentile of ``values``."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of nothing")
    rank = max(1, -(-len(ordered) * pct // 100))  # ceil(n * pct / 100), at least the first
    return ordered[int(rank) - 1]


def summary(records):
    """The figures of one profile's benchmark: {"decode_tok_s" (median of the rounds' medians),
    "spread" (half their range), "rounds" (each round's median), "ttft_p50_ms", "ttft_p95_ms",
    "requests", "tokens"}."""
    by_round = {}
    for record in records:
        by_round.setdefault(record["round"], []).append(record["tok_s"])
    rounds = [round(decode_rate.median(rates), 2) for _, rates in sorted(by_round.items())]
    ttfts = [record["ttft_ms"] for record in records]
    return {
        "decode_tok_s": round(decode_rate.median(rounds), 2),
        "spread": round((max(rounds) - min(rounds)) / 2, 2),
        "rounds": rounds,
        "ttft_p50_ms": round(percentile(ttfts, 50), 1),
        "ttft_p95_ms": round(percentile(ttfts, 95), 1),
        "requests": len(records),
        "tokens": sum(record["tokens"] for record in records),
    }


def measured(trials):
    """The trials that measured a figure, fastest first."""
    done = [t for t in trials if (t.get("bench") or {}).get("decode_tok_s") is not None]
    return sorted(done, key=lambda t: -t["bench"]["decode_tok_s"])


def verdict(trials):
    """Who wins and whether the lead is beyond the spread: {"winner", "runner_up", "lead",
    "lead_pct", "spread", "beyond", "text"}; None with fewer than two measured profiles."""
    ranked = measured(trials)
    if len(ranked) < 2:
        return None
    first, second = ranked[0], ranked[1]
    a, b = first["bench"], second["bench"]
    lead = round(a["decode_tok_s"] - b["decode_tok_s"], 2)
    spread = round(a["spread"] + b["spread"], 2)
    lead_pct = round(100.0 * lead / b["decode_tok_s"]) if b["decode_tok_s"] else None
    beyond = lead > spread
    text = "%s leads %s by %.1f tok/s (%s %%), %s the spread (±%.1f)" % (
        first["profile"],
        second["profile"],
        lead,
        "?" if lead_pct is None else "%d" % lead_pct,
        "beyond" if beyond else "within",
        spread,
    )
    if not beyond:
        text += ": no winner at this spread; measure again with more repeats"
    return {
        "winner": first["profile"] if beyond else None,
        "leader": first["profile"],
        "runner_up": second["profile"],
        "lead": lead,
        "lead_pct": lead_pct,
        "spread": spread,
        "beyond": beyond,
        "text": text,
    }


COLUMNS = ("profile", "tok/s", "spread", "TTFT p50", "TTFT p95", "accept", "restart+gate", "bench")


def _cell(value, fmt):
    return "-" if value is None else fmt % value


def table(result):
    """The A/B's table, one line per profile in the order asked, then the verdict and how the
    node ended."""
    rows = [COLUMNS]
    for trial in result.get("trials") or []:
        b = trial.get("bench") or {}
        spec = trial.get("speculation") or {}
        if trial.get("cause"):
            rows.append((trial["profile"], "failed: %s" % trial["cause"]))
            continue
        rows.append(
            (
                trial["profile"] + (" (own)" if trial["profile"] == result.get("own") else ""),
                _cell(b.get("decode_tok_s"), "%.1f"),
                _cell(b.get("spread"), "±%.1f"),
                _cell(b.get("ttft_p50_ms"), "%.0f ms"),
                _cell(b.get("ttft_p95_ms"), "%.0f ms"),
                _cell(spec.get("accept_length"), "%.2f"),
                _cell(trial.get("restart_s"), "%.1f s"),
                _cell(trial.get("bench_s"), "%.1f s"),
            )
        )
    widths = [
        max(len(row[i]) for row in rows if len(row) > i and len(row) == len(COLUMNS))
        for i in range(len(COLUMNS))
    ]
    lines = []
    for row in rows:
        if len(row) != len(COLUMNS):
            lines.append("%s  %s" % (row[0].ljust(widths[0]), row[1]))
        else:
            lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    found = result.get("verdict")
    lines.append("verdict: " + (found["text"] if found else "fewer than two profiles measured: no verdict"))
    home = result.get("home") or {}
    if home:
        lines.append("node: " + home_line(result.get("own"), home))
    return lines


def home_line(own, home):
    """How the node ended: 'serving sandbox again (80.1 tok/s, its trial 80.3 ±0.4), back in rotation'."""
    if not home.get("serving"):
        return "NOT serving %s: %s" % (own, home.get("cause") or "?")
    text = "serving %s again" % own
    if home.get("decode_tok_s") is not None:
        text += " (%.1f tok/s" % home["decode_tok_s"]
        if home.get("reference") is not None:
            text += ", %s %.1f ±%.1f" % (
                home.get("reference_of") or "before",
                home["reference"],
                home.get("tolerance") or 0,
            )
        text += ")"
    if home.get("as_before") is False:
        text += ", slower than before"
    text += ", back in rotation" if home.get("in_rotation") else ", NOT back in rotation"
    return text


def as_before(figure, reference, spread, floor_pct=5.0):
    """Whether ``figure`` is within the reference trial's spread (at least ``floor_pct`` of it:
    one short measurement moves more than a repeated one): (ok, tolerance)."""
    tolerance = round(max(spread or 0.0, reference * floor_pct / 100.0), 2)
    return figure >= reference - tolerance, tolerance
