"""Stable before recorded: once up, the gate watches the server for readiness.settle_s, and right
before the save the cycle's recheck (gate.py --recheck) asks whether it is still the server the
gate saw ready. A server that prints "fired up" and dies 1.5 s later is a failed start with the
cause it logged, never ready, never recorded; one that dies after the gate is caught by the
recheck; one that stays up is ready once the settle time is over."""

import os
import shlex
import subprocess
import sys
import time

from test_node_cycle import _commands
from test_node_gate import FakeNode, finish, gate_argv
from test_node_gate_pid import MISSING_TOOL, ProcessNode

from sglang_deploy.node import cycle
from sglang_deploy.node.lib import procs, result, status

SETTLE = 2.0
CRASH = (
    "[2026-11-29 10:01:14] Subprocess scheduler_1 (pid=4243) crashed with exit code -9. "
    "Triggering SIGQUIT for cleanup...",
)
# A server's launcher, as far as the gate sees it: its log file, "fired up" after 0.5 s, then (a
# delay given) SGLang's watchdog line about a dead scheduler and its own end (kill_process_tree
# includes the parent: SIGKILL).
SERVER = """
import os, signal, sys, time
log, dies_after = sys.argv[1], float(sys.argv[2])
def say(*lines):
    with open(log, "a") as f:
        f.write("".join(line + "\\n" for line in lines))
say("[2026-11-29 10:01:10] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)")
time.sleep(0.5)
say("[2026-11-29 10:01:13] The server is fired up and ready to roll!")
if dies_after >= 0:
    time.sleep(dies_after)
    say(*%r)
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(120)
""" % (CRASH,)


def server(tmp_path, dies_after=-1.0):
    """A ProcessNode whose process is SERVER (dying ``dies_after`` s after "fired up"), its HTTP
    side up (/v1/models lists the name, /ping 200) from the start."""
    log = tmp_path / "server.log"
    node = ProcessNode(tmp_path, [sys.executable, "-c", SERVER, str(log), str(dies_after)])
    node.open_port()
    node.become_ready()
    return node


def pid_argv(node, *extra, settle=SETTLE):
    target = ["--pid", str(node.main.pid), "--log", str(node.logfile), "--systemctl", MISSING_TOOL]
    return gate_argv(target, node.port, "kimi-k2.5", 20, node.dir / "gate.json", extra, settle=settle)


def run(argv):
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    return proc.returncode, proc.stdout


def wait_gone(pid, limit=10):
    deadline = time.monotonic() + limit
    while procs.alive(pid) and time.monotonic() < deadline:  # a zombie: not reaped
        time.sleep(0.05)
    assert not procs.alive(pid)


def _assert_died_of_its_scheduler(rc, out, summary):
    assert rc == status.FAILED_START, out
    assert "ready in" not in out
    found = result.parse(out.splitlines())
    assert found["result"] == "FAILED_START"
    assert found["cause"].startswith("scheduler-died: a scheduler process died"), found
    assert "(killed by SIGKILL, often the host OOM killer)" in found["cause"]
    assert "after it was up" in found["cause"], found
    assert "Subprocess scheduler_1 (pid=4243) crashed" in out  # the excerpt of the start's lines
    assert summary["status_name"] == "FAILED_START" and summary["ready_at"] is None
    assert summary["cause"] == "scheduler-died"


# -- the gate: up, then watched for the settle time ------------------------------------------


def test_a_process_that_dies_after_fired_up_is_a_failed_start_never_ready(tmp_path):
    node = server(tmp_path, dies_after=1.5)
    try:
        rc, out = run(pid_argv(node))
    finally:
        node.close()
    print(out)
    _assert_died_of_its_scheduler(rc, out, node.summary())
    assert "up; watching it for 2s before the verdict" in out


def test_a_unit_whose_main_process_dies_after_fired_up_is_a_failed_start(tmp_path):
    node = FakeNode(tmp_path)
    try:
        node.open_port()
        node.become_ready()
        node.log(
            "[2026-11-29 10:01:10] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)"
        )
        proc = node.gate("--settle", str(SETTLE))
        node.log("[2026-11-29 10:01:13] The server is fired up and ready to roll!")
        time.sleep(1.5)
        node.main.kill()
        node.main.wait()
        time.sleep(0.4)  # systemd's view of the end comes a moment after the process is gone
        node.set_state(ActiveState="failed", SubState="failed", MainPID=0, ExecMainCode=2, ExecMainStatus=9)
        node.log(*CRASH)  # journald's copy may come a moment after systemd's view of the end
        rc, out = finish(proc)
    finally:
        node.close()
    print(out)
    _assert_died_of_its_scheduler(rc, out, node.summary())
    assert "unit failed/failed" in result.parse(out.splitlines())["cause"]


def test_a_death_logged_while_the_main_process_lingers_fails_at_once(tmp_path):
    node = server(tmp_path)
    try:
        proc = node.gate("--settle", "20")
        time.sleep(1.5)
        logged = time.monotonic()
        node.log(*CRASH)
        rc, out = finish(proc)
        detect = time.monotonic() - logged
    finally:
        node.close()
    assert rc == status.FAILED_START, out
    assert detect < 3.0  # not at the end of the settle time
    cause = result.parse(out.splitlines())["cause"]
    assert cause.startswith("scheduler-died: ") and "after it was up, process alive" in cause, cause


def test_a_request_error_logged_while_up_is_no_death(tmp_path):
    node = server(tmp_path)
    try:
        proc = node.gate("--settle", "1.5")
        time.sleep(1.0)
        node.log(
            "[2026-11-29 10:01:14] ValueError: The input (9000 tokens) is longer than the model's context"
        )
        rc, out = finish(proc)
    finally:
        node.close()
    assert rc == status.READY, out


def test_a_server_that_stays_up_is_ready_once_the_settle_time_is_over(tmp_path):
    node = server(tmp_path)
    try:
        rc, out = run(pid_argv(node))
        ended = time.time()
        summary = node.summary()
    finally:
        node.close()
    assert rc == status.READY, out
    lines = result.progress(out.splitlines())
    assert lines[-1].startswith("ready in ") and lines[-1].endswith("; stayed up 2s"), out
    # ready_at is when it was up; the verdict came the settle time later
    assert SETTLE <= ended - summary["ready_at"] < SETTLE + 3.0
    assert summary["main_pid"] == node.main.pid and summary["settle_s"] == SETTLE
    assert summary["cursor"] > 0  # the log read so far: the recheck reads on from there


# -- the recheck, right before the save ------------------------------------------------------


def test_the_recheck_passes_while_it_is_the_server_the_gate_saw_ready(tmp_path):
    node = server(tmp_path)
    try:
        assert run(pid_argv(node, settle=0.3))[0] == status.READY
        rc, out = run(pid_argv(node, "--recheck", settle=0.3))
    finally:
        node.close()
    assert rc == status.READY, out
    assert "recheck: still the server the gate saw ready: pid %d" % node.main.pid in out
    assert result.parse(out.splitlines())["main_pid"] == node.main.pid


def test_the_recheck_fails_a_server_that_died_after_its_gate_with_its_cause(tmp_path):
    node = server(tmp_path, dies_after=1.5)  # after a settle time of 0.3 s: the gate says ready
    try:
        rc, out = run(pid_argv(node, settle=0.3))
        assert rc == status.READY, out
        wait_gone(node.main.pid)
        rc, out = run(pid_argv(node, "--recheck", settle=0.3))
    finally:
        node.close()
    print(out)
    assert rc == status.FAILED_START, out
    cause = result.parse(out.splitlines())["cause"]
    assert cause.startswith("scheduler-died: a scheduler process died"), cause
    assert "process %d is gone (main process killed by signal 9)" % node.main.pid in cause
    assert "--- last 1 lines since the gate's verdict ---" in out and CRASH[0] in out
    summary = node.summary()  # the last start's account says so too
    assert summary["status_name"] == "FAILED_START" and summary["cause"] == "scheduler-died"


def test_the_recheck_fails_a_unit_that_systemd_restarted(tmp_path):
    node = FakeNode(tmp_path)
    other = None
    try:
        node.open_port()
        node.become_ready()
        node.log("[2026-11-29 10:01:13] The server is fired up and ready to roll!")
        assert finish(node.gate("--settle", "0.3"))[0] == status.READY
        other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        node.set_state(MainPID=other.pid, NRestarts=1, InvocationID="ffff0000")
        rc, out = finish(node.gate("--settle", "0.3", "--recheck"))
    finally:
        if other is not None:
            other.kill()
            other.wait()
        node.close()
    assert rc == status.FAILED_START, out
    assert "unit was restarted by systemd" in result.parse(out.splitlines())["cause"]


def test_the_recheck_fails_a_server_that_no_longer_answers_ping(tmp_path):
    node = server(tmp_path)
    try:
        assert run(pid_argv(node, settle=0.3))[0] == status.READY
        node.health = 503  # SIGTERM'd: SGLang's is_healthy() cleared
        rc, out = run(pid_argv(node, "--recheck", settle=0.3))
    finally:
        node.close()
    assert rc == status.FAILED_START, out
    assert result.parse(out.splitlines())["cause"].startswith("not-serving: /ping 503 (process alive")


def test_the_recheck_of_a_start_the_gate_did_not_pass_fails(tmp_path):
    node = server(tmp_path, dies_after=0.5)
    try:
        assert run(pid_argv(node))[0] == status.FAILED_START
        rc, out = run(pid_argv(node, "--recheck"))
    finally:
        node.close()
    assert rc == status.FAILED_START, out
    assert result.parse(out.splitlines())["cause"].startswith("not-ready: the gate's report")


def test_the_recheck_needs_the_gates_report():
    rc, out = run(gate_argv(["--pid", str(os.getpid()), "--log", "/dev/null"], extra=["--recheck"]))
    assert rc == status.USAGE and "--recheck reads the gate's report: --json FILE" in out


# -- the cycle, with the real gate and recheck -----------------------------------------------


def _cycle(tmp_path, node, capsys, settle, decode_s=0.0):
    commands = _commands(tmp_path)
    commands["gate"] = shlex.join(pid_argv(node, settle=settle))
    commands["recheck"] = shlex.join(pid_argv(node, "--recheck", settle=settle))
    commands["decode"] = 'sleep %g && echo \'{"status": 0, "result": "READY"}\'' % decode_s
    code = cycle.cycle(commands)
    found = result.parse(capsys.readouterr().out.splitlines())
    return code, found, (tmp_path / "ran").read_text().split()


def test_the_cycle_never_records_a_server_that_died_after_fired_up(tmp_path, capsys):
    node = server(tmp_path, dies_after=1.5)
    try:
        code, found, ran = _cycle(tmp_path, node, capsys, SETTLE)
    finally:
        node.close()
    assert code == status.FAILED_START and found["cause"].startswith("scheduler-died: "), found
    assert "save" not in ran and "restore" in ran  # rolled back (its gate fails too: nothing runs)
    assert found["outcome"] == "rollback_failed" and found["restored"] is True


def test_the_cycle_never_records_a_server_that_died_after_its_gate(tmp_path, capsys):
    # Ready after a settle time of 0.3 s; dead 1.5 s after "fired up", while its decode check ran.
    node = server(tmp_path, dies_after=1.5)
    try:
        code, found, ran = _cycle(tmp_path, node, capsys, 0.3, decode_s=2.0)
    finally:
        node.close()
    assert code == status.FAILED_START and found["cause"].startswith("scheduler-died: "), found
    assert [s["step"] for s in found["steps"]][:6] == [
        "preflight",
        "engine venv switch",
        "restart",
        "readiness gate",
        "worker environment check",
        "decode check",
    ]
    assert found["steps"][6]["step"] == "recheck of the gated server" and found["steps"][6]["status"]
    assert "save" not in ran and "restore" in ran
