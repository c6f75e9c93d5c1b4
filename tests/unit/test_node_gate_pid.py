"""The readiness gate's --pid/--log mode: a plain process and its log file stand in for a systemd
unit and its journal (no systemctl/journalctl involved), with the same phases, causes and
readiness rules as test_node_gate checks for units."""

import os
import signal
import subprocess
import sys
import time

import pytest
from test_node_gate import FakeNode, finish, gate_argv

from sglang_deploy.node.lib import result, status, watch

MISSING_TOOL = "/nonexistent/never-called"


class ProcessNode(FakeNode):
    """FakeNode's SGLang-like HTTP server, with a plain process and a plain log file."""

    def __init__(self, tmp_path, argv=None):
        super().__init__(tmp_path)
        self.main.kill()
        self.main.wait()
        self.logfile = tmp_path / "server.log"
        self.logfile.write_text("")
        self.main = subprocess.Popen(argv or [sys.executable, "-c", "import time; time.sleep(120)"])

    def log(self, *lines):
        with open(self.logfile, "a") as f:
            f.write("".join(line + "\n" for line in lines))

    def write(self, text):
        with open(self.logfile, "a") as f:
            f.write(text)

    def gate(self, *extra, timeout=20, pid=None):
        argv = gate_argv(
            [
                "--pid",
                str(pid or self.main.pid),
                "--log",
                str(self.logfile),
                "--systemctl",
                MISSING_TOOL,
                "--journalctl",
                MISSING_TOOL,
            ],
            self.port,
            "kimi-k2.5",
            timeout,
            self.dir / "gate.json",
            extra,
        )
        return subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True
        )


@pytest.fixture
def node(tmp_path):
    n = ProcessNode(tmp_path)
    yield n
    n.close()


def test_ready_path_from_the_log_file(node):
    proc = node.gate("--progress-every", "0.5")
    node.log(
        "[2026-11-29 10:00:01] server_args=ServerArgs(model_path='/models/tiny', tp_size=1)",
        "host:123:123 [0] NCCL INFO NCCL_P2P_LEVEL set by environment to SYS",
    )
    time.sleep(0.5)
    node.log("[2026-11-29 10:00:02] Load weight begin. avail mem=78.50 GB")
    time.sleep(0.6)
    node.log(
        "[2026-11-29 10:00:41] Capture target decode CUDA graph begin. backend=full, "
        "num_tokens_per_req=1, avail mem=15.30 GB"
    )
    time.sleep(0.6)
    node.open_port()
    node.log("[2026-11-29 10:01:10] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)")
    time.sleep(0.4)
    node.log('[2026-11-29 10:01:11] INFO:     127.0.0.1:40532 - "GET /model_info HTTP/1.1" 200 OK')
    time.sleep(0.6)
    node.become_ready()
    node.log("[2026-11-29 10:01:13] The server is fired up and ready to roll!")
    rc, out = finish(proc)
    print(out)
    assert rc == status.READY, out
    lines = result.progress(out.splitlines())
    assert "gating pid %d (log %s)" % (node.main.pid, node.logfile) in lines[0]
    phases = [line.split("phase: ")[1] for line in lines if "] phase: " in line]
    assert phases[:4] == ["loading weights", "capturing CUDA graphs", "HTTP server started", "warming up"]
    assert any("waiting: phase" in line and "process alive" in line for line in lines)
    assert lines[-1].startswith("ready in ")
    assert "systemctl" not in out and "journal" not in out
    summary = node.summary()
    assert summary["status_name"] == "READY" and summary["main_pid"] == node.main.pid
    assert summary["unit"] is None and summary["log"] == str(node.logfile)
    assert 0 <= summary["ready_at"] - node.ready_time < 0.5


def test_process_exit_fails_fast_with_cause_and_exit_status(tmp_path):
    node = ProcessNode(tmp_path, [sys.executable, "-c", "import sys, time; time.sleep(1.0); sys.exit(1)"])
    try:
        proc = node.gate()
        node.log(
            "[2026-11-29 10:00:02] Load weight begin. avail mem=78.50 GB",
            "[2026-11-29 10:00:30] Scheduler hit an exception: Traceback (most recent call last):",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        )
        # the last line has no newline yet; the process dies: it is read all the same
        node.write(
            "[2026-11-29 10:00:31] Received sigquit from a child process. It usually means the child failed."
        )
        time.sleep(1.2)  # the process is now a zombie: this test (its parent) has not reaped it
        died = time.monotonic()
        rc, out = finish(proc)
        detect = time.monotonic() - died
    finally:
        node.close()
    print(out)
    assert rc == status.FAILED_START, out
    assert detect < 2.0
    failed = [line for line in out.splitlines() if "] failed: " in line]
    assert len(failed) == 1 and "cuda-oom" in failed[0], out
    assert "process %d is gone (main process exited with status 1)" % node.main.pid in failed[0]
    assert "--- last 4 log lines of this start ---" in out
    assert "Received sigquit" in out
    assert node.summary()["cause"] == "cuda-oom"


def test_killed_process_reports_the_signal(node):
    proc = node.gate()
    node.log("[2026-11-29 10:00:02] Load weight begin. avail mem=78.50 GB")
    time.sleep(0.5)
    os.kill(node.main.pid, signal.SIGKILL)
    rc, out = finish(proc)
    assert rc == status.FAILED_START, out
    assert (
        "killed: unrecognised cause, see the journal lines below (process %d is gone "
        "(main process killed by signal 9))" % node.main.pid
    ) in out
    assert node.summary()["cause"] == "killed"


def test_reaped_process_is_gone_with_unknown_status(node):
    proc = node.gate()
    time.sleep(0.4)
    node.main.kill()
    node.main.wait()  # reaped: no zombie left to read an exit status from
    rc, out = finish(proc)
    assert rc == status.FAILED_START, out
    assert "exit status unknown" in out


def test_missing_process_fails_at_once(node):
    node.main.kill()
    node.main.wait()
    start = time.monotonic()
    rc, out = finish(node.gate())
    assert rc == status.FAILED_START, out
    assert time.monotonic() - start < 2.0
    assert "no-process: process %d does not exist" % node.main.pid in out


def test_partial_line_waits_for_its_newline_while_the_process_lives(node):
    node.write("[2026-11-29 10:00:02] Load weight be")
    proc = node.gate("--timeout", "1.5", "--hang-after", "0.5")
    time.sleep(0.5)
    node.write("gin. avail mem=78.50 GB\n")
    rc, out = finish(proc)
    assert rc == status.TIMEOUT, out
    line = [l for l in out.splitlines() if "] timeout: " in l][0]
    assert "last phase: loading weights" in line  # the whole line was seen once, not two halves
    assert node.summary()["phase"] == "loading"


def test_hang_detected_from_the_log(node):
    node.open_port()  # /health 503 forever; probe access lines in the log do not count as activity
    node.log("[2026-11-29 10:01:10] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)")
    rc, out = finish(node.gate("--timeout", "20", "--hang-after", "1"))
    assert rc == status.HUNG, out
    assert "hung: no new log line" in out


def test_log_read_from_offsets(tmp_path):
    log = tmp_path / "x.log"
    log.write_bytes(b"one\ntw")
    log_watch = watch.ProcessWatch(os.getpid(), str(log))
    entries, cursor = log_watch.read(None)
    assert entries == [(None, "one")] and cursor == 4
    with open(log, "ab") as f:
        f.write(b"o\r\nthr\xc3\xa9e\n")
    entries, cursor = log_watch.read(cursor)
    assert [line for _, line in entries] == ["two", "thr\u00e9e"]
    assert log_watch.read(cursor) == ([], cursor)
    log.write_bytes(b"new\n")  # truncated and rewritten: read from the start again
    assert log_watch.read(cursor) == ([(None, "new")], 4)
    assert watch.ProcessWatch(os.getpid(), str(tmp_path / "none.log")).read(None) == ([], None)


def test_show_in_systemctl_terms_for_a_live_process():
    show = watch.ProcessWatch(os.getpid(), "/dev/null").show()
    assert show["ActiveState"] == "active" and show["MainPID"] == str(os.getpid())
    started = int(show["ExecMainStartTimestampMonotonic"]) / 1e6
    assert 0 < started <= time.monotonic()


@pytest.mark.parametrize(
    "wait_status, code, exit_status",
    [
        (0, "1", "0"),
        (1 << 8, "1", "1"),
        (2 << 8, "1", "2"),
        (9, "2", "9"),
        (15, "2", "15"),
        (0x80 | 6, "3", "6"),
    ],
)
def test_exit_props_from_wait_status(wait_status, code, exit_status):
    assert watch.exit_props(wait_status) == {"ExecMainCode": code, "ExecMainStatus": exit_status}


def test_exit_code_field_of_proc_stat():
    head = "4242 (sglang::sched) uler) Z 1 " + " ".join(["0"] * 46)  # fields 5..50
    assert watch.parse_exit_code(head + " 0 256") == 256  # field 52
    assert watch.parse_exit_code(head) is None  # an old kernel: no field 52
    assert watch.exit_props(None) == {"ExecMainCode": "0", "ExecMainStatus": "0"}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--pid", "1"], "--pid needs --log"),
        (["--pid", "1", "--unit", "u", "--log", "x"], "not allowed with argument"),
        (["--unit", "u", "--log", "x"], "--log goes with --pid"),
        (["--pid", "1", "--log", "x", "--since-cursor", "c"], "with --pid the whole --log is read"),
        ([], "one of the arguments --unit --pid is required"),
    ],
)
def test_usage_errors(argv, message):
    proc = subprocess.run(
        gate_argv(argv, timeout=1), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.returncode == status.USAGE
    assert message in proc.stderr
