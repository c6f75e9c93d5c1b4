"""An A/B of serving profiles on this node: each one deployed in turn through the gate and
benchmarked, then the node's own profile back, serving as before, and back in rotation.

    python3 ab.py run --plan-json STAGE/plan.json

The controller (report/ab_runner.py, `make ab`) renders each profile's files as a deploy of it
would (unit, env file, start-up hook) into STAGE (0700) and writes the plan: {"own": the node's
profile, "last_good_dir", "history" (the decode check's), "result_json" (where the result is kept
on the node), "lock": {"path", "wait", "holder"} (the deploy lock, held throughout), "out" and
"back" (rotation.py --only out / back), "restore" (lastgood.py restore), "reload" (systemctl
daemon-reload), "bench": {"prompts", "max_tokens", "repeats", "warmup", "timeout"}, "trials":
[{"profile", "files": {role: staged file}, "restart", "gate" (command lines), "base" (the
server's URL), "served_name", "api_key_env_file", "api_key_var"}], "home": the own profile's
entry, files aside}. It runs detached like the restart cycle (detach.py start): a controller that
dies leaves it running to its end.

In order: the deploy lock; the installed files must be the last known good's (the record's
sha256s: what the node serves is what it goes back to) or nothing starts; out of rotation
(nothing changed when that is refused); each trial, the own profile last: its files over the
installed ones (each whole, by rename, the record's mode), daemon-reload, restart, gate, then the
benchmark (lib/ab_bench.py) and the accept length a speculating server reports (/server_info).
A trial that fails its gate or its benchmark is said with its cause and the next one runs. Then,
always (a failure, SIGTERM: the unit stopped), home: when the last trial was the own profile and
left exactly the record's files, its server is what served before and stays; else the last known
good is restored (lastgood.py restore), restarted, gated and measured once, within the own
trial's spread (or the history's figure of the own profile) to serve "as before". Back into
rotation when it serves. Ends with one result line (also written to result_json): {"outcome":
"ab" | "busy" | "refused", "own", "trials": [{"profile", "bench", "speculation", "restart_s",
"bench_s", "wall_s", "cause"}], "verdict" (ab_bench.verdict), "home": {"serving", "restarted",
"decode_tok_s", "reference", "as_before", "in_rotation", "cause"}, "wall_s", "rotation"}.
Exit status: 0 every trial measured and the node home, serving as before and in rotation; else
the first failure's (THROUGHPUT_REGRESSION: home and in rotation, but slower than it served).
"""

import argparse
import json
import os
import shutil
import signal
import sys
import time

if __package__:
    from . import decode_check, lock
    from .lib import ab_bench, engine_auth, result, speculation, status
    from .lib import last_good_record as record
else:  # run as a script: our scripts' directory is on sys.path
    import decode_check
    import lock
    from lib import ab_bench, engine_auth, result, speculation, status
    from lib import last_good_record as record


class Stopped(Exception):
    """SIGTERM: the A/B's unit is being stopped; go home first."""


def _stopped(signum, frame):
    raise Stopped("stopped (signal %d)" % signum)


def say(text):
    print("ab: " + text, flush=True)


def step(command, what):
    """Run one of our scripts: (ok, its result line, the cause when it failed)."""
    code, lines = result.run_streaming(command)
    found = result.parse(lines) or {}
    if code == status.READY:
        return True, found, None
    cause = found.get("cause") or next((line for line in reversed(lines) if line.strip()), "no output")
    return False, dict(found, status=code), "%s: %s" % (what, cause)


def restarted(first, entry):
    """``first`` (a command line and what it does), then the server ``entry`` names restarted
    and gated: (ok, the exit status and cause of the step that failed)."""
    for command, what in (first, (entry["restart"], "restart"), (entry["gate"], "readiness gate")):
        ok, found, cause = step(command, what)
        if not ok:
            return False, found.get("status"), cause
    return True, status.READY, None


def installed_differs(manifest):
    """The roles whose installed file is not the record's (missing counts)."""
    differs = []
    for role, entry in sorted(manifest["files"].items()):
        try:
            same = record.sha256(entry["path"]) == entry["sha256"]
        except OSError:
            same = False
        if not same:
            differs.append(role)
    return differs


def install(files, manifest):
    """A trial's staged files over the installed ones, each whole (by rename), the record's mode."""
    for role, staged in sorted(files.items()):
        entry = manifest["files"][role]
        temporary = entry["path"] + ".ab"
        shutil.copyfile(staged, temporary)
        os.chmod(temporary, entry["mode"])
        os.replace(temporary, entry["path"])


def key_of(entry):
    return engine_auth.key_of(
        argparse.Namespace(**{k: entry.get(k) for k in ("api_key_env_file", "api_key_var")})
    )


def measure(entry, bench, repeats=None):
    """The benchmark of the server ``entry`` names: (its summary, its speculation or None)."""
    key = key_of(entry)
    records = ab_bench.bench(
        entry["base"] + "/v1/chat/completions",
        entry["served_name"],
        bench["prompts"],
        bench["max_tokens"],
        repeats or bench["repeats"],
        bench["warmup"],
        bench["timeout"],
        key,
    )
    spec = speculation.of_server_info(decode_check.server_info(entry["base"], key=key))
    return ab_bench.summary(records), spec


def trial(plan, entry, manifest):
    """One profile deployed, gated and benchmarked: its row of the result."""
    row = {"profile": entry["profile"], "cause": None}
    started = time.monotonic()
    say("%s: its files, restart, gate" % entry["profile"])
    try:
        install(entry["files"], manifest)
    except OSError as exc:
        row["cause"] = "installing its files: %s" % exc
        return row
    ok, code, cause = restarted((plan["reload"], "daemon-reload"), entry)
    if not ok:
        row.update(cause=cause, status=code, wall_s=round(time.monotonic() - started, 1))
        say("%s failed: %s" % (entry["profile"], cause))
        return row
    row["restart_s"] = round(time.monotonic() - started, 1)
    benched = time.monotonic()
    say("%s: benchmark" % entry["profile"])
    try:
        row["bench"], row["speculation"] = measure(entry, plan["bench"])
    except Stopped:
        raise
    except Exception as exc:  # noqa: BLE001 (decode_rate.MeasureError, OSError: a server that broke)
        row.update(cause="benchmark: %s" % exc, status=status.DECODE_UNMEASURED)
    row["bench_s"] = round(time.monotonic() - benched, 1)
    row["wall_s"] = round(time.monotonic() - started, 1)
    if row.get("bench"):
        say("%s: %.1f tok/s ±%.1f" % (entry["profile"], row["bench"]["decode_tok_s"], row["bench"]["spread"]))
    return row


def ordered(plan):
    """The trials, the own profile last (its files then need no restart to be home)."""
    trials = plan["trials"]
    return [t for t in trials if t["profile"] != plan["own"]] + [
        t for t in trials if t["profile"] == plan["own"]
    ]


def reference(plan, rows):
    """What the own profile served before: (figure, spread, whose) of its trial, else of the
    last known good (the decode check's history)."""
    own = next((r for r in rows if r["profile"] == plan["own"] and r.get("bench")), None)
    if own:
        return own["bench"]["decode_tok_s"], own["bench"]["spread"], "its trial"
    found = decode_check.baseline_of(decode_check.read_history(plan.get("history") or ""), plan["own"])
    return (found["decode_tok_s"], 0.0, "last known good") if found else (None, None, None)


def home(plan, rows, manifest):
    """The own profile back and serving; how it went."""
    last = rows[-1] if rows else None
    if not installed_differs(manifest) and (
        not rows or (last["profile"] == plan["own"] and not last["cause"])
    ):
        # Nothing was changed, or the own profile's trial was the last and left the record's
        # files: what serves is the own profile, as measured (or untouched).
        said = {"serving": True, "restarted": False}
        if last:
            said["decode_tok_s"] = last["bench"]["decode_tok_s"]
            found = decode_check.baseline_of(
                decode_check.read_history(plan.get("history") or ""), plan["own"]
            )
            if found:
                ok, tolerance = ab_bench.as_before(said["decode_tok_s"], found["decode_tok_s"], 0.0)
                said.update(
                    reference=found["decode_tok_s"],
                    reference_of="last known good",
                    tolerance=tolerance,
                    as_before=ok,
                )
        say("%s serves: no restart needed" % plan["own"])
        return said
    say("home: restoring %s" % plan["own"])
    own = plan["home"]
    ok, code, cause = restarted((plan["restore"], "restoring the last known good"), own)
    if not ok:
        return {"serving": False, "restarted": True, "cause": cause, "status": code}
    said = {"serving": True, "restarted": True}
    figure, spread, whose = reference(plan, rows)
    try:
        bench, _ = measure(own, plan["bench"], repeats=1)
    except Exception as exc:  # noqa: BLE001 (it serves; only the comparison is missing)
        said["cause"] = "measuring it again: %s" % exc
        return said
    said["decode_tok_s"] = bench["decode_tok_s"]
    if figure is not None:
        ok, tolerance = ab_bench.as_before(bench["decode_tok_s"], figure, spread)
        said.update(reference=figure, reference_of=whose, tolerance=tolerance, as_before=ok)
    return said


def write_json(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temporary = "%s.tmp-%d" % (path, os.getpid())
    with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(temporary, path)


def first_failure(rows, said):
    for row in rows:
        if row.get("cause"):
            return row.get("status") or status.FAILED_START, "%s: %s" % (row["profile"], row["cause"])
    if not said.get("serving"):
        return said.get("status") or status.FAILED_START, "home: %s" % said.get("cause")
    if not said.get("in_rotation"):
        return status.TIMEOUT, "not back in rotation: %s" % said.get("rotation_cause")
    if said.get("as_before") is False:  # home, in rotation, but slower than it served
        return (
            status.THROUGHPUT_REGRESSION,
            "home: %s serves at %.1f tok/s, not as before (%.1f ±%.1f, %s)"
            % (
                said.get("profile") or "its own profile",
                said["decode_tok_s"],
                said["reference"],
                said.get("tolerance") or 0.0,
                said.get("reference_of"),
            ),
        )
    return status.READY, None


def ab(plan):
    started = time.monotonic()
    details = {"own": plan["own"], "trials": [], "verdict": None, "home": {}}
    held = None
    if plan.get("lock"):
        held = lock.acquire(plan["lock"]["path"], plan["lock"]["wait"], plan["lock"]["holder"])
        if held is None:
            return result.emit(
                status.LOCKED, "the deploy lock is held: nothing changed", outcome="busy", **details
            )
    try:
        manifest = record.load(plan["last_good_dir"])
        if manifest is None:
            return result.emit(
                status.NO_LAST_GOOD, "no last known good here: deploy first", outcome="refused", **details
            )
        differs = installed_differs(manifest)
        unknown = sorted({role for t in plan["trials"] for role in t["files"]} - set(manifest["files"]))
        if differs or unknown:
            why = (
                "the installed %s differ from the last known good's: deploy the node's profile first"
                % ", ".join(differs)
                if differs
                else "the last known good has no %s" % ", ".join(unknown)
            )
            return result.emit(
                status.PREFLIGHT_FAILED, why + "; nothing changed", outcome="refused", **details
            )
        return run_trials(plan, manifest, details, started)
    finally:
        if held is not None:
            lock.release(held)


def run_trials(plan, manifest, details, started):
    rows = details["trials"]
    stopped = current = None
    try:
        ok, found, cause = step(plan["out"], "out of rotation")
        details["rotation"] = found.get("rotation")
        if not ok or found.get("outcome") != "out":  # nothing was taken out, nothing changed
            code = found.get("status") or status.PREFLIGHT_FAILED
            return result.emit(code, cause, outcome="refused", **details)
        for entry in ordered(plan):
            current = entry["profile"]
            rows.append(trial(plan, entry, manifest))
    except Stopped as exc:
        stopped = str(exc)
    except Exception as exc:  # noqa: BLE001 (whatever broke, the node goes home)
        stopped = "failed: %s: %s" % (type(exc).__name__, exc)
    if stopped and current and current not in [row["profile"] for row in rows]:
        rows.append({"profile": current, "cause": "interrupted: " + stopped, "status": status.UNEXPECTED})
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # home and back in rotation whatever comes
    if stopped:
        say("%s: going home" % stopped)
    said = home(plan, rows, manifest)
    if said.get("serving"):
        ok, found, cause = step(plan["back"], "back in rotation")
        said.update(in_rotation=ok, rotation_cause=cause)
    else:
        said["in_rotation"] = False
    details["home"] = said
    order = [t["profile"] for t in plan["trials"]]
    rows.sort(key=lambda r: order.index(r["profile"]))
    details["verdict"] = ab_bench.verdict(rows)
    details["wall_s"] = round(time.monotonic() - started, 1)
    code, cause = first_failure(rows, said)
    if stopped:
        code, cause = status.UNEXPECTED, stopped + (("; " + cause) if cause else "")
    details["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for line in ab_bench.table(details):
        say(line)
    try:
        write_json(plan["result_json"], dict(details, status=code, cause=cause))
    except OSError as exc:
        say("cannot keep the result in %s: %s" % (plan["result_json"], exc))
    return result.emit(code, cause, outcome="ab", **details)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="action", required=True)
    run = sub.add_parser("run", help="the A/B of the plan's profiles")
    run.add_argument("--plan-json", required=True, help="the plan the controller staged (0600)")
    args = parser.parse_args(argv)
    with open(args.plan_json) as f:
        plan = json.load(f)
    signal.signal(signal.SIGTERM, _stopped)
    try:
        return ab(plan)
    finally:  # the staged files hold the profiles' secrets: gone however the A/B ended
        shutil.rmtree(plan.get("stage") or "", ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
