"""The GPU side of `bench/real_engine.py gpu`: each promise the deploy makes about the engine,
proved against a running server with the project's own node scripts, as staged by `prepare`
(.sgl-bundle/deploy/: after = this tree's sglang_deploy/node, before = 575ddb1's, and per
engine the rendered hook, env file, argv and expected worker variables).

Every step has a time budget taken from the run's whole budget (--budget), so the run ends in
time whatever the engine does; whatever happens, the servers' process groups are killed and
the report is written. Standard library only.
"""

import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from . import gpu_run, report
from .server import Server, cmdlines_holding, port_free, timed_get

BAD_FLAG, BAD_FLAG_MEANT = ["--mem-fraction", "0.5"], "--mem-fraction-static"
RESERVE_AFTER_GATE_S = 120  # workers, decode, stop and the crash start after the first gate
CRASH_GATE_S, CRASH_MIN_S = 180, 45
HTTP_ROUNDS, HTTP_TIMEOUT_S = 3, 10
OUT_FILE_LIMIT = 16 * 2**20  # what one file under $OUT may be to come back from the GPU machine
TAIL = 15


class Run:
    def __init__(self, engine_name, budget_s):
        self.t0 = time.monotonic()
        self.budget_s = budget_s
        self.results = {"engine": engine_name, "steps": {}, "facts": {}, "skipped": {}, "notes": []}
        self.servers = []
        self.expect = dict(gpu_run.EXPECT[engine_name], env={}, bad_flag="", bad_flag_meant="")

    def left(self):
        return self.budget_s - (time.monotonic() - self.t0)

    def say(self, text):
        print("[%6.1fs] %s" % (time.monotonic() - self.t0, text), flush=True)

    def skip(self, keys, why):
        for key in keys:
            self.results["skipped"].setdefault(key, why)
        self.say("not run (%s): %s" % (", ".join(keys), why))

    def script(self, name, argv, timeout, env=None):
        """Run one of our scripts: its output echoed as it comes, its result line kept."""
        timeout = max(1.0, min(timeout, self.left()))
        self.say("%s: %s" % (name, " ".join(str(a) for a in argv[:4]) + " ..."))
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [str(a) for a in argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        lines = []

        def read():
            for line in proc.stdout:
                lines.append(line.rstrip("\n"))
                if not line.startswith("{"):
                    print("    " + line.rstrip("\n"), flush=True)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            rc, timed_out = proc.wait(timeout), False
        except subprocess.TimeoutExpired:
            proc.kill()
            rc, timed_out = proc.wait(), True
        reader.join(5)
        step = {
            "argv": [str(a) for a in argv],
            "rc": rc,
            "elapsed_s": round(time.monotonic() - t0, 2),
            "timed_out": timed_out,
            "result": report.result_line("\n".join(lines)),
            "output_tail": [line for line in lines if not line.startswith("{")][-TAIL:],
        }
        self.results["steps"][name] = step
        res = step["result"] or {}
        self.say(
            "%s: %s%s in %.1f s"
            % (name, res.get("result"), " (timed out)" if timed_out else "", step["elapsed_s"])
        )
        return step

    def start(self, engine, argv, env, log):
        server = Server(engine.python, argv, env, str(log), cwd=str(log.parent))
        self.servers.append(server)
        self.say("server started: pid %d, log %s" % (server.pid, log))
        return server

    def cleanup(self):
        for server in self.servers:
            server.kill()


def with_model_path(argv, path):
    """The profile's argv with the model directory this machine has (the profile's is a placeholder)."""
    argv = list(argv)
    argv[argv.index("--model-path") + 1] = path
    return argv


def with_option(args, flag, value):
    args = list(args)
    args[args.index(flag) + 1] = value
    return args


def mismatch_of(hook_vars):
    """(variable, another value) for the negative workers' check."""
    var = "NCCL_ALGO" if "NCCL_ALGO" in hook_vars else sorted(hook_vars)[0]
    return var, "Tree" if hook_vars[var] != "Tree" else "Ring"


def records_facts(directory):
    """The records the hook wrote: how many, and the titles of their live processes."""
    titles = []
    names = (
        sorted(n for n in os.listdir(directory) if n.endswith(".json")) if os.path.isdir(directory) else []
    )
    for name in names:
        try:
            with open("/proc/%s/cmdline" % name.split(".")[0], "rb") as f:
                titles.append(f.read().split(b"\0")[0].decode("utf-8", "replace").strip() or "?")
        except OSError:
            titles.append("(ended)")
    return len(names), titles


def flow(run, engine, repo, bundle, work):
    res = run.results
    stage = Path(bundle) / "deploy"
    after, before, staged = stage / "after", stage / "before", stage / engine.name
    plan = json.loads((staged / "plan.json").read_text())
    hook_vars = json.loads((staged / "hook_vars.json").read_text())
    argv = with_model_path(json.loads((staged / "argv.json").read_text()), engine.model_path)
    env_vars = report.parse_env_file((staged / plan["env_file"]).read_text())
    expect = dict(gpu_run.EXPECT[engine.name], env=hook_vars, bad_flag=" ".join(BAD_FLAG))
    expect.update(bad_flag_meant=BAD_FLAG_MEANT)
    expect["mismatch_var"], expect["mismatch_value"] = mismatch_of(hook_vars)
    run.expect = expect  # judged by, whatever happens next
    res.update(profile=plan["profile"], argv=argv, rendered_from=plan.get("rendered_from"))
    py = sys.executable  # our scripts run on the system's python3, as on a node

    hook = gpu_run.install_hook(engine, staged, plan["hook_module"])
    res["facts"]["hook"] = hook
    run.say(
        "hook: %s.pth in %s, loaded at start: %s" % (hook["module"], hook["site_packages"], hook["loaded"])
    )

    # a. preflight, the good argv and a bad flag, side by side (each imports the engine's parser)
    pre = [
        engine.python,
        after / "preflight.py",
        "--unit",
        plan["unit"],
        "--gpus-needed",
        plan["gpus_needed"],
    ]
    pre += ["--disk-path", repo]
    jobs = [
        threading.Thread(
            target=run.script, args=(name, pre + ["--argv-json", json.dumps(a)], 240, engine.env)
        )
        for name, a in (("preflight", argv), ("preflight_bad_flag", argv + BAD_FLAG))
    ]
    for job in jobs:
        job.start()
    for job in jobs:
        job.join()

    # b. the server, as the unit starts it: the env file's variables, the hook's records directory
    # (the unit's runtime directory), the secret server arguments written there by ExecStartPre=
    records = Path(tempfile.mkdtemp(prefix="records-", dir=work))
    os.chmod(records, 0o700)
    launch_env = report.launch_environment(engine.env, env_vars, plan["records_var"], str(records))
    key = env_vars.get(plan.get("key_var") or "")
    if plan.get("secret_args"):
        config = records / "secret-args.yaml"
        pre = [a.replace("@SCRIPTS@", str(after)).replace("@RUN@", str(records)) for a in plan["secret_args"]]
        run.script("secret_args", [py] + pre[1:], 30, env=launch_env)
        argv = with_option(argv, "--config", str(config))
    envfile = str(staged / plan["env_file"])
    plan["gate_args"] = [a.replace("@ENVFILE@", envfile) for a in plan["gate_args"]]
    log = Path(work) / "server.log"
    server = run.start(engine, argv, launch_env, log)

    # c. the gate
    gate_s = min(float(plan["gate_timeout_s"]), run.left() - RESERVE_AFTER_GATE_S)
    gate = [py, after / "gate.py", "--pid", server.pid, "--log", log]
    gate += with_option(plan["gate_args"], "--timeout", "%.0f" % max(gate_s, 10))
    ready = run.script("gate", gate, gate_s + 30)["result"] or {}
    hook["records"], hook["titles"] = records_facts(records)
    if ready.get("status") != report.READY:
        run.skip(["d1", "d2", "d3", "f", "g", "h"], "the server did not become ready")
        server.kill()
    else:
        # d. the workers' environment: new check, old check, new check against a changed value
        expect_json = json.dumps(hook_vars, sort_keys=True)
        workers = [py, after / "workers.py", "--pid", server.pid, "--records", records, "--json"]
        run.script("workers_after", workers + ["--expect-json", expect_json], 60)
        old = [py, before / "workers.py", "--pid", server.pid, "--unit", plan["unit"], "--json"]
        run.script("workers_before", old + ["--expect-json", expect_json], 60)
        changed = dict(hook_vars, **{expect["mismatch_var"]: expect["mismatch_value"]})
        run.script("workers_mismatch", workers + ["--expect-json", json.dumps(changed, sort_keys=True)], 60)
        # f. the decode check, its history and last known good in this run's own directory
        state = Path(work) / "state"
        decode = [
            a.replace("@SCRIPTS@", str(after)).replace("@STATE@", str(state)).replace("@ENVFILE@", envfile)
            for a in plan["decode_check"]
        ]
        run.script("decode_check", [py] + decode[1:], 120)
        old_decode = [a.replace(str(after), str(before)) for a in without_option(decode[1:], "--host")]
        for flag in ("--api-key-env-file", "--api-key-var"):  # 575ddb1's check has no key
            old_decode = without_option(old_decode, flag)
        old_decode = with_option(old_decode, "--history", str(state / "before-history.jsonl"))
        run.script("decode_check_before", [py] + old_decode, 120)
        # g. /health and /ping, as our probes ask (with the key, where there is one)
        auth = {"Authorization": "Bearer " + key} if key else None
        res["facts"]["http"] = {
            path: [
                timed_get(plan["probe_host"], plan["port"], path, HTTP_TIMEOUT_S, auth)
                for _ in range(HTTP_ROUNDS)
            ]
            for path in ("/health", "/ping")
        }
        run.say("http: %s" % res["facts"]["http"])
        # k. the key: asked for, and on no command line of the machine
        if key:
            res["facts"]["key"] = {
                "v1_models_without": timed_get(
                    plan["probe_host"], plan["port"], "/v1/models", HTTP_TIMEOUT_S
                )[0],
                "v1_models_with": timed_get(
                    plan["probe_host"], plan["port"], "/v1/models", HTTP_TIMEOUT_S, auth
                )[0],
                "cmdlines": len(cmdlines_holding(key)),
                "config_mode": oct(os.stat(config).st_mode & 0o777),
            }
        # h. stop: SIGTERM to the launcher
        stop = server.stop(min(plan["timeout_stop_sec"], max(run.left() - 30, 10)))
        stop.update(
            port_free=port_free(plan["probe_host"], plan["port"]), timeout_stop_sec=plan["timeout_stop_sec"]
        )
        res["facts"]["stop"] = stop
        run.say("stop: %s" % stop)
    if key and "key" in res["facts"]:  # ... and in no log or output of ours (the run's end)
        res["facts"]["key"]["in_server_log"] = server.log_text().count(key)
        res["facts"]["key"]["in_our_outputs"] = json.dumps(res["steps"]).count(key)
    elif not key:
        res["facts"]["key"] = {"applies": False}
    # e. NCCL's own lines in the log (NCCL_DEBUG=INFO came from the env file and the hook only)
    res["facts"]["nccl"] = dict(
        report.nccl_lines(server.log_text().splitlines()), simulated=engine.name == "standin"
    )

    # i. a start that dies
    if run.left() < CRASH_MIN_S:
        run.skip(["i"], "%.0f s left of the run's budget" % run.left())
        return
    crash_records = Path(tempfile.mkdtemp(prefix="records-crash-", dir=work))
    crash_env = dict(launch_env, **expect["crash_env"])
    crash_env[plan["records_var"]] = str(crash_records)
    crash_log = Path(work) / "crash.log"
    crashing = run.start(engine, argv + expect["crash_args"], crash_env, crash_log)
    crash_s = min(CRASH_GATE_S, run.left() - 15)
    gate = [py, after / "gate.py", "--pid", crashing.pid, "--log", crash_log]
    gate += with_option(plan["gate_args"], "--timeout", "%.0f" % crash_s)
    run.script("crash_gate", gate, crash_s + 20)
    verdict_at = time.monotonic()
    res["facts"]["crash"] = {
        "death_to_verdict_s": round(verdict_at - crashing.died_at, 2) if crashing.died_at else None,
        "launcher_alive_at_verdict": crashing.died_at is None,
    }
    crashing.kill()


def without_option(args, flag):
    """``args`` without ``flag`` and its value."""
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == flag:
            skip = True
        else:
            out.append(arg)
    return out


def write_outputs(run, expect, out, work):
    res = run.results
    res["run_s"] = round(time.monotonic() - run.t0, 1)
    rows = report.verdicts(res, expect)
    date = datetime.date.today().isoformat()
    prefix = "real" if res["engine"] == "real" else "standin"
    table = report.render_table(res, expect, rows, date)
    variant = "" if res.get("profile") in (None, "tiny-llama", "tiny-llama-standin") else "-" + res["profile"]
    (out / ("%s-sglang-%s%s.txt" % (prefix, date, variant))).write_text(table)
    res["verdicts"] = [dict(zip(("id", "promise", "verdict", "evidence"), row)) for row in rows]
    res["expect"] = expect
    (out / "real-engine.json").write_text(json.dumps(res, indent=1, sort_keys=True, default=str) + "\n")
    for name in ("server.log", "crash.log"):
        if (Path(work) / name).is_file():
            text = (Path(work) / name).read_bytes().decode("utf-8", "replace")
            (out / name).write_text(report.trim_log(text))
    print(table, flush=True)
    return rows


def main(args, repo):
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run = Run(args.engine, args.budget)
    bundle = Path(repo) / args.bundle
    work = tempfile.mkdtemp(prefix="real-engine-")
    engine = None
    try:
        if args.engine == "real":
            engine = gpu_run.real_engine(repo, bundle, run.say)
        else:
            engine = gpu_run.standin_engine(repo, run.say)
        run.results.update(
            engine_version=engine.versions.get("sglang"),
            torch_version=engine.versions.get("torch"),
            versions=engine.versions,
            gpu=engine.gpu,
        )
        run.results["notes"] += engine.notes
        run.say("engine: %s; GPU: %s" % (engine.versions, engine.gpu or "none"))
        flow(run, engine, repo, bundle, work)
    except gpu_run.SetupError as exc:
        run.results["notes"].append("set-up failed: %s" % exc)
        run.skip([p[0] for p in report.PROMISES], "the engine could not be set up: %s" % exc)
    except Exception as exc:  # the report is written all the same: what was proved until then
        traceback.print_exc()
        run.results["notes"].append("the run stopped: %s: %s" % (type(exc).__name__, exc))
    finally:
        run.cleanup()
    if engine is not None and args.engine == "real":
        size = gpu_run.jit_cache(engine, out)
        if size is not None:
            run.results["notes"].append(
                "jit-cache.tgz: %.1f MiB (into .sgl-bundle/ for faster starts next time)%s"
                % (size / 2**20, "; too large to come back from $OUT" if size > OUT_FILE_LIMIT else "")
            )
    run.results["notes"].append(gpu_run.sysconfig_note())
    rows = write_outputs(run, run.expect, out, work)
    shutil.rmtree(work, ignore_errors=True)
    return 0 if report.passed(rows) else 1
