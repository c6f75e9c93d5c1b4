"""The readiness gate's verdict holds at the verdict: a server that answered /v1/models and /ping,
logged "fired up" and then died before the gate said "ready" is a failed start with its cause.

The gate runs in this process with its own watch (ProcessWatch / UnitWatch) wrapped so that the
server dies at the one moment no earlier check can see: right after the read of its journal that
hands over the "fired up" line, with /ping already 200."""

import os
import signal
import time

import pytest
from test_node_gate import FakeNode, gate_argv
from test_node_gate_pid import MISSING_TOOL, ProcessNode

from sglang_deploy.node import gate
from sglang_deploy.node.lib import procs, result, status, watch

FIRED_UP = "[2026-11-29 10:01:13] The server is fired up and ready to roll!"
CRASH = (
    "[2026-11-29 10:01:13 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
)


def _dies_after_fired_up(base):
    """``base`` (a watch class) whose server logs "fired up" once /ping is 200, then the crash's
    lines, and dies: all between the journal read that sees "fired up" and the verdict."""

    class DiesAfterFiredUp(base):
        node = gate_ = None
        died = False

        def read(self, cursor):
            if self.died or not self.gate_.probe.up.is_set():
                return super().read(cursor)
            self.node.log(FIRED_UP)
            entries = super().read(cursor)  # the gate sees "fired up" in this read
            self.node.log(*CRASH)
            self.node.die()
            self.died = True
            return entries

    return DiesAfterFiredUp


def _gate(node, target, watch_):
    args = gate.parser().parse_args(gate_argv(target, node.port, "kimi-k2.5", 20, node.dir / "gate.json")[2:])
    g = gate.Gate(args, watch=watch_)
    watch_.node, watch_.gate_ = node, g
    return g


def _assert_failed_with_its_cause(node, code, capsys):
    out = capsys.readouterr().out
    assert code == status.FAILED_START, out
    assert "ready in" not in out
    found = result.parse(out.splitlines())
    assert found["result"] == "FAILED_START"
    assert found["cause"].startswith("cuda-oom: CUDA out of memory"), found
    assert "at the ready verdict" in found["cause"]
    summary = node.summary()
    assert summary["status_name"] == "FAILED_START" and summary["ready_at"] is None
    assert summary["cause"] == "cuda-oom"


class _ProcessNode(ProcessNode):
    def die(self):
        os.kill(self.main.pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while procs.alive(self.main.pid) and time.monotonic() < deadline:  # a zombie: not reaped
            time.sleep(0.01)


class _UnitNode(FakeNode):
    def die(self):
        self.main.kill()
        self.main.wait()
        self.set_state(ActiveState="failed", SubState="failed", MainPID=0, ExecMainCode=2, ExecMainStatus=9)


@pytest.fixture
def process_node(tmp_path):
    n = _ProcessNode(tmp_path)
    yield n
    n.close()


@pytest.fixture
def unit_node(tmp_path):
    n = _UnitNode(tmp_path)
    yield n
    n.close()


def test_a_process_that_dies_after_fired_up_is_a_failed_start(process_node, capsys):
    node = process_node
    node.open_port()
    node.become_ready()  # /v1/models lists the name, /ping 200
    node.log("[2026-11-29 10:01:10] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)")
    target = ["--pid", str(node.main.pid), "--log", str(node.logfile), "--systemctl", MISSING_TOOL]
    dying = _dies_after_fired_up(watch.ProcessWatch)(node.main.pid, str(node.logfile))
    code = _gate(node, target, dying).run()
    assert dying.died
    _assert_failed_with_its_cause(node, code, capsys)


def test_a_unit_whose_main_process_dies_after_fired_up_is_a_failed_start(unit_node, capsys):
    node = unit_node
    node.open_port()
    node.become_ready()
    node.log("[2026-11-29 10:01:10] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)")
    target = ["--unit", "sglang.service", "--systemctl", node.systemctl, "--journalctl", node.journalctl]
    dying = _dies_after_fired_up(watch.UnitWatch)("sglang.service", node.systemctl, node.journalctl)
    code = _gate(node, target, dying).run()
    assert dying.died
    _assert_failed_with_its_cause(node, code, capsys)


def test_a_server_alive_at_the_verdict_is_ready(process_node, capsys):
    node = process_node
    node.open_port()
    node.become_ready()
    node.log(FIRED_UP)
    target = ["--pid", str(node.main.pid), "--log", str(node.logfile), "--systemctl", MISSING_TOOL]
    code = _gate(node, target, watch.ProcessWatch(node.main.pid, str(node.logfile))).run()
    out = capsys.readouterr().out
    assert code == status.READY, out
    assert node.summary()["ready_at"] is not None
