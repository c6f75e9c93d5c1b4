"""The A/B all-reduce sweep's pure parts: the env file's tuning variables, the arms, sizes,
statistics (median time, bus bandwidth), b/a comparisons, verdicts and the report table.

Standard library only; imported by nccl_ab.py on the node and by the tests on the controller.
"""

import json
import statistics

# Variables that are not tuning: left out of both arms (debug output would cost time).
NOT_TUNING = (
    "NCCL_DEBUG",
    "NCCL_DEBUG_SUBSYS",
    "NCCL_DEBUG_FILE",
    "NCCL_DEBUG_TIMESTAMP_FORMAT",
    "NCCL_DEBUG_TIMESTAMP_LEVELS",
)
# What SGLang's launcher sets for its workers (it overrides the env file): fixed in both arms.
HELD_FIXED = {"NCCL_CUMEM_ENABLE": "0", "NCCL_NVLS_ENABLE": "0"}
# 4 KB .. 64 MB: tensor-parallel decode all-reduces are a few KB to a few MB (hidden size x
# 2 bytes x batch 1-32); the large ones are prefill-sized.
DEFAULT_SIZES = tuple(4096 * 4**i for i in range(8))
# A difference smaller than this (or than the spread between rounds) is called noise.
MIN_EFFECT = 0.05


def parse_env_file(text):
    """KEY=VALUE lines of a systemd EnvironmentFile (the deploy writes one variable per line,
    double-quoted where needed); comments and blank lines skipped."""
    env = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
            if raw.strip().partition("=")[2].strip()[0] == '"':
                value = value.replace('\\"', '"').replace("\\\\", "\\")
        env[key.strip()] = value
    return env


def tuning_of(env_file_vars):
    """The env file's NCCL variables under test (debug output and what SGLang fixes left out)."""
    return {
        k: v
        for k, v in env_file_vars.items()
        if k.startswith("NCCL_") and k not in NOT_TUNING and k not in HELD_FIXED
    }


def arm_environments(base_env, env_file_vars, ablate=False):
    """[(arm name, environment)]: 'a' (defaults), 'b' (the env file's tuning), and with ablate
    'b-<VAR>' (b without VAR) per tuning variable. Every arm: the calling environment without
    any NCCL_* of its own, the env file's other variables, and HELD_FIXED."""
    common = {k: v for k, v in base_env.items() if not k.startswith("NCCL_")}
    common.update({k: v for k, v in env_file_vars.items() if not k.startswith("NCCL_")})
    common.update(HELD_FIXED)
    tuning = tuning_of(env_file_vars)
    arms = [("a", dict(common)), ("b", dict(common, **tuning))]
    if ablate and len(tuning) > 1:
        for var in tuning:
            arms.append(("b-" + var, dict(common, **{k: v for k, v in tuning.items() if k != var})))
    return arms


def round_orders(names, rounds):
    """Interleaved order of the arms per round: forward, then backward, alternating."""
    return [list(names) if r % 2 == 0 else list(reversed(names)) for r in range(rounds)]


def bus_factor(world):
    """nccl-tests' all-reduce bus bandwidth factor 2(n-1)/n; 0 for one rank (no traffic)."""
    return 2.0 * (world - 1) / world if world > 0 else 0.0


def size_label(n):
    for unit, div in (("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= div and n % div == 0:
            return "%d %s" % (n // div, unit)
    return "%d B" % n


def parse_size(text):
    text = text.strip().upper().replace("IB", "B")
    for suffix, mult in (
        ("KB", 1 << 10),
        ("MB", 1 << 20),
        ("GB", 1 << 30),
        ("K", 1 << 10),
        ("M", 1 << 20),
        ("G", 1 << 30),
        ("B", 1),
    ):
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * mult)
    return int(text)


def parse_worker_output(text):
    """The worker's result: its last line that is a JSON object with 'times_us'."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict) and "times_us" in obj:
                obj["times_us"] = {int(k): float(v) for k, v in obj["times_us"].items()}
                return obj
    return None


def summarize(samples, world):
    """samples: {arm: [{size: us}, ...one per round]} -> {arm: {size: {us, spread, busbw_gbps}}}.
    us is the median over rounds; spread the rounds' (max - min) / median."""
    out = {}
    for arm, rounds in samples.items():
        sizes = sorted({s for r in rounds for s in r})
        out[arm] = {}
        for size in sizes:
            values = [r[size] for r in rounds if size in r]
            med = statistics.median(values)
            busbw = size / (med * 1e-6) * bus_factor(world) / 1e9 if med > 0 and world > 1 else None
            out[arm][size] = {
                "us": med,
                "spread": (max(values) - min(values)) / med if med > 0 else 0.0,
                "rounds_us": values,
                "busbw_gbps": busbw,
            }
    return out


def compare(stats, test, ref):
    """{size: {ratio, change, significant}}: ratio = time(test) / time(ref); change = speed
    change of test against ref (+ faster, - slower) = 1/ratio - 1; significant when the change
    is beyond MIN_EFFECT and beyond either arm's spread between rounds."""
    out = {}
    for size in sorted(set(stats[test]) & set(stats[ref])):
        t, r = stats[test][size], stats[ref][size]
        ratio = t["us"] / r["us"]
        change = 1.0 / ratio - 1.0
        noise = max(MIN_EFFECT, t["spread"], r["spread"])
        out[size] = {"ratio": ratio, "change": change, "significant": abs(ratio - 1.0) > noise}
    return out


def _pct(change):
    return "%s%d%%" % ("+" if change >= 0 else "\u2212", round(abs(change) * 100))


def _span(sizes):
    return (
        size_label(sizes[0])
        if len(sizes) == 1
        else "%s\u2013%s" % (size_label(sizes[0]), size_label(sizes[-1]))
    )


def verdict(label, comparison):
    """One line, e.g. 'NCCL_PROTO=LL: +12% at 64 KB (faster), -30% at 16 MB (slower)'; the
    largest gain and loss among significant sizes, then where it is faster/slower."""
    faster = [s for s, c in comparison.items() if c["significant"] and c["change"] > 0]
    slower = [s for s, c in comparison.items() if c["significant"] and c["change"] < 0]
    if not faster and not slower:
        return "%s: no effect beyond noise at any size (%s)" % (label, _span(sorted(comparison)))
    parts = []
    if faster:
        best = max(faster, key=lambda s: comparison[s]["change"])
        parts.append("%s at %s (faster)" % (_pct(comparison[best]["change"]), size_label(best)))
    if slower:
        worst = min(slower, key=lambda s: comparison[s]["change"])
        parts.append("%s at %s (slower)" % (_pct(comparison[worst]["change"]), size_label(worst)))
    where = []
    if faster:
        where.append("faster at %s" % ", ".join(size_label(s) for s in sorted(faster)))
    if slower:
        where.append("slower at %s" % ", ".join(size_label(s) for s in sorted(slower)))
    return "%s: %s; %s" % (label, ", ".join(parts), "; ".join(where))


def overall_cause(comparison):
    faster = any(c["significant"] and c["change"] > 0 for c in comparison.values())
    slower = any(c["significant"] and c["change"] < 0 for c in comparison.values())
    return {(True, True): "mixed", (True, False): "faster", (False, True): "slower"}.get(
        (faster, slower), "no-effect"
    )


def build_report(stats, world, tuning, meta, ablate_names=()):
    """The result's details: per size rows, the overall verdict, and per-variable verdicts."""
    ab = compare(stats, "b", "a")
    rows = []
    for size in sorted(ab):
        a, b = stats["a"][size], stats["b"][size]
        rows.append(
            {
                "bytes": size,
                "label": size_label(size),
                "a_us": round(a["us"], 2),
                "b_us": round(b["us"], 2),
                "a_busbw_gbps": _round(a["busbw_gbps"]),
                "b_busbw_gbps": _round(b["busbw_gbps"]),
                "ratio_b_a": round(ab[size]["ratio"], 3),
                "a_spread": round(a["spread"], 3),
                "b_spread": round(b["spread"], 3),
                "significant": ab[size]["significant"],
            }
        )
    label = " ".join("%s=%s" % kv for kv in tuning.items()) or "(no NCCL tuning in the env file)"
    verdicts = [{"group": "all", "variables": sorted(tuning), "verdict": verdict(label, ab)}]
    for arm in ablate_names:
        var = arm[2:]
        # What the variable does: b against b without it.
        var_cmp = compare(stats, "b", arm)
        verdicts.append(
            {
                "group": var,
                "variables": [var],
                "verdict": verdict("%s=%s" % (var, tuning[var]), var_cmp),
                "ratio_b_without": {str(s): round(c["ratio"], 3) for s, c in var_cmp.items()},
            }
        )
    details = dict(meta)
    details.update(
        {
            "world_size": world,
            "tuning": tuning,
            "held_fixed": HELD_FIXED,
            "rows": rows,
            "verdicts": verdicts,
            "overall": overall_cause(ab),
        }
    )
    return details


def _round(x):
    return None if x is None else round(x, 2)


def table(details):
    """The text table of a result (what the controller stores next to the JSON)."""
    out = [
        "%s: %d GPU(s), %s" % (details.get("host", "?"), details["world_size"], details.get("versions", "")),
        "a = NCCL's defaults; b = the env file's: %s"
        % (" ".join("%s=%s" % kv for kv in details["tuning"].items()) or "none"),
        "held in both: %s; median of %s interleaved rounds; timing: %s"
        % (
            " ".join("%s=%s" % kv for kv in details["held_fixed"].items()),
            details.get("rounds", "?"),
            details.get("timing", "?"),
        ),
        "%10s  %10s  %10s  %8s  %12s  %12s" % ("size", "a us", "b us", "b/a", "a busbw GB/s", "b busbw GB/s"),
    ]
    for r in details["rows"]:
        bw = lambda x: "-" if x is None else "%.1f" % x  # noqa: E731
        out.append(
            "%10s  %10.1f  %10.1f  %7.2f%s  %12s  %12s"
            % (
                r["label"],
                r["a_us"],
                r["b_us"],
                r["ratio_b_a"],
                "*" if r["significant"] else " ",
                bw(r["a_busbw_gbps"]),
                bw(r["b_busbw_gbps"]),
            )
        )
    out.append("(* beyond noise: > %d%% and beyond the spread between rounds)" % round(MIN_EFFECT * 100))
    if details["world_size"] < 2:
        out.append("one rank: no traffic between GPUs; times show the harness and launch cost only")
    out += ["verdict: " + v["verdict"] for v in details["verdicts"]]
    out += ["lint: " + f for f in details.get("lint", [])]
    return out


def result_line(status, cause, details):
    return json.dumps({"status": status, "cause": cause, "details": details}, sort_keys=True)
