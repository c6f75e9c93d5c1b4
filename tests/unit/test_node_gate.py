"""The readiness gate against fake systemctl/journalctl executables and a local HTTP server
that behaves like SGLang 0.5.23 (port closed, then /v1/models listing with /health and /ping
503 at once; once up, /ping 200 at once and /health 200 after its 1 s generation check)."""

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sglang_deploy.node.lib import http_probe, result, status, watch
from sglang_deploy.plan.commands import gate_args, gate_timings
from sglang_deploy.plan.host_plan import node_script_files
from sglang_deploy.profile.schema import Readiness, load_profile

NODE = Path(__file__).resolve().parents[2] / "sglang_deploy" / "node"


SETTLE_S = 0.5  # readiness.settle_s here: short, so that a ready start ends soon after ready


def gate_argv(target, port=1, served="x", timeout=20, json_path=None, extra=(), settle=SETTLE_S):
    """gate.py's command line for ``target`` (``--unit ...`` or ``--pid ... --log ...``), with
    the timings as the controller passes them (the profile's readiness defaults, ``timeout`` and
    ``settle`` apart), then the test's ``extra`` arguments (argparse: the last one given wins)."""
    argv = [
        sys.executable,
        str(NODE / "gate.py"),
        *target,
        "--port",
        str(port),
        "--served-name",
        served,
        *(str(arg) for arg in gate_timings(Readiness(timeout_s=timeout, settle_s=settle))),
    ]
    return argv + (["--json", str(json_path)] if json_path else []) + list(extra)


FAKE_SYSTEMCTL = """\
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "unit.json")) as f:
    state = json.load(f)
args = sys.argv[1:]
if args[0] != "show":
    sys.exit("fake systemctl: only show")
for i, arg in enumerate(args):
    if arg == "-p":
        print("%s=%s" % (args[i + 1], state.get(args[i + 1], "")))
"""

FAKE_JOURNALCTL = """\
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
args = sys.argv[1:]
with open(os.path.join(here, "journalctl.calls"), "a") as f:
    f.write(json.dumps(args) + "\\n")
after = int(args[args.index("--after-cursor") + 1][2:]) if "--after-cursor" in args else 0
with open(os.path.join(here, "journal.txt")) as f:
    text = f.read()
lines = text.split("\\n")[:-1]  # a line still being written has no newline yet
for n, line in enumerate(lines, 1):
    if n > after:
        mono, _, message = line.partition("\t")
        print(json.dumps({"__CURSOR": "s=%d" % n, "__MONOTONIC_TIMESTAMP": mono, "MESSAGE": message}))
"""


def write_exe(path, body):
    path.write_text("#!%s\n%s" % (sys.executable, body))
    path.chmod(0o755)
    return str(path)


def free_port(host="127.0.0.1"):
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class FakeNode:
    """A unit state file, a journal file, fake tools and an SGLang-like HTTP server."""

    def __init__(self, tmp_path, served="kimi-k2.5", host="127.0.0.1"):
        self.dir = tmp_path
        self.systemctl = write_exe(tmp_path / "systemctl", FAKE_SYSTEMCTL)
        self.journalctl = write_exe(tmp_path / "journalctl", FAKE_JOURNALCTL)
        self.journal = tmp_path / "journal.txt"
        self.journal.write_text("")
        self.host = host  # the only address the server listens on
        self.port = free_port(host)
        self.served = served
        self.health = 503
        self.health_delay = 1.0  # 0.5.23: once up, health_generate sleeps 1 s before it looks
        self.ping = True  # False: a release without /ping (404)
        self.ready_time = None
        self.server = None
        self.main = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        self.state = {
            "LoadState": "loaded",
            "ActiveState": "active",
            "SubState": "running",
            "Result": "success",
            "MainPID": self.main.pid,
            "ExecMainStatus": 0,
            "ExecMainCode": 0,
            "NRestarts": 0,
            "InvocationID": "0a1b2c3d4e5f",
            "ExecMainStartTimestampMonotonic": int(time.monotonic() * 1e6),
            "ControlGroup": "/system.slice/sglang.service",
        }
        self.set_state()

    def set_state(self, **changes):
        self.state.update(changes)
        tmp = self.dir / "unit.json.tmp"
        tmp.write_text(json.dumps(self.state))
        os.replace(tmp, self.dir / "unit.json")

    def log(self, *lines):
        """Append journal entries stamped with CLOCK_MONOTONIC, as journald does."""
        mono = int(time.monotonic() * 1e6)
        with open(self.journal, "a") as f:
            f.write("".join("%d\t%s\n" % (mono, line) for line in lines))

    def open_port(self):
        node = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path == "/v1/models":
                    code = 200
                    body = json.dumps(
                        {
                            "object": "list",
                            "data": [
                                {
                                    "id": node.served,
                                    "object": "model",
                                    "owned_by": "sglang",
                                    "root": node.served,
                                }
                            ],
                        }
                    )
                elif self.path == "/health":
                    if node.health == 200:
                        time.sleep(node.health_delay)
                    code, body = node.health, ""
                elif self.path == "/ping" and node.ping:
                    code, body = node.health, ""
                else:
                    code, body = 404, ""
                node.log(
                    '[2026-11-29 10:00:09] INFO:     127.0.0.1:51234 - "GET %s HTTP/1.1" %d'
                    % (self.path, code)
                )
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer((self.host, self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def become_ready(self):
        self.ready_time = time.time()
        self.health = 200

    def close(self):
        if self.server:
            self.server.shutdown()
            self.server.server_close()
        self.main.kill()
        self.main.wait()

    def gate(self, *extra, timeout=20):
        """Start gate.py as a script (as on the node); returns the Popen."""
        argv = gate_argv(
            ["--unit", "sglang.service", "--systemctl", self.systemctl, "--journalctl", self.journalctl],
            self.port,
            "kimi-k2.5",
            timeout,
            self.dir / "gate.json",
            extra,
        )
        return subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True
        )

    def summary(self):
        return json.loads((self.dir / "gate.json").read_text())


@pytest.fixture
def node(tmp_path):
    n = FakeNode(tmp_path)
    yield n
    n.close()


def finish(proc, limit=30):
    out, _ = proc.communicate(timeout=limit)
    return proc.returncode, out


def test_ready_path_reports_phases_and_is_quick_after_readiness(node):
    proc = node.gate("--progress-every", "0.5")
    node.log("[2026-11-29 10:00:01] server_args=ServerArgs(model_path='/models/Kimi-K2.5-INT4', tp_size=8)")
    time.sleep(0.5)
    node.log("[2026-11-29 10:00:02 TP0] Load weight begin. avail mem=78.50 GB")
    time.sleep(0.8)
    node.log(
        "[2026-11-29 10:00:40 TP0] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, "
        "avail mem=21.07 GB, mem usage=57.43 GB.",
        "[2026-11-29 10:00:41 TP0] Capture cuda graph begin. This can take up to several minutes. "
        "avail mem=15.30 GB",
    )
    time.sleep(0.8)
    node.open_port()  # warmup: /v1/models lists the model, /health 503
    node.log(
        "[2026-11-29 10:01:10] INFO:     Application startup complete.",
        "[2026-11-29 10:01:10] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
    )
    time.sleep(0.4)
    node.log('[2026-11-29 10:01:11] INFO:     127.0.0.1:40532 - "GET /get_model_info HTTP/1.1" 200 OK')
    time.sleep(1.0)
    node.become_ready()
    node.log("[2026-11-29 10:01:13] The server is fired up and ready to roll!")
    rc, out = finish(proc)
    assert rc == status.READY, out
    lines = result.progress(out.splitlines())
    phases = [line.split("phase: ")[1] for line in lines if "] phase: " in line]
    print(out)
    assert phases[:4] == ["loading weights", "capturing CUDA graphs", "HTTP server started", "warming up"]
    assert phases[4:] in ([], ["fired up"])
    assert any("waiting: phase" in line for line in lines)
    assert lines[-1].startswith("ready in ") and "loading" in lines[-1] and "graphs" in lines[-1]
    summary = node.summary()
    assert summary["status"] == 0 and summary["status_name"] == "READY"
    latency = summary["ready_at"] - node.ready_time
    print("gate latency after readiness: %.3f s" % latency)
    # Never ready before the server is; the figure itself is bench/readiness.py's P1 (a loaded
    # machine stretches it here): the bound only catches a gate that stopped polling.
    assert 0 <= latency < 3.0
    # phase times come from the journal's monotonic timestamps: loading lasted 0.8 s here (a
    # loaded machine oversleeps, never undersleeps)
    assert 0.75 < summary["phases"]["loading"] < 2.0, summary
    # the journal was read by invocation, not by unit name
    calls = (node.dir / "journalctl.calls").read_text()
    assert "_SYSTEMD_INVOCATION_ID=0a1b2c3d4e5f" in calls


def test_ping_200_waits_for_the_fired_up_line_then_is_quick(node):
    # 0.5.23 sets status Up (/ping 200) when the warmup's /generate returns, then POSTs
    # /freeze_gc, then logs "fired up": ready is /ping 200 with that line, not /ping alone.
    node.open_port()
    node.log("[2026-11-29 10:01:10] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)")
    proc = node.gate()
    time.sleep(0.5)
    node.become_ready()
    time.sleep(1.0)
    assert proc.poll() is None, "ready before the fired up line"
    fired = time.time()
    node.log("[2026-11-29 10:01:13] The server is fired up and ready to roll!")
    rc, out = finish(proc)
    assert rc == status.READY, out
    # Within about one poll interval of the line (not the next progress beat): the bound
    # leaves room for a loaded machine, it is no speed target.
    assert 0 <= node.summary()["ready_at"] - fired < 1.5, out


def test_fired_up_line_without_ping_200_is_not_ready(node):
    node.open_port()  # /ping 503: e.g. SIGTERM already set gracefully_exit
    node.log("[2026-11-29 10:01:13] The server is fired up and ready to roll!")
    rc, out = finish(node.gate("--timeout", "2"))
    assert rc == status.TIMEOUT, out
    assert "/ping 503" in out


def test_release_without_ping_falls_back_to_health(node):
    node.ping = False
    node.open_port()
    node.become_ready()
    node.log("[2026-11-29 10:01:13] The server is fired up and ready to roll!")
    rc, out = finish(node.gate())
    assert rc == status.READY, out
    log = node.journal.read_text()
    assert '"GET /ping HTTP/1.1" 404' in log and '"GET /health HTTP/1.1" 200' in log


def test_lost_fired_up_line_is_confirmed_by_health_after_the_grace(node):
    node.open_port()
    node.become_ready()
    start = time.monotonic()
    rc, out = finish(node.gate("--fired-up-grace", "1.5"))
    assert rc == status.READY, out
    assert "no 'fired up' line in the journal; /health 200 confirms" in out
    assert 2.5 <= time.monotonic() - start < 6  # the grace, then /health's 1 s


def test_models_listed_while_health_503_is_not_ready(node):
    node.open_port()
    node.log("[2026-11-29 10:01:10] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)")
    rc, out = finish(node.gate("--timeout", "2"))
    assert rc == status.TIMEOUT, out
    assert "/ping 503" in out
    assert node.summary()["ready_at"] is None


def test_wrong_served_name_is_not_ready(node):
    node.served = "some-other-model"
    node.health = 200
    node.open_port()
    rc, out = finish(node.gate("--timeout", "1.5"))
    assert rc == status.TIMEOUT, out
    assert "not 'kimi-k2.5'" in out


def test_dying_unit_fails_fast_with_classified_cause(node):
    proc = node.gate()
    node.log("[2026-11-29 10:00:02 TP0] Load weight begin. avail mem=78.50 GB")
    time.sleep(1.0)
    node.log(
        "[2026-11-29 10:00:30 TP3] Scheduler hit an exception: Traceback (most recent call last):",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total "
        "capacity of 94.97 GiB of which 1.12 GiB is free.",
        "[2026-11-29 10:00:31] Received sigquit from a child process. It usually means the child failed.",
    )
    node.main.kill()
    died = time.monotonic()
    node.set_state(
        ActiveState="failed",
        SubState="failed",
        Result="exit-code",
        MainPID=0,
        ExecMainCode=2,
        ExecMainStatus=9,
    )
    rc, out = finish(proc)
    detect = time.monotonic() - died
    print("failure detected in %.2f s" % detect)
    assert rc == status.FAILED_START, out
    assert detect < 2.0
    failed = [line for line in out.splitlines() if "] failed: " in line]
    assert len(failed) == 1 and "cuda-oom" in failed[0], out
    assert "--- last" in out and "Load weight begin" in out
    assert node.summary()["cause"] == "cuda-oom"
    # The controller reads the cause from the result line, after the journal excerpt.
    assert result.parse(out.splitlines())["cause"].startswith("cuda-oom: CUDA out of memory")
    assert result.parse(out.splitlines())["result"] == "FAILED_START"


def test_systemd_restart_counts_as_death(node):
    proc = node.gate()
    time.sleep(0.8)
    node.log(
        "[2026-11-29 10:00:02 TP0] Load weight begin. avail mem=78.50 GB",
        "sglang.service: Main process exited, code=exited, status=1/FAILURE",
    )
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        node.set_state(MainPID=other.pid, NRestarts=1, InvocationID="ffff0000")
        rc, out = finish(proc)
    finally:
        other.kill()
        other.wait()
    assert rc == status.FAILED_START, out
    assert "restarted by systemd" in out


def test_already_failed_unit_reports_bad_argument(node):
    node.log(
        "usage: launch_server.py [-h] --model-path MODEL_PATH [--tp-size TP_SIZE]",
        "launch_server.py: error: unrecognized arguments: --speculative-num-step 3",
        "sglang.service: Main process exited, code=exited, status=2/INVALIDARGUMENT",
    )
    node.set_state(ActiveState="failed", SubState="failed", MainPID=0, ExecMainCode=1, ExecMainStatus=2)
    start = time.monotonic()
    rc, out = finish(node.gate())
    assert rc == status.FAILED_START, out
    assert time.monotonic() - start < 2.0
    assert "bad-argument" in out and "main process exited with status 2" in out


def test_timeout_names_last_phase_and_long_phase_is_not_hung(node):
    node.log("[2026-11-29 10:00:02 TP0] Load weight begin. avail mem=78.50 GB")
    rc, out = finish(node.gate("--timeout", "1.5", "--hang-after", "0.5"))
    assert rc == status.TIMEOUT, out
    line = [l for l in out.splitlines() if "] timeout: " in l][0]
    assert "last phase: loading weights" in line
    assert node.summary()["phase"] == "loading"


def test_hang_detected_outside_long_phases_despite_probe_traffic(node):
    node.open_port()  # /health 503 forever; each probe adds an access-log line to the journal
    node.log("[2026-11-29 10:01:10] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)")
    start = time.monotonic()
    rc, out = finish(node.gate("--timeout", "20", "--hang-after", "1"))
    assert rc == status.HUNG, out
    assert time.monotonic() - start < 5
    assert "hung: no new journal line" in out and "HTTP server started" in out


def test_unit_problem_rules():
    base = {"unit": "u", "MainPID": os.getpid(), "InvocationID": "a", "NRestarts": "0"}
    ok = {
        "LoadState": "loaded",
        "ActiveState": "active",
        "SubState": "running",
        "MainPID": str(os.getpid()),
        "InvocationID": "a",
        "NRestarts": "0",
    }
    assert watch.unit_problem(ok, base) is None
    assert watch.unit_problem(dict(ok, ActiveState="activating", SubState="start"), base) is None
    assert "auto-restart" in watch.unit_problem(
        dict(ok, ActiveState="activating", SubState="auto-restart"), base
    )
    assert "deactivating" in watch.unit_problem(
        dict(ok, ActiveState="deactivating", SubState="stop-sigterm"), base
    )
    assert "restarted" in watch.unit_problem(dict(ok, NRestarts="1"), base)
    assert "restarted" in watch.unit_problem(dict(ok, InvocationID="b"), base)
    assert "changed" in watch.unit_problem(dict(ok, MainPID="1"), base)
    assert "not loaded" in watch.unit_problem(dict(ok, LoadState="not-found"), base)
    killed = dict(ok, ActiveState="failed", SubState="failed", ExecMainCode="2", ExecMainStatus="9")
    assert "killed by signal 9" in watch.unit_problem(killed, base)


def test_probe_host_mapping():
    assert http_probe.probe_host("0.0.0.0") == "127.0.0.1"
    assert http_probe.probe_host("::") == "[::1]"
    assert http_probe.probe_host("10.0.0.5") == "10.0.0.5"
    assert http_probe.server_url("::", 30000) == "http://[::1]:30000"


def test_a_server_bound_to_one_address_is_gated_there(tmp_path):
    """service.host 127.0.0.2 (a loopback alias): the server listens there only, 127.0.0.1
    refuses; the gate's command line as the controller builds it (gate_args) reaches it."""
    node = FakeNode(tmp_path, served="tiny-standin", host="127.0.0.2")
    overrides = {"service": {"host": "127.0.0.2", "port": node.port}, "readiness": {"timeout_s": 10}}
    profile = load_profile("sandbox", overrides=overrides)
    try:
        node.open_port()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", node.port), timeout=2).close()
        node.log(
            "[2026-11-29 10:01:10] INFO:     Uvicorn running on http://127.0.0.2:30000 (Press CTRL+C to quit)"
        )
        node.become_ready()
        node.log("[2026-11-29 10:01:13] The server is fired up and ready to roll!")
        target = ["--unit", "sglang.service", "--systemctl", node.systemctl, "--journalctl", node.journalctl]
        argv = [sys.executable, str(NODE / "gate.py"), *target, *map(str, gate_args(profile))]
        rc, out = finish(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    finally:
        node.close()
    assert rc == status.READY, out
    assert "127.0.0.2" in out and "port closed" not in out


def test_runs_from_the_uploaded_layout_like_on_the_node(tmp_path):
    flat = tmp_path / "node"
    for local, remote in node_script_files("/opt/sd"):
        (flat / remote[len("/opt/sd/node/") :]).parent.mkdir(parents=True, exist_ok=True)
        (flat / remote[len("/opt/sd/node/") :]).write_text(local.read_text())
    for script in (
        "gate.py",
        "restart.py",
        "workers.py",
        "lib/status.py",
        "lib/sglang_log.py",
        "lib/systemd.py",
        "lib/procs.py",
    ):
        proc = subprocess.run(
            [sys.executable, str(flat / script), "--help"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=str(tmp_path),
        )
        assert proc.returncode == 0, proc.stderr
        assert "usage:" in proc.stdout
    proc = subprocess.run(
        [sys.executable, str(flat / "gate.py"), "--unit", "u"],
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.returncode == status.USAGE
