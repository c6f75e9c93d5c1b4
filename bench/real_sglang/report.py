"""What a run of `bench/real_engine.py gpu` proved: a verdict per promise from the recorded
results, the table, and the small readers the run needs (result lines, the env file, NCCL's
lines). Pure functions of their arguments: tests/unit/test_bench_real_engine.py checks them.

A run's results (the `results` dict, written to real-engine.json):

    {"engine": "real", "engine_version": "0.5.17", "gpu": "...", "run_s": 312.4,
     "steps": {name: {"argv", "rc", "elapsed_s", "timed_out", "result", "output_tail"}},
     "facts": {"hook": {...}, "nccl": {...}, "http": {...}, "stop": {...}, "crash": {...}},
     "skipped": {promise id: why it was not run}}

`steps` holds each script's run (its JSON result line parsed); `facts` what the run measured
itself. Verdicts: held, failed, not applicable (the engine cannot show it), not run (an
earlier step failed or the time ran out).
"""

import importlib.util
import json
import os
import re
from pathlib import Path

HELD, FAILED, NA, NOT_RUN = "held", "failed", "not applicable", "not run"
READY, FAILED_START, WORKER_ENV_MISMATCH, PREFLIGHT_FAILED = 0, 3, 7, 11
ENVFILE_PARSER = Path(__file__).resolve().parents[2] / "sglang_deploy" / "node" / "lib" / "envfile.py"
NCCL_SET_RE = re.compile(r"NCCL INFO (NCCL_\w+) set by environment to (\S+?)\.?$")
LOG_KEEP_LINES = 400
# NCCL names a variable it reads as "set by environment"; these it never names that way.
NOT_NAMED = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE")
PHASE_ORDER = ("starting", "loading", "graphs", "http", "warmup")  # node/lib/sglang_log.py's


def result_line(text):
    """The last JSON object with a "status" in a script's output (node/lib/result.py), or None."""
    for line in reversed((text or "").splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict) and "status" in found:
            return found
    return None


def parse_env_file(text):
    """The env file's variables as systemd's EnvironmentFile= gives them to the server: the
    project's own reader of systemd's format (sglang_deploy/node/lib/envfile.py), loaded by path so
    the GPU side needs nothing beyond the standard library."""
    spec = importlib.util.spec_from_file_location("sglang_deploy_envfile", ENVFILE_PARSER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.parse_env_file(text)


def launch_environment(base, env_file_vars, records_var, records_dir):
    """The server's environment: the calling one, the env file's variables over it (as the
    unit's EnvironmentFile= sets them), and where the start-up hook records."""
    env = dict(base)
    env.update(env_file_vars)
    env[records_var] = records_dir
    return env


def nccl_lines(lines):
    """{"lines": count of `NCCL INFO` lines, "set_by_env": {VAR: value NCCL reports}}."""
    found = [line for line in lines if "NCCL INFO" in line]
    set_by_env = {}
    for line in found:
        m = NCCL_SET_RE.search(line.rstrip())
        if m:
            set_by_env[m.group(1)] = m.group(2)
    return {"lines": len(found), "set_by_env": set_by_env}


def exit_status(returncode):
    """A Popen returncode as a shell shows it: -9 -> (137, "SIGKILL")."""
    if returncode is None:
        return None, "still running"
    if returncode < 0:
        import signal

        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "signal %d" % -returncode
        return 128 - returncode, name
    return returncode, None


def trim_log(text, keep=LOG_KEEP_LINES):
    lines = text.splitlines()
    if len(lines) <= keep:
        return text
    return "[... %d earlier lines left out ...]\n" % (len(lines) - keep) + "\n".join(lines[-keep:]) + "\n"


# -- verdicts ---------------------------------------------------------------------------------


def _step(results, name):
    return (results.get("steps") or {}).get(name)


def _status(step):
    return ((step or {}).get("result") or {}).get("status")


def _why_not(step, what):
    if step is None:
        return "%s did not run" % what
    if step.get("timed_out"):
        return "%s timed out after %.0f s" % (what, step.get("elapsed_s") or 0)
    if step.get("result") is None:
        return "%s printed no result line (exit %s): %s" % (
            what,
            step.get("rc"),
            " | ".join(step.get("output_tail", [])[-2:]),
        )
    res = step["result"]
    return "%s: %s (%s)" % (what, res.get("result"), res.get("cause"))


def v_preflight(results, expect):
    step = _step(results, "preflight")
    if _status(step) == READY:
        argv = [c["text"] for c in step["result"].get("checks", []) if "parser accepts" in c["text"]]
        if argv:
            checks = [c["verdict"] for c in step["result"]["checks"]]
            counts = ", ".join("%d %s" % (checks.count(v), v) for v in sorted(set(checks)))
            return HELD, "%s; checks: %s (%.1f s)" % (argv[0], counts, step["elapsed_s"])
    return FAILED, _why_not(step, "preflight")


def v_bad_flag(results, expect):
    step = _step(results, "preflight_bad_flag")
    cause = ((step or {}).get("result") or {}).get("cause") or ""
    if _status(step) == PREFLIGHT_FAILED and "did you mean %s" % expect["bad_flag_meant"] in cause:
        return HELD, "PREFLIGHT_FAILED: %s" % _short(cause, 220)
    return FAILED, _why_not(step, "preflight with %s" % expect["bad_flag"])


def v_hook(results, expect):
    hook = (results.get("facts") or {}).get("hook")
    if not hook:
        return NOT_RUN, "the hook was not installed"
    if hook.get("loaded") and hook.get("records"):
        return HELD, "%s.pth in %s loads it at interpreter start; %d processes recorded (%s)" % (
            hook["module"],
            hook["site_packages"],
            hook["records"],
            ", ".join(os.path.basename(t) for t in hook.get("titles", [])),
        )
    return FAILED, "loaded at start: %s; records written: %s" % (hook.get("loaded"), hook.get("records"))


def v_gate(results, expect):
    step = _step(results, "gate")
    if _status(step) == READY:
        res = step["result"]
        times = res.get("phases", {})
        phases = ", ".join("%s %.1fs" % (k, times[k]) for k in PHASE_ORDER if k in times)
        return HELD, "READY in %.1f s (%s)" % (res.get("elapsed_s"), phases)
    return FAILED, _why_not(step, "gate")


def _worker_summary(report):
    workers = report.get("workers", [])
    return "%d workers (%s)" % (len(workers), ", ".join(w["title"] for w in workers))


def v_workers_after(results, expect):
    step = _step(results, "workers_after")
    if _status(step) == READY:
        res = step["result"]
        return HELD, "READY: %s, %d/%d variables ok in each, from the hook's records" % (
            _worker_summary(res),
            len(res.get("expected", {})),
            len(res.get("expected", {})),
        )
    return FAILED, _why_not(step, "workers.py --records")


def v_workers_before(results, expect):
    step = _step(results, "workers_before")
    res = (step or {}).get("result")
    if res is None:
        return FAILED, _why_not(step, "the old workers.py")
    workers = res.get("workers", [])
    blind = bool(workers) and all(
        w.get("error") or (w["mismatches"] and all(m["actual"] is None for m in w["mismatches"]))
        for w in workers
    )
    if not expect["environ_blanked"]:
        return NA, "%s: %s; the engine's process titles keep /proc/<pid>/environ readable" % (
            res.get("result"),
            _worker_summary(res),
        )
    if res.get("status") == WORKER_ENV_MISMATCH and blind:
        return HELD, "fails as expected: WORKER_ENV_MISMATCH, every variable missing in %s" % ", ".join(
            w["title"] for w in workers
        )
    return FAILED, "expected every variable missing (setproctitle blanks environ): %s" % _why_not(
        step, "the old workers.py"
    )


def v_workers_mismatch(results, expect):
    step = _step(results, "workers_mismatch")
    res = (step or {}).get("result") or {}
    var, want = expect.get("mismatch_var"), expect.get("mismatch_value")
    seen = [
        m
        for w in res.get("workers", [])
        for m in w.get("mismatches", [])
        if m["var"] == var and m["expected"] == want and m["actual"] is not None
    ]
    if res.get("status") == WORKER_ENV_MISMATCH and seen:
        return HELD, "WORKER_ENV_MISMATCH: %s" % _short(res.get("cause") or "")
    return FAILED, _why_not(step, "workers.py with %s=%s expected" % (var, want))


def v_nccl(results, expect):
    nccl = (results.get("facts") or {}).get("nccl")
    if nccl is None:
        return NOT_RUN, "the server log was not read"
    if not nccl["lines"]:
        return NA, "no NCCL INFO line in the log (TP 1: NCCL did not initialise a communicator)"
    wrong = {k: v for k, v in nccl["set_by_env"].items() if k in expect["env"] and expect["env"][k] != v}
    text = "%d NCCL INFO lines%s; set by environment: %s" % (
        nccl["lines"],
        " (the stand-in prints them itself)" if nccl.get("simulated") else "",
        ", ".join("%s=%s" % kv for kv in sorted(nccl["set_by_env"].items())) or "none named",
    )
    unnamed = sorted(k for k in expect["env"] if k not in NOT_NAMED and k not in nccl["set_by_env"])
    if unnamed:
        text += "; not named by NCCL: %s" % ", ".join(unnamed)
    return (FAILED, text + "; other values than the profile's: %s" % wrong) if wrong else (HELD, text)


def v_decode(results, expect):
    step = _step(results, "decode_check")
    entry = ((step or {}).get("result") or {}).get("throughput") or {}
    if _status(step) == READY and entry.get("decode_tok_s"):
        return HELD, "%.1f tok/s (min %.1f, max %.1f, TTFT %.0f ms, %d requests), engine %s" % (
            entry["decode_tok_s"],
            entry["decode_tok_s_min"],
            entry["decode_tok_s_max"],
            entry["ttft_ms"],
            entry["requests"],
            entry.get("engine_version"),
        )
    return FAILED, _why_not(step, "decode_check.py")


def v_speculation(results, expect):
    """A speculating server's accept length, as decode_check.py recorded it beside tok/s."""
    if "--speculative-algorithm" not in (results.get("argv") or []):
        return NA, "the profile does not speculate"
    step = _step(results, "decode_check")
    spec = (((step or {}).get("result") or {}).get("throughput") or {}).get("speculation") or {}
    if spec.get("accept_length") is not None:
        return HELD, "%s accept length %.3f, accept rate %s" % (
            spec["algorithm"],
            spec["accept_length"],
            spec.get("accept_rate"),
        )
    return FAILED, "no accept length recorded: %s" % (spec or _why_not(step, "decode_check.py"))


def v_decode_before(results, expect):
    """The 575ddb1 decode check on the same server, for comparison (no --host: it asks
    127.0.0.1; it counts delta.content only): what the change is measured against."""
    step = _step(results, "decode_check_before")
    entry = ((step or {}).get("result") or {}).get("throughput") or {}
    if _status(step) == READY and entry.get("decode_tok_s"):
        return NA, "before: %.1f tok/s" % entry["decode_tok_s"]
    return NA, "before: %s" % _why_not(step, "decode_check.py (575ddb1)")


def v_http(results, expect):
    http = (results.get("facts") or {}).get("http")
    if not http:
        return NOT_RUN, "not asked"
    parts, ok = [], True
    for path, answers in sorted(http.items()):
        codes = sorted({code for code, _ in answers})
        ok = ok and codes == [200]
        parts.append(
            "%s %s in %s ms" % (path, "/".join(map(str, codes)), "/".join("%.0f" % ms for _, ms in answers))
        )
    return (HELD if ok else FAILED), "; ".join(parts)


def v_key(results, expect):
    key = (results.get("facts") or {}).get("key") or {}
    if key.get("applies") is False:
        return NA, "the profile gives the server no API key"
    text = (
        "/v1/models %s without the key, %s with it; on %d command lines; config %s; %s in the log, %s in our outputs"
        % (
            key.get("v1_models_without"),
            key.get("v1_models_with"),
            key.get("cmdlines", -1),
            key.get("config_mode"),
            key.get("in_server_log", "?"),
            key.get("in_our_outputs", "?"),
        )
    )
    good = (
        key.get("v1_models_without") == 401
        and key.get("v1_models_with") == 200
        and key.get("cmdlines") == 0
        and key.get("config_mode") == "0o600"
        and key.get("in_server_log") == 0
        and key.get("in_our_outputs") == 0
    )
    return (HELD if good else FAILED), text


def v_stop(results, expect):
    stop = (results.get("facts") or {}).get("stop")
    if not stop:
        return NOT_RUN, "the server was not stopped by the run"
    how = " (%s)" % stop["how"] if stop.get("how") else ""
    text = "exit %s%s %.1f s after SIGTERM" % (stop["exit_status"], how, stop["seconds"])
    if stop.get("outlived_s") is not None:
        text += "; %d processes of its group outlived it by %.1f s" % (stop["outlived"], stop["outlived_s"])
    if stop.get("killed_leftovers"):
        text += "; leftovers killed"
    text += "; port %s" % ("free" if stop.get("port_free") else "still held")
    good = stop["exit_status"] is not None and stop["seconds"] <= stop["timeout_stop_sec"]
    return (HELD if good and stop.get("port_free") else FAILED), text


def v_crash(results, expect):
    step = _step(results, "crash_gate")
    res = (step or {}).get("result") or {}
    crash = (results.get("facts") or {}).get("crash") or {}
    cause = res.get("cause") or ""
    if res.get("status") == FAILED_START and expect["crash_cause"] in cause:
        text = "DEAD (FAILED_START) %.1f s after start; cause %s" % (res.get("elapsed_s"), _short(cause, 220))
        if crash.get("death_to_verdict_s") is not None:
            text += "; verdict %.2f s after the launcher died" % crash["death_to_verdict_s"]
        return HELD, text
    return FAILED, "expected a cause naming %r: %s" % (expect["crash_cause"], _why_not(step, "gate"))


PROMISES = (
    ("a1", "preflight: the real parser accepts the profile's argv", v_preflight, "preflight"),
    ("a2", "preflight: a bad flag refused with a did-you-mean", v_bad_flag, "preflight_bad_flag"),
    ("b", "start-up hook from the venv's site-packages, in every process", v_hook, "hook"),
    ("c", "gate.py --pid: READY, phase times", v_gate, "gate"),
    ("d1", "workers.py --records (after): every worker has the env", v_workers_after, "workers_after"),
    ("d2", "workers.py /proc environ (before, 575ddb1): blind", v_workers_before, "workers_before"),
    ("d3", "workers.py --records: another value is caught", v_workers_mismatch, "workers_mismatch"),
    ("e", "NCCL's own INFO lines (NCCL_DEBUG from env file/hook)", v_nccl, "nccl"),
    ("f", "decode_check.py: tok/s measured", v_decode, "decode_check"),
    ("s", "decode_check.py: a speculating server's accept length", v_speculation, "decode_check"),
    ("f0", "decode_check.py before (575ddb1), for comparison", v_decode_before, "decode_check_before"),
    ("g", "/health and /ping: 200", v_http, "http"),
    ("h", "SIGTERM to the launcher stops the server", v_stop, "stop"),
    ("k", "API key: asked for, sent by our probes, shown nowhere", v_key, "key"),
    ("i", "crash start (--tp-size 2 on one GPU): DEAD, and why", v_crash, "crash_gate"),
)


def verdicts(results, expect):
    """[(id, promise, verdict, evidence)], one per promise: not run where the run skipped it or
    never reached the step or measurement it is judged on."""
    rows = []
    done = set(results.get("steps") or {}) | set(results.get("facts") or {})
    for key, promise, judge, needs in PROMISES:
        skipped = (results.get("skipped") or {}).get(key)
        if skipped or needs not in done:
            verdict, evidence = NOT_RUN, skipped or "the run did not get there"
        else:
            verdict, evidence = judge(results, expect)
        rows.append((key, promise, verdict, evidence))
    return rows


def _short(text, limit=120):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def render_table(results, expect, rows, date):
    """The text of real-sglang-<date>.txt."""
    counts = {v: sum(1 for r in rows if r[2] == v) for v in (HELD, FAILED, NA, NOT_RUN)}
    width = max(len(r[1]) for r in rows)
    lines = [
        "%s, %s (python3 bench/real_engine.py gpu --engine %s)"
        % (expect["title"], date, results.get("engine")),
        "",
        "engine:  sglang %s (torch %s)" % (results.get("engine_version"), results.get("torch_version")),
        "GPU:     %s" % (results.get("gpu") or "none"),
        "profile: %s, argv %s" % (results.get("profile"), " ".join(results.get("argv", []))),
        "run:     %.0f s on the machine, from the venv's set-up to the last stop" % results.get("run_s", 0),
        "",
        "%-4s %-*s  %-15s %s" % ("", width, "promise", "verdict", "evidence"),
    ]
    for key, promise, verdict, evidence in rows:
        lines.append("%-4s %-*s  %-15s %s" % (key, width, promise, verdict, evidence))
    lines += [
        "",
        "%d promises: %d held, %d failed, %d not applicable, %d not run"
        % (len(rows), counts[HELD], counts[FAILED], counts[NA], counts[NOT_RUN]),
    ]
    for note in results.get("notes", []):
        lines.append("note: %s" % note)
    return "\n".join(lines) + "\n"


def passed(rows):
    """Every promise held or cannot be shown by this engine."""
    return all(r[2] in (HELD, NA) for r in rows)
