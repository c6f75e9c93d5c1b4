"""The SGLang stand-in as a deploy sees it: `python -m sglang.launch_server` in a subprocess.

Start-up phases and the closed port, /health 503 -> 200, /v1/models during warmup, the
scheduler processes (titles, spawn environment), NCCL INFO lines, the token rate, SIGTERM
(SGLang's 5-s drain clock; a stop under the deploy's unit, and under SIGTERM to every process,
by a systemd-like stop: systemd_like.py),
and every SGLANG_STANDIN_FAIL mode. Every process started here is killed at teardown.
"""

import http.client
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import systemd_like

from sglang_deploy.node.lib import decode_rate, env_records
from sglang_deploy.plan.render import HOOK_MODULE, render_hook_module, render_unit
from sglang_deploy.profile.schema import load_profile

STANDIN = Path(__file__).resolve().parents[2] / "engine-standin"
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
# The start-up hook's variables in the healthy server's test: the unit's own values, and one the
# launcher overwrites (SGLang sets CUDA_DEVICE_MAX_CONNECTIONS=8 whatever the profile says).
HOOK_ENV = {
    "STANDIN_TEST_MARKER": "from-the-unit-env",
    "NCCL_PROTO": "LL",
    "NCCL_BUFFSIZE": "16777216",
    "CUDA_DEVICE_MAX_CONNECTIONS": "1",
}

NCCL_TUNING = {
    "NCCL_DEBUG": "INFO",
    "NCCL_PROTO": "LL",
    "NCCL_ALGO": "Ring",
    "NCCL_P2P_LEVEL": "SYS",
    "NCCL_MAX_NCHANNELS": "16",
    "NCCL_BUFFSIZE": "16777216",
    "NCCL_NTHREADS": "512",
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_state(pid):
    """The state letter of pid from /proc, or None when it is gone."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return data[data.rfind(b")") + 2 :][:1].decode()


def alive(pid):
    return proc_state(pid) not in (None, "Z", "X")


def children_of(pid):
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                data = Path(f"/proc/{entry}/stat").read_bytes()
            except OSError:
                continue
            if int(data[data.rfind(b")") + 2 :].split()[1]) == pid:
                out.append(int(entry))
    return out


def cmdline(pid):
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        return ""


class Standin:
    """One stand-in server started by a test; remembers every descendant it saw."""

    def __init__(self, workdir, extra_args=(), env=None, tp=2, model_path=None, port=None):
        self.port = port or free_port()
        self.log_path = Path(workdir) / f"standin-{self.port}.log"
        if model_path is None:
            model_path = Path(workdir) / "tiny-standin"
            model_path.mkdir(exist_ok=True)
            (model_path / "config.json").write_text(json.dumps(TINY_CONFIG))
        base = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("NCCL_", "SGLANG_STANDIN_", "CUDA_DEVICE_MAX"))
        }
        base.update(
            {
                "PYTHONPATH": str(STANDIN),
                "SGLANG_STANDIN_LOAD_SECONDS": "0.4",
                "SGLANG_STANDIN_WARMUP_SECONDS": "0.3",
                "SGLANG_STANDIN_FAIL_AFTER_SECONDS": "0.2",
            }
        )
        base.update(env or {})
        argv = [
            sys.executable,
            "-m",
            "sglang.launch_server",
            "--model-path",
            str(model_path),
            "--served-model-name",
            "tiny-standin",
            "--port",
            str(self.port),
            "--tp-size",
            str(tp),
            *extra_args,
        ]
        self.seen = set()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env=base, start_new_session=True
            )

    @property
    def pid(self):
        return self.proc.pid

    def log(self):
        return self.log_path.read_text(errors="replace")

    def descendants(self):
        found, todo = [], [self.pid]
        while todo:
            kids = children_of(todo.pop())
            found += kids
            todo += kids
        self.seen.update(found)
        return found

    def wait_for(self, predicate, timeout=10.0, interval=0.02):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is None:
                self.descendants()
            if predicate():
                return True
            time.sleep(interval)
        return False

    def wait_log(self, text, timeout=10.0):
        return self.wait_for(lambda: text in self.log(), timeout)

    def port_open(self):
        with socket.socket() as s:
            s.settimeout(0.5)
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def request(self, method, path, body=None, timeout=10, key=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        try:
            conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, data
        finally:
            conn.close()

    def get_json(self, path):
        status, data = self.request("GET", path)
        return status, json.loads(data) if data else None

    def wait_exit(self, timeout=15.0):
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            self.descendants()
            time.sleep(0.02)
        return self.proc.wait(timeout=max(0.1, deadline - time.monotonic()))

    def kill(self):
        pids = [self.pid] + sorted(self.seen)
        for pid in pids:
            if alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def leftovers(self):
        """Descendants still running after the launcher exited."""
        time.sleep(0.1)
        return [pid for pid in self.seen if alive(pid)]


@pytest.fixture
def standins(tmp_path):
    started = []

    def start(*args, **kwargs):
        s = Standin(tmp_path, *args, **kwargs)
        started.append(s)
        return s

    yield start
    for s in started:
        s.kill()


def with_hook(workdir, hook_env, name="hook"):
    """(environment, records directory) of a stand-in started with the start-up hook as the
    deploy renders it for ``hook_env`` (PYTHONPATH has no .pth: a sitecustomize.py imports it),
    each process recording its environment where the workers' check reads it."""
    hook_dir, records = Path(workdir) / name, Path(workdir) / f"{name}-records"
    hook_dir.mkdir()
    records.mkdir(mode=0o700)
    profile = load_profile("sandbox", overrides={"env": hook_env})
    (hook_dir / f"{HOOK_MODULE}.py").write_text(render_hook_module(profile))
    (hook_dir / "sitecustomize.py").write_text(f"import {HOOK_MODULE}\n")
    return {"PYTHONPATH": f"{STANDIN}:{hook_dir}", env_records.RECORDS_VAR: str(records)}, str(records)


# ====================================================================== a healthy server
@pytest.fixture(scope="module")
def server(tmp_path_factory):
    env = dict(
        NCCL_TUNING,
        SGLANG_STANDIN_LOAD_SECONDS="1.0",
        SGLANG_STANDIN_WARMUP_SECONDS="1.0",
        SGLANG_STANDIN_TOKENS_PER_SECOND="40",
        STANDIN_TEST_MARKER="from-the-unit-env",
    )
    workdir = tmp_path_factory.mktemp("standin")
    # The start-up hook as the deploy renders it (PYTHONPATH has no .pth: a sitecustomize.py
    # imports it), recording each process's environment where the workers' check reads it.
    hooked, records = with_hook(workdir, HOOK_ENV)
    s = Standin(workdir, ["--enable-metrics"], env={**env, **hooked})
    s.records = records
    yield s
    s.kill()


def test_port_closed_while_loading_and_capturing(server):
    assert server.wait_log("TP1] Load weight begin")
    assert not server.port_open()
    assert server.wait_log("TP0] Capture target decode CUDA graph begin")
    assert not server.port_open()


def test_models_listed_during_warmup_while_health_is_503(server):
    assert server.wait_for(server.port_open, timeout=10, interval=0.01)
    opened = time.monotonic()
    status, _ = server.request("GET", "/health")
    assert status == 503  # 0.5.23: status Starting -> 503 at once, no generation
    assert time.monotonic() - opened < 0.5
    assert server.request("GET", "/ping")[0] == 503  # 0.5.23: /ping follows is_healthy()
    assert server.request("GET", "/ready")[0] == 503
    status, models = server.get_json("/v1/models")
    assert status == 200 and [m["id"] for m in models["data"]] == ["tiny-standin"]
    assert time.monotonic() - opened < 1.0, "too slow to observe the warmup window"
    assert "fired up" not in server.log()


def test_health_200_after_warmup_and_phase_order(server):
    assert server.wait_for(lambda: server.request("GET", "/health")[0] == 200, timeout=10, interval=0.1)
    log = server.log()
    order = [
        "] server_args={'model_path': ",
        "TP0] Init parallel begin.",
        "TP0] Init parallel ends. elapsed=",
        "TP0] Load weight begin. avail mem=",
        "TP0] Load weight end. elapsed=",
        "TP0] KV Cache is allocated. dtype: torch.float16, #tokens:",
        "TP0] Memory pool end. avail mem=",
        "TP0] Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, avail mem=",
        "TP0] Capture target decode CUDA graph end. bs=[",
        "TP0] max_total_num_tokens=",
        f"INFO:     Started server process [{server.pid}]",
        f"INFO:     Uvicorn running on http://127.0.0.1:{server.port} (Press CTRL+C to quit)",
        '"GET /model_info HTTP/1.1" 200 OK',
        '"POST /generate HTTP/1.1" 200 OK',
        '"POST /freeze_gc HTTP/1.1" 200 OK',
        "] The server is fired up and ready to roll!",
    ]
    positions = [log.find(text) for text in order]
    assert -1 not in positions, [t for t, p in zip(order, positions) if p == -1]
    assert positions == sorted(positions)
    assert re.search(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d TP1\] Load weight begin", log, re.M)


def timed(server, path):
    start = time.monotonic()
    status, _ = server.request("GET", path, timeout=30)
    return status, time.monotonic() - start


def test_once_up_health_generates_a_token_and_takes_a_second_while_ping_is_a_flag(server):
    assert server.wait_log("fired up")
    # 0.5.23's health_generate: submit max_new_tokens=1, `await asyncio.sleep(1)`, then look.
    status, took = timed(server, "/health")
    assert status == 200 and 1.0 <= took < 1.8, took
    status, took = timed(server, "/health_generate")
    assert status == 200 and 1.0 <= took < 1.8, took
    for path in ("/ping", "/ready"):  # is_healthy() / is_ready(): flag checks
        status, took = timed(server, path)
        assert status == 200 and took < 0.3, (path, took)
    # The warmup's first /model_info comes 1 s after the port opened (SGLang sleeps first).
    log = server.log()
    assert log.find("Uvicorn running on") < log.find('"GET /model_info HTTP/1.1" 200 OK')


def test_health_without_generation_when_disabled(standins):
    s = standins(
        env={"SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "false", "SGLANG_STANDIN_WARMUP_SECONDS": "0.1"}
    )
    assert s.wait_log("fired up")
    status, took = timed(s, "/health")
    assert status == 200 and took < 0.3, took
    status, took = timed(s, "/health_generate")  # the switch covers /health only
    assert status == 200 and took >= 1.0, took


def test_schedulers_are_titled_spawn_children_with_the_parents_environment(server):
    """Titled as SGLang titles them (the real setproctitle: /proc/<pid>/environ blank), each
    child holds the launcher's environment, as its start-up hook recorded at interpreter start."""
    kids = server.descendants()
    titles = {cmdline(pid): pid for pid in kids}
    assert {"sglang::scheduler_TP0", "sglang::scheduler_TP1", "sglang::detokenizer"} <= set(titles)
    for title in ("sglang::scheduler_TP0", "sglang::scheduler_TP1"):
        pid = titles[title]
        assert Path(f"/proc/{pid}/comm").read_text().strip() == "sglang::schedul"
        assert not Path(f"/proc/{pid}/environ").read_bytes().strip(b"\0")
        environ = env_records.read(server.records, pid)
        assert environ["STANDIN_TEST_MARKER"] == "from-the-unit-env"
        assert environ["NCCL_PROTO"] == "LL" and environ["NCCL_BUFFSIZE"] == "16777216"
        # Set by the launcher in its os.environ after it started, over the profile's value:
        # only an exec'd (spawned) child has it in its initial environment.
        assert environ["CUDA_DEVICE_MAX_CONNECTIONS"] == "8"


def test_each_scheduler_prints_ncclS_confirmation_lines(server):
    titles = {cmdline(pid): pid for pid in server.descendants()}
    log = server.log()
    for rank in (0, 1):
        pid = titles[f"sglang::scheduler_TP{rank}"]
        head = rf"^[^\s:]+:{pid}:\d+ \[{rank}\] NCCL INFO "
        for name, value in [
            ("NCCL_P2P_LEVEL", "SYS"),
            ("NCCL_MAX_NCHANNELS", "16."),
            ("NCCL_BUFFSIZE", "16777216."),
            ("NCCL_NTHREADS", "512."),
            ("NCCL_PROTO", "LL"),
            ("NCCL_ALGO", "Ring"),
        ]:
            assert re.search(head + re.escape(f"{name} set by environment to {value}") + "$", log, re.M), name


def test_info_endpoints(server):
    assert server.request("GET", "/ping")[0] == 200
    status, info = server.get_json("/server_info")
    assert status == 200 and info["version"] == "0.5.23+sandbox" and info["tp_size"] == 2
    assert info["served_model_name"] == "tiny-standin"
    status, model = server.get_json("/get_model_info")
    assert status == 200 and model["architectures"] == ["LlamaForCausalLM"] and model["is_generation"]
    assert "Endpoint '/get_model_info' is deprecated" in server.log()
    status, card = server.get_json("/v1/models/tiny-standin")
    assert status == 200 and card["id"] == "tiny-standin"
    assert server.request("GET", "/v1/models/other")[0] == 404
    status, load = server.get_json("/get_load")
    assert status == 200 and load[0]["dp_rank"] == 0
    status, metrics = server.request("GET", "/metrics")
    assert status == 200 and b"sglang:generation_tokens_total" in metrics
    assert server.request("GET", "/no/such/route")[0] == 404


def test_native_generate_and_openai_completion(server):
    status, data = server.request(
        "POST", "/generate", {"text": "Hello there", "sampling_params": {"max_new_tokens": 4}}
    )
    body = json.loads(data)
    assert status == 200 and body["meta_info"]["completion_tokens"] == 4 and body["text"]
    status, data = server.request(
        "POST", "/v1/completions", {"model": "tiny-standin", "prompt": "Hi", "max_tokens": 3}
    )
    body = json.loads(data)
    assert status == 200 and body["usage"]["completion_tokens"] == 3
    assert body["choices"][0]["finish_reason"] == "length"


def test_a_reasoning_parser_streams_the_thinking_as_reasoning_content(standins):
    """As SGLang with --reasoning-parser: the thinking arrives as delta.reasoning_content, then
    the answer as content; the decode check's measurement counts both channels at the
    configured rate (counting content alone gave 'too few tokens' or an overstated tok/s)."""
    s = standins(
        ["--reasoning-parser", "deepseek-r1"],
        env={"SGLANG_STANDIN_TOKENS_PER_SECOND": "40", "SGLANG_STANDIN_WARMUP_SECONDS": "0.1"},
    )
    assert s.wait_log("fired up")
    status, info = s.get_json("/model_info")
    assert status == 200 and info["reasoning_parser"] == "deepseek-r1"
    url = f"http://127.0.0.1:{s.port}/v1/chat/completions"
    timed = decode_rate.stream_once(url, "tiny-standin", "Think.", 16, 30)
    assert timed.tokens == 16 and decode_rate.decode_rate(timed.tokens, timed.seconds) == pytest.approx(
        40, rel=0.25
    )
    assert (timed.reasoning, timed.content) == (12, 4)  # 3/4 thinking, then the answer
    status, data = s.request(
        "POST",
        "/v1/chat/completions",
        {"model": "tiny-standin", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8},
    )
    message = json.loads(data)["choices"][0]["message"]
    assert status == 200 and message["reasoning_content"] and message["content"]
    assert json.loads(data)["usage"]["reasoning_tokens"] == 6


def test_an_api_key_guards_every_endpoint_but_health_ready_and_metrics(standins):
    """As SGLang's add_api_key_middleware (seen on 0.5.17: /v1/models and /ping 401, /health
    open): the warmup sends the key itself, so the server still fires up."""
    key = "sk-standin-test"
    s = standins(["--api-key", key, "--enable-metrics"], env={"SGLANG_STANDIN_WARMUP_SECONDS": "0.1"})
    assert s.wait_log("fired up")
    for method, path in (
        ("GET", "/v1/models"),
        ("GET", "/ping"),
        ("GET", "/model_info"),
        ("POST", "/generate"),
    ):
        body = {"text": "x", "sampling_params": {"max_new_tokens": 1}} if method == "POST" else None
        status, data = s.request(method, path, body)
        assert (status, json.loads(data)) == (401, {"error": "Unauthorized"}), path
        assert s.request(method, path, body, key="sk-wrong")[0] == 401, path
        assert s.request(method, path, body, key=key)[0] == 200, path
    for path in ("/health", "/ready", "/metrics"):
        assert s.request("GET", path)[0] == 200, path


def test_streaming_chat_completion_runs_at_the_configured_rate(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request(
        "POST",
        "/v1/chat/completions",
        body=json.dumps(
            {
                "model": "tiny-standin",
                "messages": [{"role": "user", "content": "Count."}],
                "max_tokens": 24,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
        ),
        headers={"Content-Type": "application/json"},
    )
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("content-type").startswith("text/event-stream")
    stamps, events, done = [], [], False
    while True:
        line = resp.readline()
        if not line:
            break
        line = line.strip()
        if line == b"data: [DONE]":
            done = True
        elif line.startswith(b"data: "):
            event = json.loads(line[6:])
            events.append(event)
            if event["choices"] and event["choices"][0]["delta"].get("content"):
                stamps.append(time.monotonic())
    conn.close()
    assert done and len(stamps) == 24
    assert events[-1]["usage"]["completion_tokens"] == 24
    rate = (len(stamps) - 1) / (stamps[-1] - stamps[0])
    assert 30 <= rate <= 50, rate


# ====================================================================== failure modes
INIT_FAILURES = {
    "crash-load": ["safetensors_rust.SafetensorError: Error while deserializing header"],
    "cuda-oom": ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"],
    "nccl-error": ["torch.distributed.DistBackendError: NCCL error in:", "ncclSystemError"],
}


@pytest.mark.parametrize("mode", sorted(INIT_FAILURES))
def test_scheduler_failure_during_start_up(mode, standins):
    s = standins(env={"SGLANG_STANDIN_FAIL": mode})
    rc = s.wait_exit()
    log = s.log()
    assert rc == 1
    assert "TP0] Scheduler hit an exception: Traceback (most recent call last):" in log
    for text in INIT_FAILURES[mode]:
        assert text in log
    assert "Received sigquit from a child process. It usually means the child failed." in log
    assert "RuntimeError: Rank 0 scheduler died during initialization (exit code: 1)." in log
    assert "Uvicorn running" not in log and not s.port_open()
    assert not s.leftovers()


def test_hang_keeps_the_port_closed_and_goes_quiet(standins):
    s = standins(env={"SGLANG_STANDIN_FAIL": "hang"})
    assert s.wait_log("TP1] Load weight begin")
    time.sleep(0.8)  # twice the configured load time
    size = len(s.log())
    time.sleep(0.4)
    assert len(s.log()) == size
    assert not s.port_open() and s.proc.poll() is None
    assert "Capture cuda graph" not in s.log()
    start = time.monotonic()
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(timeout=5) == -signal.SIGTERM and time.monotonic() - start < 1.0
    assert not s.leftovers()


def test_scheduler_dying_after_ready_takes_the_tree_down(standins):
    s = standins(
        env={
            "SGLANG_STANDIN_FAIL": "scheduler-dies-after-ready",
            "SGLANG_STANDIN_FAIL_AFTER_SECONDS": "2.5",
            "SGLANG_STANDIN_WARMUP_SECONDS": "0.1",
        }
    )
    assert s.wait_log("The server is fired up and ready to roll!")
    rc = s.wait_exit()
    log = s.log()
    assert rc == -signal.SIGKILL  # SGLang's kill_process_tree(os.getpid()): itself last
    unit = systemd_like.settings(render_unit(load_profile("sandbox")))
    assert systemd_like.result(rc, unit) == "signal" and systemd_like.restarts(rc, unit)  # a crash
    assert "Rank 1 scheduler is dead. Please check if there are relevant logs." in log
    assert re.search(
        r"Subprocess scheduler_1 \(pid=\d+\) crashed with exit code -9\. "
        r"Triggering SIGQUIT for cleanup\.\.\.",
        log,
    )
    assert "SIGQUIT received. signum=None, frame=None. It usually means one child failed." in log
    assert not s.port_open() and not s.leftovers()


def test_failed_warmup_kills_the_tree(standins):
    s = standins(env={"SGLANG_STANDIN_FAIL": "warmup-fails"})
    assert s.wait_for(s.port_open)
    assert s.request("GET", "/health")[0] == 503
    rc = s.wait_exit()
    log = s.log()
    assert rc == -signal.SIGKILL  # kill_process_tree(os.getpid()) from the warmup, as SGLang
    assert "] Initialization failed. warmup error: Traceback (most recent call last):" in log
    assert '"POST /generate HTTP/1.1" 500 Internal Server Error' in log
    assert re.search(r"^AssertionError: \{\"error\": \{\"message\": ", log, re.M)
    assert "fired up" not in log and not s.port_open() and not s.leftovers()


def test_unknown_failure_mode_is_an_error_at_start(standins):
    s = standins(env={"SGLANG_STANDIN_FAIL": "meteor-strike"})
    assert s.wait_exit() == 2
    assert "SGLANG_STANDIN_FAIL='meteor-strike' is not a failure mode" in s.log()
    assert "TP0" not in s.log()


# ====================================================================== other start-up errors
def test_model_path_without_config_json_fails_before_spawning(standins, tmp_path):
    empty = tmp_path / "no-config"
    empty.mkdir()
    s = standins(model_path=empty)
    assert s.wait_exit() == 1
    log = s.log()
    assert f"OSError: {empty} does not appear to have a file named config.json." in log
    assert "TP0" not in log and not s.seen


def test_unknown_flag_exits_2_with_argparses_message(standins):
    s = standins(["--enable-turbo"])
    assert s.wait_exit() == 2
    assert "sglang serve: error: unrecognized arguments: --enable-turbo" in s.log()


def test_pre_0_5_23_cuda_graph_flag_is_ambiguous(standins):
    s = standins(["--cuda-graph-max-bs", "32"])
    assert s.wait_exit() == 2
    assert (
        "sglang serve: error: ambiguous option: --cuda-graph-max-bs could match "
        "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"
    ) in s.log()


def test_context_length_beyond_the_models_is_refused(standins):
    s = standins(["--context-length", "4096"])
    assert s.wait_exit() == 1
    log = s.log()
    assert (
        "ValueError: Warning: User-specified context_length (4096) is greater than the derived "
        "context_length (512)."
    ) in log
    assert "set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1" in log
    assert "TP0" not in log


def test_tp1_scheduler_has_no_rank_suffix(standins):
    s = standins(tp=1, env={"SGLANG_STANDIN_LOAD_SECONDS": "5"})
    assert s.wait_log("] Load weight begin")
    assert "sglang::scheduler" in {cmdline(pid) for pid in s.descendants()}
    assert re.search(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] Load weight begin", s.log(), re.M)
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(timeout=5) == -signal.SIGTERM


# ====================================================================== stopping
# SGLang 0.5.23's clocks (docs/sglang-shutdown.md): the launcher's SIGTERM is looked at every 5 s
# from the first generation request (the warmup's /generate); its subprocess watchdog looks at
# the schedulers every 1 s. A scheduler has no SIGTERM handler.
def warmup_request_started(s, rate):
    """When the warmup's /generate began: its access line comes its 8 tokens later."""
    assert s.wait_for(lambda: '"POST /generate HTTP/1.1" 200' in s.log(), timeout=15, interval=0.01)
    return time.monotonic() - 8 / rate


def at_phase(clock_start, phase, period=5.0, not_before=0.3):
    """The first moment clock_start + k * period + phase at least not_before seconds from now."""
    now = time.monotonic() + not_before
    return clock_start + math.ceil((now - clock_start - phase) / period) * period + phase


def sleep_until(moment):
    time.sleep(max(0.0, moment - time.monotonic()))


def stream(s, max_new_tokens):
    """A streaming /generate whose first token is out; (connection, response)."""
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
    conn.request(
        "POST",
        "/generate",
        body=json.dumps({"text": "x", "sampling_params": {"max_new_tokens": max_new_tokens}, "stream": True}),
    )
    resp = conn.getresponse()
    assert resp.readline().startswith(b"data: ")
    return conn, resp


def seen_at(s, text, timeout):
    assert s.wait_log(text, timeout=timeout), text
    return time.monotonic()


def test_sigterm_to_the_launcher_drains_on_sglangs_5s_clock_then_stops_cleanly(standins):
    rate = 20
    s = standins(env={"SGLANG_STANDIN_TOKENS_PER_SECOND": str(rate), "SGLANG_STANDIN_WARMUP_SECONDS": "0.1"})
    clock = warmup_request_started(s, rate)
    assert s.wait_log("fired up")
    kids = s.descendants()
    sent = at_phase(clock, 4.0, not_before=0.8)  # the clock's next look: 1 s after the SIGTERM
    sleep_until(sent - 0.5)
    conn, resp = stream(s, int(2.5 * rate))  # ends about 2 s after the SIGTERM
    sleep_until(sent)
    s.proc.send_signal(signal.SIGTERM)  # the launcher only (systemctl kill --kill-who=main)
    assert s.wait_log(
        "SIGTERM received. signum=None frame=None. Draining requests and shutting down...", timeout=1
    )
    # gracefully_exit: the health endpoints say 503 at once; the port stays open and serves.
    for path in ("/health", "/ping", "/ready"):
        status, took = timed(s, path)
        assert status == 503 and took < 0.3, (path, took)
    assert "Health check request received during shutdown. Returning 503." in s.log()
    assert s.request("GET", "/v1/models")[0] == 200
    assert s.request("POST", "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 2}})[0] == 200
    first = seen_at(s, "Gracefully exiting... Remaining number of requests 1.", timeout=3)
    assert abs(first - (sent + 1.0)) < 0.35, first - sent
    assert resp.read().rstrip().endswith(b"data: [DONE]")  # the running request finishes
    conn.close()
    assert s.port_open() and s.proc.poll() is None
    last = seen_at(
        s,
        "Gracefully exiting... Remaining number of requests 0. Remaining requests remaining_rids=[].",
        timeout=7,
    )
    assert abs(last - (sent + 6.0)) < 0.35, last - sent
    assert s.proc.wait(timeout=5) == 0
    assert time.monotonic() - last < 0.8
    log = s.log()
    order = [
        "Gracefully exiting... Remaining number of requests 0.",
        f"kill_process_tree called: parent_pid={s.pid}, include_parent=False, pid={s.pid}",
        "INFO:     Shutting down",
        "INFO:     Waiting for application shutdown.",
        "INFO:     Application shutdown complete.",
        f"INFO:     Finished server process [{s.pid}]",
    ]
    positions = [log.index(line) for line in order]
    assert positions == sorted(positions)
    assert "crashed" not in log and not s.port_open()
    assert not [pid for pid in kids if alive(pid)]


def test_a_stop_under_the_deploys_unit_drains_and_leaves_it_clean(standins):
    """The unit as the deploy renders it, stopped as systemd stops it (KillMode=mixed: SIGTERM to
    the launcher; SIGKILL to what is left once it exited): the running request finishes, the
    schedulers stop on SGLang's ShutdownReq, exit 0: the unit ends inactive, not failed."""
    rate = 20
    s = standins(env={"SGLANG_STANDIN_TOKENS_PER_SECOND": str(rate), "SGLANG_STANDIN_WARMUP_SECONDS": "0.1"})
    assert s.wait_log("fired up")
    kids = s.descendants()
    conn, resp = stream(s, int(1.5 * rate))
    ended, took = systemd_like.stop(s.proc, render_unit(load_profile("sandbox")))
    assert ended == "success" and s.proc.returncode == 0, (ended, s.proc.returncode, s.log()[-2000:])
    assert took < 5.0 + 5.0 + 1.0, took  # the 5-s look, one more while the request runs
    assert resp.read().rstrip().endswith(b"data: [DONE]")  # drained, not cut
    conn.close()
    log = s.log()
    assert "Gracefully exiting... Remaining number of requests 0." in log and "crashed" not in log
    assert not s.port_open() and not [pid for pid in kids if alive(pid)]


def test_systemctl_stop_kills_the_schedulers_and_the_watchdog_fails_the_launcher(standins):
    """KillMode=control-group (the deploy's unit before): the same SIGTERM reaches every process
    of the unit at once; the launcher ends by SIGKILL of itself: the unit failed."""
    rate = 40
    s = standins(env={"SGLANG_STANDIN_TOKENS_PER_SECOND": str(rate), "SGLANG_STANDIN_WARMUP_SECONDS": "0.1"})
    clock = warmup_request_started(s, rate)
    assert s.wait_log("fired up")
    kids = s.descendants()
    conn, resp = stream(s, 400)
    sent = at_phase(clock, 1.0)  # the 5-s clock looks again only 4 s after the SIGTERM
    sleep_until(sent)
    control_group = render_unit(load_profile("sandbox")).replace("KillMode=mixed", "KillMode=control-group")
    ended, _ = systemd_like.stop(s.proc, control_group, timeout=3)
    assert ended == "signal" and s.proc.returncode == -signal.SIGKILL
    took = time.monotonic() - sent
    assert took < 1.4, took  # the watchdog's next look, within 1 s
    log = s.log()
    assert "SIGTERM received. signum=None frame=None. Draining requests and shutting down..." in log
    assert re.search(
        r"Subprocess scheduler_0 \(pid=\d+\) crashed with exit code -15\. "
        r"Triggering SIGQUIT for cleanup\.\.\.",
        log,
    )
    assert "SIGQUIT received. signum=None, frame=None. It usually means one child failed." in log
    assert f"kill_process_tree called: parent_pid={s.pid}, include_parent=True, pid={s.pid}" in log
    assert "Gracefully exiting" not in log and "Finished server process" not in log
    try:  # the running request is cut off, not drained
        rest = resp.read()
    except http.client.IncompleteRead as e:
        rest = e.partial
    conn.close()
    assert b"[DONE]" not in rest
    assert not s.port_open() and not [pid for pid in kids if alive(pid)]


def test_port_in_use_fails_like_uvicorn(standins):
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        s = standins(port=blocker.getsockname()[1])
        assert s.wait_exit() == 1
    assert "error while attempting to bind on address" in s.log()
    assert "address already in use" in s.log()
    assert not s.leftovers()


def test_sigterm_while_loading_kills_the_launcher_at_once(standins):
    s = standins(env={"SGLANG_STANDIN_LOAD_SECONDS": "5"})
    # Both schedulers past their PR_SET_PDEATHSIG (they die with the launcher from there on).
    assert s.wait_log("TP0] Load weight begin") and s.wait_log("TP1] Load weight begin")
    start = time.monotonic()
    s.proc.send_signal(signal.SIGTERM)  # no SIGTERM handler yet: the signal's default action
    assert s.proc.wait(timeout=5) == -signal.SIGTERM and time.monotonic() - start < 1.0
    assert not s.leftovers()


def test_real_nccl_without_torch_fails_clearly(standins):
    try:
        import torch  # noqa: F401

        pytest.skip("torch is installed here")
    except ImportError:
        pass
    s = standins(env={"SGLANG_STANDIN_REAL_NCCL": "1"})
    assert s.wait_exit() == 1
    assert "SGLANG_STANDIN_REAL_NCCL=1 needs torch with CUDA" in s.log()
