"""The decode check after a restart passed its gate: a short, deterministic decode benchmark
(decode_rate.py) against the server, its figures appended to the node's history beside the last
known good, and a verdict against the profile's expectations. The server is asked at --host
(its own --host; loopback when that is 0.0.0.0 or ::).

    python3 decode_check.py [--host H] --port P --served-name N --profile NAME --history FILE
        --last-good-dir D [--requests N] [--warmup N] [--max-tokens N] [--prompt TEXT ...]
        [--timeout S] [--min-decode-tok-s X] [--max-regression-pct X]
        [--min-speedup-over PROFILE [--min-speedup-pct X]] [--min-accept-length L]
        [--on-regression warn|fail|rollback] [--api-key-env-file F --api-key-var NAME]

The baseline is the last known good's recorded figure on this node: the latest accepted entry
of the history for the profile in D's manifest. A regression (below --min-decode-tok-s, or
more than --max-regression-pct under the baseline; for a speculating server, slower than
--min-speedup-over's latest accepted figure on this node raised by --min-speedup-pct, or an
accept length under --min-accept-length: speculation must pay) exits THROUGHPUT_REGRESSION
unless the policy is `warn`. A check that cannot measure (the server stopped answering, answered an error
or streamed too few tokens) exits DECODE_UNMEASURED whatever the expectations and the policy: a
server that passed its gate but does not decode is not serving, and the restart cycle treats it
as a failed step (rollback, unless it is off). Its entry is recorded, not accepted.
Ends with the result line (result.py): {"throughput": the entry recorded, "on_regression"}.

With --restored the server runs the last known good a rollback just put back (--profile names
it): its figure is recorded and said, judged against nothing (a check that proves the baseline
serves at its rate again, or shows that the node itself got slower), and the check never fails.
"""

import argparse
import json
import os
import sys
import time

if __package__:
    from . import lastgood
    from .lib import decode_rate, engine_auth, result, speculation, status
    from .lib.http_probe import server_url
else:  # run as a script: our scripts' directory is on sys.path
    import lastgood
    from lib import decode_rate, engine_auth, result, speculation, status
    from lib.http_probe import server_url

POLICIES = ("warn", "fail", "rollback")


def verdict(figure, baseline, min_decode_tok_s=None, max_regression_pct=None):
    """(change in % against the baseline figure or None, reasons it is a regression)."""
    change = None if not (figure and baseline) else round(100.0 * (figure - baseline) / baseline, 1)
    reasons = []
    if min_decode_tok_s is not None and (figure is None or figure < min_decode_tok_s):
        reasons.append("%s is below min_decode_tok_s %g" % (tok_s(figure), min_decode_tok_s))
    if max_regression_pct is not None and change is not None and -change > max_regression_pct:
        reasons.append(
            "%s vs baseline %.1f exceeds max_regression_pct %g" % (pct(change), baseline, max_regression_pct)
        )
    return change, reasons


def speculation_verdict(figure, spec, reference, over, min_speedup_pct=None, min_accept_length=None):
    """Speculation must pay: reasons a speculating configuration is a regression, in the
    incident's words: its figure under ``reference`` (the latest accepted entry of profile
    ``over`` on this node, or None: not judged) raised by min_speedup_pct, or its accept length
    under min_accept_length."""
    spec = spec or {}
    length = spec.get("accept_length")
    reasons = []
    if reference is not None and figure is not None:
        base = reference["decode_tok_s"]
        need = base * (1 + (min_speedup_pct or 0) / 100.0)
        if figure < need:
            change = 100.0 * (figure - base) / base
            than = "%.0f %% slower than" % -change if change < 0 else "only %.0f %% faster than" % change
            reasons.append(
                "%s decodes %.1f tok/s, %s %s's %.1f on this node%s%s"
                % (
                    spec.get("algorithm") or "speculation",
                    figure,
                    than,
                    over,
                    base,
                    "; accept length %.1f" % length if length is not None else "",
                    " (min_speedup_pct %g)" % min_speedup_pct if min_speedup_pct else "",
                )
            )
    if min_accept_length is not None and (length is None or length < min_accept_length):
        said = "not reported" if length is None else "%.2f" % length
        reasons.append("accept length %s is below min_accept_length %g" % (said, min_accept_length))
    return reasons


def tok_s(figure):
    return "no figure" if figure is None else "%.1f tok/s" % figure


def pct(change):
    return "%+.0f%%" % change


def read_history(path):
    """Every entry of a history file, oldest first (a torn last line is skipped)."""
    entries = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    entries.append(json.loads(line))
                except ValueError:
                    continue
    except FileNotFoundError:
        pass
    return entries


def baseline_of(history, profile):
    """The latest accepted entry with a figure for ``profile`` (the last known good's), or None."""
    if not profile:
        return None
    return next(
        (
            entry
            for entry in reversed(history)
            if entry.get("profile") == profile and entry.get("accepted") and entry.get("decode_tok_s")
        ),
        None,
    )


def last_good_profile(directory):
    try:
        return (lastgood.load(directory) or {}).get("profile")
    except (OSError, ValueError):
        return None


def append(path, entry):
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(entry, sort_keys=True) + "\n")


def server_info(base, timeout=5, key=None):
    """What the server at ``base`` says of itself (/server_info; its api_key among the rest is
    read and dropped by the callers, never kept), or {}."""
    try:
        with engine_auth.opener(key).open(base + "/server_info", timeout=timeout) as r:
            info = json.load(r)
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def describe(entry):
    """One line: the figure and its change against the baseline."""
    if entry.get("decode_tok_s") is None:
        return "decode not measured: %s" % entry.get("error")
    text = "%s (min %.1f, max %.1f, TTFT %.0f ms, %d requests)" % (
        tok_s(entry["decode_tok_s"]),
        entry["decode_tok_s_min"],
        entry["decode_tok_s_max"],
        entry["ttft_ms"],
        entry["requests"],
    )
    if entry.get("speculation"):
        text += "; " + speculation.describe(entry["speculation"])
    channels = entry.get("channels") or {}
    if channels.get("reasoning"):  # a reasoning model: how much of the figure was thinking
        text += "; %d chunks of reasoning, %d of content" % (
            channels["reasoning"],
            channels.get("content", 0),
        )
    base = entry.get("baseline")
    if base:
        text += "; %s vs baseline %.1f (%s)" % (
            pct(entry["change_pct"]),
            base["decode_tok_s"],
            base["profile"],
        )
    return text


def judge_speculation(args, entry, history):
    """The speculation rules' reasons, with the figure the speed-up is judged against recorded
    in the entry ({"over", "reference_tok_s", "change_pct"}; said when the node has none yet)."""
    if entry["error"]:
        return []
    figure, reference = entry.get("decode_tok_s"), None
    if args.min_speedup_over:
        reference = baseline_of(history, args.min_speedup_over)
        if reference is None:
            print(
                "decode check: no figure of %s on this node yet: whether speculation pays is not "
                "judged (make ab records one)" % args.min_speedup_over,
                flush=True,
            )
        else:
            base = reference["decode_tok_s"]
            entry["speedup"] = {
                "over": args.min_speedup_over,
                "reference_tok_s": base,
                "change_pct": round(100.0 * (figure - base) / base, 1),
            }
    return speculation_verdict(
        figure,
        entry.get("speculation"),
        reference,
        args.min_speedup_over,
        args.min_speedup_pct,
        args.min_accept_length,
    )


def check(args, now=None):
    if args.restored:  # the last known good again: measured, judged against nothing
        args.min_decode_tok_s = args.max_regression_pct = args.min_accept_length = args.min_speedup_over = (
            None
        )
        args.on_regression = "warn"
    history = read_history(args.history)
    good = last_good_profile(args.last_good_dir)
    base = baseline_of(history, good)
    server = server_url(args.host, args.port)
    key = engine_auth.key_of(args)
    version = server_info(server, key=key).get("version")
    entry = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        "profile": args.profile,
        "engine_version": version,
        "port": args.port,
        "max_tokens": args.max_tokens,
        "baseline": base and {key: base[key] for key in ("profile", "decode_tok_s", "time")},
        "restored": args.restored,
    }
    try:
        entry.update(
            decode_rate.measure(
                server + "/v1/chat/completions",
                args.served_name,
                args.prompt,
                args.requests,
                args.warmup,
                args.max_tokens,
                args.timeout,
                key,
            )
        )
        entry["error"] = None
    except (decode_rate.MeasureError, OSError, ValueError) as e:
        entry.update(decode_tok_s=None, error=str(e) or type(e).__name__)
    # A speculating server: its accept length after the benchmark, beside the rate it explains.
    spec = speculation.of_server_info(server_info(server, key=key))
    if spec:
        entry["speculation"] = spec
    # Nothing measured: nothing to judge against the expectations, and no figure to accept.
    unmeasured = entry["error"] is not None and not args.restored
    change, reasons = (
        (None, [])
        if entry["error"]
        else verdict(
            entry.get("decode_tok_s"),
            base and base["decode_tok_s"],
            args.min_decode_tok_s,
            args.max_regression_pct,
        )
    )
    if args.min_speedup_over or args.min_accept_length is not None:
        reasons += judge_speculation(args, entry, history)
    regressed = bool(reasons)
    entry.update(
        change_pct=change,
        regression=reasons,
        on_regression=args.on_regression,
        accepted=not unmeasured and (not regressed or args.on_regression == "warn"),
    )
    append(args.history, entry)
    print(
        "decode check%s: %s" % (" (the last known good, restored)" if args.restored else "", describe(entry)),
        flush=True,
    )
    if version and "+sandbox" in version:
        print(
            "decode check: engine %s: the sandbox stand-in decodes at its configured rate "
            "(SGLANG_STANDIN_TOKENS_PER_SECOND), not a GPU's" % version,
            flush=True,
        )
    if unmeasured:
        print("decode check: not measured: the restart fails (%s)" % entry["error"], flush=True)
        return result.emit(
            status.DECODE_UNMEASURED,
            "decode not measured: %s" % entry["error"],
            throughput=entry,
            on_regression=args.on_regression,
        )
    if regressed:
        print("decode check: regression (%s): %s" % (args.on_regression, "; ".join(reasons)), flush=True)
    failed = regressed and args.on_regression != "warn"
    return result.emit(
        status.THROUGHPUT_REGRESSION if failed else status.READY,
        "decode regression: " + "; ".join(reasons) if failed else None,
        throughput=entry,
        on_regression=args.on_regression,
    )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1", help="the server's --host (0.0.0.0 means 127.0.0.1)")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--served-name", required=True)
    p.add_argument("--profile", required=True)
    p.add_argument("--history", required=True, help="JSON lines, one per check")
    p.add_argument("--last-good-dir", required=True)
    p.add_argument("--requests", type=int, required=True)
    p.add_argument("--warmup", type=int, required=True)
    p.add_argument("--max-tokens", type=int, required=True)
    p.add_argument("--prompt", action="append", default=[])
    p.add_argument("--timeout", type=float, required=True, help="per request, seconds")
    p.add_argument("--min-decode-tok-s", type=float)
    p.add_argument("--max-regression-pct", type=float)
    p.add_argument("--min-speedup-over", help="speculation must beat this profile's figure on this node")
    p.add_argument("--min-speedup-pct", type=float, help="by this much, in %% (default 0)")
    p.add_argument("--min-accept-length", type=float, help="floor of the speculative accept length")
    p.add_argument("--on-regression", choices=POLICIES, default="warn")
    p.add_argument(
        "--restored",
        action="store_true",
        help="the server runs the last known good a rollback restored: record only",
    )
    engine_auth.add_arguments(p)
    return check(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
