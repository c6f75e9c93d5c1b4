"""Proof, on a real GPU, that the profile's NCCL variables reach NCCL inside the spawned workers.

The chain the incident broke: profile -> rendered env file -> the server's environment ->
spawned scheduler processes -> NCCL. One run walks it end to end, without systemd:

1. positive run: the `sandbox` profile with `tp-size` = every local GPU (--tp; 1 when
   simulated) plus NCCL_DEBUG=INFO,
   NCCL_DEBUG_SUBSYS=INIT,ENV (and SGLANG_STANDIN_REAL_NCCL=1 with --real-nccl) is rendered
   with our renderer, read back with systemd's EnvironmentFile= rules, and the stand-in is
   started as the unit would start it: `python -m sglang.launch_server <profile argv>` in an
   environment made ONLY of that file plus PATH, PYTHONUNBUFFERED=1 (the unit's own
   Environment=) and PYTHONPATH for the stand-in (what the venv install would give). Nothing
   is inherited from the calling shell; the profile's start-up hook is importable (a
   sitecustomize.py beside it on PYTHONPATH: no venv here) and records each process's
   environment. Then: the readiness gate (gate.py --pid/--log), every scheduler's environment
   as its hook recorded it (workers.py --pid --records: a titled process's /proc/<pid>/environ
   is blank), NCCL's own "set by environment" lines
   (nccl_confirm, all six on every rank; with one rank NCCL_PROTO/NCCL_ALGO are not logged:
   they need >= 2 ranks), the
   worker PIDs holding GPU memory (nvidia-smi), and none after a SIGTERM stop.
2. negative control: the same start with the six NCCL tuning variables NOT in the env file,
   only exported in this (calling) process, as an operator's shell would: systemd would not
   pass them, and neither does this start. NCCL must not report them, and the verification
   must FAIL because they are missing; that failure is the expected outcome.

    python3 bench/gpu_env_proof.py --real-nccl      # GPU box: torch with CUDA, nvidia-smi
    python3 bench/gpu_env_proof.py --simulated      # anywhere (CI): same flow, no GPU, no NCCL

With --simulated the stand-in prints NCCL's lines itself, from its own environment, in NCCL's
format; everything the report says about NCCL is then labelled "simulated".
Exit 0 only if the positive run passed and the negative control failed as expected.
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sglang_deploy.node.lib import compute_apps, env_records, procs, status  # noqa: E402
from sglang_deploy.node.lib.envfile import parse_env_file  # noqa: E402
from sglang_deploy.plan.commands import gate_args  # noqa: E402
from sglang_deploy.plan.render import HOOK_MODULE, render_env_file, render_hook_module  # noqa: E402
from sglang_deploy.profile.schema import load_profile  # noqa: E402
from sglang_deploy.verify import gpu_health, nccl_confirm  # noqa: E402

NODE = REPO / "sglang_deploy" / "node"
STANDIN = REPO / "engine-standin"

PROFILE = "sandbox"
TUNING = ("NCCL_PROTO", "NCCL_ALGO", "NCCL_P2P_LEVEL", "NCCL_MAX_NCHANNELS", "NCCL_BUFFSIZE", "NCCL_NTHREADS")
ONE_RANK_LOGGED = ("NCCL_P2P_LEVEL", "NCCL_MAX_NCHANNELS", "NCCL_BUFFSIZE", "NCCL_NTHREADS")
DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV"}
# systemd's default PATH for services; the unit sets PYTHONUNBUFFERED=1 itself (Environment=).
SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
UNIT_ENV = {"PYTHONUNBUFFERED": "1"}
# What SGLang's launcher (and the stand-in) sets in its own environment before spawning.
SGLANG_SETS = frozenset(
    {
        "NCCL_CUMEM_ENABLE",
        "NCCL_NVLS_ENABLE",
        "CUDA_DEVICE_MAX_CONNECTIONS",
        "TRTLLM_ENABLE_PDL",
        "CUTE_DSL_LOG_LEVEL",
        "CUTE_DSL_LOG_TO_CONSOLE",
        "SGLANG_RUN_ID",
        "PROMETHEUS_MULTIPROC_DIR",
    }
)
WORKERS_CHECK = "worker environment (start-up hook records)"
TINY_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": 512,
    "vocab_size": 1000,
    "torch_dtype": "float16",
}
MEMORY_SLACK_MIB = 64  # fallback (no PIDs from nvidia-smi): "released" = back within this of before
_VERSION_LINE = re.compile(r"NCCL INFO NCCL version (\S+)")
# Logged by NCCL once a communicator is set up (src/init.cc); the stand-in does not print it.
_CHANNELS_LINE = re.compile(r"(?:^|[\s\]])[^\s:\[\]]+:(\d+):\d+ \[[^\]]*\] NCCL INFO (\d+) coll channels,")


@dataclass
class Result:
    name: str
    ok: bool
    detail: str = ""
    lines: list[str] = field(default_factory=list)
    skipped: bool = False  # could not look here (no GPU): not a failure, never a pass

    def render(self, expect_ok=True) -> list[str]:
        if self.skipped:
            verdict = "SKIP"
        elif expect_ok:
            verdict = "PASS" if self.ok else "FAIL"
        else:
            verdict = "FAILED AS EXPECTED" if self.ok else "UNEXPECTED"
        return ["  [%s] %s%s" % (verdict, self.name, ": " + self.detail if self.detail else "")] + [
            "      " + line for line in self.lines
        ]


# ------------------------------------------------------------------------- pure pieces


def proof_profile(model_dir: str, port: int, real_nccl: bool, with_tuning: bool = True, tp: int = 1):
    """The sandbox profile for `tp` GPUs (one scheduler, one NCCL rank each), with NCCL's debug
    output on; without the six tuning variables for the negative control. Returns (profile, the
    tuning values it was loaded with)."""
    if tp < 1:
        raise ValueError("tp-size must be at least 1 (got %d)" % tp)
    env = dict(DEBUG_ENV)
    if real_nccl:
        env["SGLANG_STANDIN_REAL_NCCL"] = "1"
    overrides = {
        "server_args": {"tp-size": tp},
        "model": {"path": model_dir},
        "service": {"host": "127.0.0.1", "port": port},
        "env": env,
    }
    profile = load_profile(PROFILE, overrides=overrides)
    tuning = {k: profile.env[k] for k in TUNING if k in profile.env}
    if not with_tuning:
        profile = profile.model_copy(
            update={"env": {k: v for k, v in profile.env.items() if k not in TUNING}}
        )
    return profile, tuning


def proof_tp(asked: int | None, gpus: int) -> int:
    """The tensor-parallel size of the proof: --tp if given, else every local GPU (at least 1).
    With >= 2 ranks NCCL also logs NCCL_PROTO and NCCL_ALGO, so all six are confirmed."""
    if asked is not None:
        if asked < 1:
            raise ValueError("--tp must be at least 1 (got %d)" % asked)
        if gpus and asked > gpus:
            raise ValueError("--tp %d: only %d GPU(s) here" % (asked, gpus))
        return asked
    return max(1, gpus)


def server_environment(env_file_vars: dict[str, str], pass_env: dict[str, str] = None) -> dict[str, str]:
    """The environment systemd gives ExecStart=: PATH, the unit's Environment=, then the env
    file on top; plus PYTHONPATH standing in for the venv install, and any host-runtime
    variables explicitly passed. Nothing else from the calling process."""
    env = {"PATH": SYSTEMD_PATH, "PYTHONPATH": str(STANDIN)}
    env.update(UNIT_ENV)
    env.update(pass_env or {})
    env.update(env_file_vars)
    return env


def inherited_extras(worker_names, server_env: dict[str, str]) -> list[str]:
    """Variables (by name, as the hook records them) in a worker that the server was not given
    and neither SGLang nor the Python interpreter sets itself (PEP 538: with no locale set,
    Python coerces the C locale and exports LC_CTYPE to its children)."""
    extra = set(worker_names) - set(server_env) - SGLANG_SETS
    if not {"LC_ALL", "LC_CTYPE", "LANG"} & set(server_env):
        extra.discard("LC_CTYPE")
    return sorted(extra)


def nccl_versions(lines: list[str]) -> list[str]:
    return sorted({m.group(1) for m in map(_VERSION_LINE.search, lines) if m})


def key_nccl_lines(lines: list[str]) -> list[str]:
    return [
        line
        for line in lines
        if "NCCL INFO" in line
        and ("set by environment" in line or _VERSION_LINE.search(line) or _CHANNELS_LINE.search(line))
    ]


def coll_channels(lines: list[str]) -> dict[int, int]:
    """{pid: collective channels NCCL set up} from its '<N> coll channels, ...' lines (largest)."""
    found: dict[int, int] = {}
    for line in lines:
        m = _CHANNELS_LINE.search(line)
        if m:
            found[int(m.group(1))] = max(found.get(int(m.group(1)), 0), int(m.group(2)))
    return found


def check_channels(channels: dict[int, int], max_nchannels: str | None, simulated: bool = False) -> Result:
    """NCCL acted on NCCL_MAX_NCHANNELS, not only logged it: no rank set up more channels."""
    name = "NCCL behaviour (channels <= NCCL_MAX_NCHANNELS)"
    if not max_nchannels:
        return Result(name, True, "not checked (the profile sets no NCCL_MAX_NCHANNELS)", skipped=True)
    if not channels:
        return Result(
            name,
            True,
            "not checked (%s)"
            % (
                "simulated: the stand-in does not print NCCL's channel count"
                if simulated
                else "NCCL logged no '<N> coll channels' line"
            ),
            skipped=True,
        )
    limit = int(max_nchannels, 0)
    over = {pid: n for pid, n in channels.items() if n > limit}
    detail = ", ".join("pid %d: %d coll channels" % kv for kv in sorted(channels.items()))
    return Result(name, not over, "%s (NCCL_MAX_NCHANNELS=%s)" % (detail, max_nchannels))


def check_nccl_positive(report: nccl_confirm.Report, worker_pids: list[int], tp: int) -> Result:
    """Every rank confirms the variables NCCL logs with one rank; PROTO/ALGO need >= 2 ranks."""
    problems = list(report.failures)
    ranks = report.ranks
    if len(ranks) != tp:
        problems.append("%d ranks logged, expected %d" % (len(ranks), tp))
    for rank in ranks:
        states = {v.var: v.state for v in rank.vars}
        must = ONE_RANK_LOGGED if report.single_rank else TUNING
        for var in must:
            if var in states and states[var] != nccl_confirm.CONFIRMED:
                problems.append("%s %s: %s" % (rank.rank.label, var, states[var]))
        if report.single_rank:
            for var in set(TUNING) - set(ONE_RANK_LOGGED):
                if var in states and states[var] != nccl_confirm.NEEDS_RANKS:
                    problems.append(
                        "%s %s: %s (expected: needs >= 2 ranks)" % (rank.rank.label, var, states[var])
                    )
        if worker_pids and rank.rank.pid not in worker_pids:
            problems.append("NCCL rank pid %d is not a scheduler pid %s" % (rank.rank.pid, worker_pids))
    confirmed = sorted({v.var for r in ranks for v in r.vars if v.state == nccl_confirm.CONFIRMED})
    detail = "%d rank(s); confirmed %s" % (len(ranks), ", ".join(confirmed) or "nothing")
    if problems:
        return Result("NCCL confirmation", False, detail + "; " + "; ".join(problems), report.lines())
    return Result("NCCL confirmation", True, detail + "; rank pid = scheduler pid", report.lines())


def check_nccl_negative(report: nccl_confirm.Report, tuning: dict[str, str], tp: int) -> Result:
    """Expected failure: NCCL ran with INFO output (ranks logged) but reports none of the
    tuning variables; confirm() fails and every failure is a missing variable."""
    logged = sorted({var for r in report.ranks for var in r.rank.values if var in tuning})
    reasons = []
    if len(report.ranks) != tp:
        reasons.append(
            "%d ranks logged NCCL lines, expected %d (NCCL_DEBUG=INFO did not work?)"
            % (len(report.ranks), tp)
        )
    if logged:
        reasons.append("NCCL reports %s although they were not in the env file" % ", ".join(logged))
    if report.ok:
        reasons.append("confirmation passed")
    wrong = [f for f in report.failures if "never logged" not in f and "not logged" not in f]
    if wrong:
        reasons.append("failed for another reason: " + "; ".join(wrong))
    not_logged = sorted({v.var for r in report.ranks for v in r.vars if v.state == nccl_confirm.NOT_LOGGED})
    others = sorted({var for r in report.ranks for var in r.rank.values if var not in tuning})
    detail = "verification failed: %s not logged by NCCL (NCCL's INFO output works: it logged %s)" % (
        ", ".join(not_logged),
        ", ".join(others) or "its version",
    )
    return Result("NCCL confirmation", not reasons, "; ".join(reasons) if reasons else detail, report.lines())


def check_workers_positive(report: dict) -> Result:
    lines = _worker_lines(report)
    n = len(report["workers"])
    if report["status"] == status.READY:
        return Result(
            WORKERS_CHECK,
            True,
            "%d scheduler(s), %d/%d variables each" % (n, len(report["expected"]), len(report["expected"])),
            lines,
        )
    return Result(
        WORKERS_CHECK,
        False,
        "%s %s" % (report["status_name"], report.get("message") or ""),
        lines,
    )


def check_workers_negative(report: dict, tuning: dict[str, str]) -> Result:
    """Expected failure: WORKER_ENV_MISMATCH, and the mismatches are exactly the tuning
    variables, each missing (not another value, not another variable)."""
    lines = _worker_lines(report)
    reasons = []
    if report["status"] != status.WORKER_ENV_MISMATCH:
        reasons.append("status %s, expected WORKER_ENV_MISMATCH" % report["status_name"])
    for worker in report["workers"]:
        missing = {m["var"] for m in worker["mismatches"] if m["actual"] is None}
        other = [m["var"] for m in worker["mismatches"] if m["actual"] is not None]
        if missing != set(tuning) or other:
            reasons.append(
                "pid %d: missing %s, other mismatches %s" % (worker["pid"], sorted(missing), other)
            )
    if not report["workers"]:
        reasons.append("no scheduler found")
    detail = "%s: %s missing in every scheduler" % (report["status_name"], ", ".join(tuning))
    return Result(
        WORKERS_CHECK,
        not reasons,
        "; ".join(reasons) if reasons else detail,
        lines,
    )


def _worker_lines(report: dict) -> list[str]:
    out = []
    for w in report["workers"]:
        bad = ", ".join(
            "%s %s" % (m["var"], "missing" if m["actual"] is None else "=%r" % m["actual"])
            for m in w["mismatches"]
        )
        out.append(
            "pid %d %s: %d/%d ok%s"
            % (
                w["pid"],
                w["title"],
                w["checked"] - len(w["mismatches"]),
                w["checked"],
                " (" + bad + ")" if bad else "",
            )
        )
    return out


def parse_memory_used(text: str) -> dict[int, int]:
    """`nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits` -> {index: MiB}."""
    used = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == 2 and cells[0].isdigit() and re.fullmatch(r"\d+", cells[1].replace(" MiB", "")):
            used[int(cells[0])] = int(cells[1].replace(" MiB", ""))
    return used


def check_memory_held(apps, worker_pids, before_mib, during_mib) -> Result:
    """Workers hold GPU memory while up: by PID, or (no PIDs visible) by total memory used."""
    held = {a.pid: a.used_memory_mib for a in apps if a.pid in worker_pids}
    if apps or not worker_pids:
        missing = [p for p in worker_pids if not held.get(p)]
        detail = ", ".join("pid %d %s MiB" % (p, held[p]) for p in sorted(held)) or "no worker pid listed"
        listed = "compute apps: %s" % (
            ", ".join("%d (%s MiB)" % (a.pid, a.used_memory_mib) for a in apps) or "none"
        )
        return Result("GPU memory held by the workers", not missing, detail, [listed])
    grew = (during_mib or 0) - (before_mib or 0)
    return Result(
        "GPU memory held by the workers",
        grew > 0,
        "nvidia-smi lists no compute PIDs here (container/VM); total memory used before %s MiB, "
        "during %s MiB (+%d MiB)" % (before_mib, during_mib, grew),
    )


def check_memory_released(apps, worker_pids, before_mib, after_mib, pids_visible) -> Result:
    if pids_visible:
        left = [a for a in apps if a.pid in worker_pids]
        return Result(
            "GPU memory released after stop",
            not left,
            "no worker pid holds GPU memory"
            if not left
            else "still held: " + ", ".join("pid %d %s MiB" % (a.pid, a.used_memory_mib) for a in left),
        )
    back = after_mib is not None and before_mib is not None and after_mib <= before_mib + MEMORY_SLACK_MIB
    return Result(
        "GPU memory released after stop",
        back,
        "no PIDs visible; total memory used before %s MiB, after %s MiB" % (before_mib, after_mib),
    )


# ------------------------------------------------------------------------- effects


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def nvidia_smi(*args) -> str | None:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    proc = subprocess.run(
        [exe] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30
    )
    return proc.stdout if proc.returncode == 0 else None


class Gpu:
    """nvidia-smi snapshots; every method answers None when there is no nvidia-smi."""

    def __init__(self, enabled: bool):
        self.enabled = enabled and shutil.which("nvidia-smi") is not None

    def describe(self):
        text = (
            nvidia_smi("--query-gpu=index,name,memory.total,driver_version", "--format=csv,noheader,nounits")
            if self.enabled
            else None
        )
        return gpu_health.parse_gpus(text) if text else []

    def apps(self):
        text = nvidia_smi(*compute_apps.QUERY) if self.enabled else None
        return None if text is None else gpu_health.parse_compute_apps(text)

    def used_mib(self):
        text = (
            nvidia_smi("--query-gpu=index,memory.used", "--format=csv,noheader,nounits")
            if self.enabled
            else None
        )
        used = parse_memory_used(text) if text else {}
        return sum(used.values()) if used else None


def run_cmd(argv, env=None, timeout=60):
    return subprocess.run(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout, env=env
    )


def torch_versions(python: str, env: dict[str, str]) -> str:
    code = (
        "import torch; v = torch.cuda.nccl.version(); "
        "print(torch.__version__, '.'.join(map(str, v)) if isinstance(v, tuple) else v, "
        "torch.version.cuda, torch.cuda.is_available())"
    )
    try:
        proc = run_cmd([python, "-c", code], env=env, timeout=120)
    except subprocess.TimeoutExpired:
        return "torch: timed out"
    if proc.returncode != 0:
        return "torch: not importable (%s)" % (proc.stderr.strip().splitlines() or ["?"])[-1]
    try:
        torch_v, nccl_v, cuda_v, avail = proc.stdout.split()[-4:]
    except ValueError:
        return "torch: unexpected answer %r" % proc.stdout
    return "torch %s (CUDA %s, cuda available: %s), torch.cuda.nccl.version() %s" % (
        torch_v,
        cuda_v,
        avail,
        nccl_v,
    )


class Server:
    """The stand-in started the way the unit starts it; output to a log file."""

    def __init__(self, python, argv, env, log_path):
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [python, "-m", "sglang.launch_server"] + argv,
            env=env,
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.pid = self.proc.pid

    def lines(self) -> list[str]:
        return Path(self.log_path).read_text(errors="replace").splitlines()

    def stop(self, timeout=30.0):
        """SIGTERM, as systemd stops the unit; (exit status, seconds, leftover pids)."""
        tree = procs.descendants(self.pid)
        start = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            code = None
        deadline = time.monotonic() + 10
        left = [p for p in tree if procs.alive(p)]
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = [p for p in tree if procs.alive(p)]
        return code, time.monotonic() - start, left

    def kill(self):
        """Last resort on the way out: the process group this script started."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        self.log.close()


@dataclass
class Run:
    name: str
    results: list[Result] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)
    nccl_lines: list[str] = field(default_factory=list)
    versions: list[str] = field(default_factory=list)


def start_and_check(name, profile, expected_env, tuning, args, work, gpu, positive) -> Run:
    run = Run(name)
    env_text = render_env_file(profile, {})
    env_path = work / ("%s.env" % name)
    with os.fdopen(os.open(str(env_path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(env_text)  # 0600, like /etc/sglang/<service>.env
    parsed = parse_env_file(env_path.read_text())
    ok = parsed == profile.env_file_vars({})
    in_file = [k for k in TUNING if k in parsed]
    run.results.append(
        Result(
            "env file (our renderer, read back with systemd's rules)",
            ok,
            "%d variables; tuning variables in it: %s" % (len(parsed), ", ".join(in_file) or "none"),
        )
    )
    server_env = server_environment(parsed, args.pass_env)
    # The start-up hook as the deploy renders it, recording into a directory of this start.
    hook_dir, records = work / ("%s-hook" % name), work / ("%s-records" % name)
    hook_dir.mkdir()
    records.mkdir(mode=0o700)
    (hook_dir / ("%s.py" % HOOK_MODULE)).write_text(render_hook_module(profile))
    (hook_dir / "sitecustomize.py").write_text("import %s\n" % HOOK_MODULE)
    server_env["PYTHONPATH"] += ":%s" % hook_dir
    server_env[env_records.RECORDS_VAR] = str(records)
    from_shell = [k for k in TUNING if k in os.environ]
    run.facts.append("server environment: %s" % ", ".join(sorted(server_env)))
    if args.pass_env:
        run.facts.append(
            "carried from the calling environment (host runtime, --pass-env): %s"
            % ", ".join(sorted(args.pass_env))
        )
    run.facts.append(
        "calling process exports: %s"
        % (", ".join("%s=%s" % (k, os.environ[k]) for k in from_shell) or "none of the tuning variables")
    )
    other_nccl = sorted(
        k for k in os.environ if k.startswith("NCCL_") and k not in TUNING and k not in server_env
    )
    if other_nccl:
        run.facts.append(
            "other NCCL_* in the calling environment, not given to the server: %s"
            % ", ".join("%s=%s" % (k, os.environ[k]) for k in other_nccl)
        )

    before_mib = gpu.used_mib() if positive else None
    log_path = work / ("%s-server.log" % name)
    server = Server(args.python, profile.argv(), server_env, str(log_path))
    run.facts.append(
        "started pid %d: python -m sglang.launch_server %s" % (server.pid, " ".join(profile.argv()))
    )
    try:
        gate_json = work / ("%s-gate.json" % name)
        gate = run_cmd(
            [
                sys.executable,
                str(NODE / "gate.py"),
                "--pid",
                str(server.pid),
                "--log",
                str(log_path),
                *(str(arg) for arg in gate_args(profile)),
                "--host",
                profile.service.host,
                "--progress-every",
                "5",
                "--json",
                str(gate_json),
            ],
            timeout=profile.readiness.timeout_s + 60,
        )
        gate_lines = gate.stdout.strip().splitlines()
        run.results.append(
            Result(
                "readiness gate (gate.py --pid --log)",
                gate.returncode == status.READY,
                gate_lines[-1] if gate_lines else "no output: %s" % gate.stderr.strip(),
                [] if gate.returncode == status.READY else gate_lines[-15:],
            )
        )
        if gate.returncode != status.READY:
            run.nccl_lines = key_nccl_lines(server.lines())
            return run

        workers = run_cmd(
            [
                sys.executable,
                str(NODE / "workers.py"),
                "--unit",
                "(plain process)",
                "--pid",
                str(server.pid),
                "--records",
                str(records),
                "--expect-json",
                json.dumps(expected_env),
                "--json",
            ]
        )
        report = json.loads(workers.stdout)
        worker_pids = [w["pid"] for w in report["workers"]]
        run.results.append(
            check_workers_positive(report) if positive else check_workers_negative(report, tuning)
        )

        extras, coerced = {}, False
        for pid in worker_pids:
            record = env_records.read_record(records, pid)
            worker_env = record.get("names", []) if record else []
            extra = inherited_extras(worker_env, server_env) if record else ["(no record of its environment)"]
            coerced |= "LC_CTYPE" in worker_env and "LC_CTYPE" not in extra and "LC_CTYPE" not in server_env
            if extra:
                extras[pid] = extra
        run.results.append(
            Result(
                "nothing inherited from the calling shell",
                not extras and bool(worker_pids),
                "every scheduler's environment = the server's environment + what SGLang sets "
                "itself%s" % (" (+ LC_CTYPE from Python's C-locale coercion, PEP 538)" if coerced else "")
                if not extras
                else "extra variables: %s" % extras,
            )
        )

        lines = server.lines()
        run.nccl_lines = key_nccl_lines(lines)
        run.versions = nccl_versions(lines)
        tp = profile.tp_size
        report = nccl_confirm.confirm(lines, tuning, ranks_expected=tp)
        run.results.append(
            check_nccl_positive(report, worker_pids, tp)
            if positive
            else check_nccl_negative(report, tuning, tp)
        )
        channels = coll_channels(lines)
        if positive:
            run.results.append(check_channels(channels, tuning.get("NCCL_MAX_NCHANNELS"), args.simulated))
        elif channels:
            run.facts.append(
                "NCCL set up %s without the env file's NCCL_MAX_NCHANNELS (its own choice)"
                % ", ".join("%d coll channels (pid %d)" % (n, pid) for pid, n in sorted(channels.items()))
            )

        pids_visible = False
        if positive:
            if gpu.enabled:
                apps, during_mib = gpu.apps() or [], gpu.used_mib()
                pids_visible = bool(apps)
                run.results.append(check_memory_held(apps, worker_pids, before_mib, during_mib))
            else:
                run.results.append(
                    Result(
                        "GPU memory held by the workers",
                        True,
                        "not checked (%s)"
                        % ("simulated: no GPU" if args.simulated else "nvidia-smi missing"),
                        skipped=True,
                    )
                )
        code, seconds, left = server.stop()
        run.results.append(
            Result(
                "SIGTERM stop",
                code == 0 and not left,
                "exit status %s in %.1fs; %s"
                % (code, seconds, "no process left" if not left else "still alive: %s" % left),
            )
        )
        if positive and gpu.enabled:
            deadline = time.monotonic() + 15
            while True:
                apps, after_mib = gpu.apps() or [], gpu.used_mib()
                result = check_memory_released(apps, worker_pids, before_mib, after_mib, pids_visible)
                if result.ok or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            run.results.append(result)
        return run
    finally:
        server.kill()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--real-nccl", action="store_true", help="GPU box: the schedulers run real NCCL")
    mode.add_argument(
        "--simulated", action="store_true", help="no GPU: the stand-in prints NCCL's lines itself"
    )
    p.add_argument(
        "--python",
        default=sys.executable,
        help="interpreter that runs the server (with torch for --real-nccl)",
    )
    p.add_argument(
        "--pass-env",
        action="append",
        default=[],
        metavar="NAME",
        help="carry this host-runtime variable (e.g. LD_LIBRARY_PATH) from the calling environment "
        "into the server's; never an NCCL_* variable",
    )
    p.add_argument(
        "--tp",
        type=int,
        help="tensor-parallel size: one rank per GPU; default every GPU "
        "nvidia-smi lists (--real-nccl), 1 (--simulated)",
    )
    p.add_argument("--keep", metavar="DIR", help="keep env files, server logs and gate summaries here")
    args = p.parse_args(argv)
    for name in args.pass_env:
        if name.startswith("NCCL_") or name in UNIT_ENV or name == "PATH":
            p.error(
                "--pass-env %s: only host-runtime variables; the proof is about NCCL_* reaching the "
                "server through the env file alone" % name
            )
    args.pass_env = {k: os.environ[k] for k in args.pass_env if k in os.environ}
    label = "REAL NCCL" if args.real_nccl else "SIMULATED (no GPU, no NCCL: the stand-in prints NCCL's lines)"
    sim = "" if args.real_nccl else "[simulated] "

    work = Path(args.keep or tempfile.mkdtemp(prefix="gpu-env-proof-"))
    work.mkdir(parents=True, exist_ok=True)
    model_dir = work / "tiny-standin"
    model_dir.mkdir(exist_ok=True)
    (model_dir / "config.json").write_text(json.dumps(TINY_CONFIG))
    gpu = Gpu(args.real_nccl)

    out = [
        "GPU environment proof: profile -> env file -> server -> spawned workers -> NCCL",
        "date: %s" % datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "mode: %s" % label,
        "host: %s, %s, Python %s (%s)"
        % (socket.gethostname(), platform.platform(), platform.python_version(), args.python),
    ]
    gpus = "; ".join(
        "%d %s, %s MiB, driver %s" % (g.index, g.name, g.memory_mib, g.driver) for g in gpu.describe()
    )
    out.append("GPU: %s" % (gpus or ("none found by nvidia-smi" if args.real_nccl else "none (simulated)")))
    if args.real_nccl:
        out.append(torch_versions(args.python, server_environment({}, args.pass_env)))
    else:
        out.append("torch: not used (simulated)")

    tp = proof_tp(args.tp, len(gpu.describe()) if args.real_nccl else 0)
    positive, tuning = proof_profile(str(model_dir), free_port(), args.real_nccl, with_tuning=True, tp=tp)
    expected_env = positive.env_file_vars({})
    out.append(
        "profile: %s (+ tp-size %d, NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,ENV%s); tuning: %s"
        % (
            positive.name,
            tp,
            ", SGLANG_STANDIN_REAL_NCCL=1" if args.real_nccl else "",
            " ".join("%s=%s" % kv for kv in tuning.items()),
        )
    )

    runs = []
    try:
        runs.append(start_and_check("positive", positive, expected_env, tuning, args, work, gpu, True))
        negative, _ = proof_profile(str(model_dir), free_port(), args.real_nccl, with_tuning=False, tp=tp)
        saved = {k: os.environ.get(k) for k in tuning}
        os.environ.update(tuning)  # "exported in the operator's shell"
        try:
            runs.append(start_and_check("negative", negative, expected_env, tuning, args, work, gpu, False))
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    pos_ok = all(r.ok for r in runs[0].results)
    neg_ok = len(runs) > 1 and all(r.ok for r in runs[1].results)
    titles = {
        "positive": "positive run: tuning in the env file",
        "negative": "negative control: tuning only exported in the calling shell, not in the env file",
    }
    for run in runs:
        out += ["", "== %s ==" % titles[run.name]]
        out += ["  " + fact for fact in run.facts]
        for result in run.results:
            expected_failure = run.name == "negative" and result.name in (
                WORKERS_CHECK,
                "NCCL confirmation",
            )
            out += result.render(expect_ok=not expected_failure)
        if run.versions:
            out.append("  %sNCCL version (from its log): %s" % (sim, ", ".join(run.versions)))
        out.append("  %skey NCCL lines:" % sim)
        out += ["    %s%s" % (sim, line) for line in run.nccl_lines] or ["    (none)"]
    out += [
        "",
        "result: %s"
        % (
            "PASS: the env file's NCCL variables reached NCCL in the spawned workers; the "
            "calling shell's did not"
            if pos_ok and neg_ok
            else "FAIL: positive run %s, negative control %s"
            % (
                "passed" if pos_ok else "FAILED",
                "failed as expected" if neg_ok else "did NOT fail as expected",
            )
        ),
        "mode: %s" % label,
    ]
    print("\n".join(out), flush=True)
    return 0 if pos_ok and neg_ok else 1


if __name__ == "__main__":
    sys.exit(main())
