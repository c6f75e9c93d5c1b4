"""node/detach.py and the controller's side of it (operations/streamed.run_detached): a restart
cycle run as a transient unit, detached from the deploy's session, followed from byte offsets,
its result read after its end; the deploy lock (node/lock.py) waits for a cycle that still runs
and reports one that ended while no controller watched. Everything runs for real, here, with a
fake systemd-run and systemctl (conftest.FakeSystemd)."""

import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyinfra.connectors.util import CommandOutput, OutputLine

from sglang_deploy.node import detach
from sglang_deploy.node.lib import result, status
from sglang_deploy.operations import streamed
from sglang_deploy.operations.deploy_lock import previous_cycle_line
from sglang_deploy.plan import commands

NODE = Path(detach.__file__).parent

# A cycle: three lines, half of a fourth; waits for GO; the rest of it and two more; its result.
CYCLE = r"""
import os, sys, time
sys.path.insert(0, sys.argv[1])
from lib import result
for i in range(3):
    print("line %d" % i, flush=True)
sys.stdout.write("line 3 begins"); sys.stdout.flush()
while not os.path.exists(sys.argv[2]):
    time.sleep(0.02)
print(" and ends", flush=True)
for i in range(4, 6):
    print("line %d" % i, flush=True)
sys.exit(result.emit(0, None, outcome="served", steps=[]))
"""
ALL_LINES = ["line 0", "line 1", "line 2", "line 3 begins and ends", "line 4", "line 5"]


class Node:
    """One service's cycles directory and the fake systemd the scripts are pointed at."""

    def __init__(self, tmp_path, systemd):
        self.dir, self.systemd, self.go = tmp_path / "run" / "sglang", systemd, tmp_path / "go"
        (tmp_path / "cycle.py").write_text(CYCLE)
        self.cycle = f"{sys.executable} {tmp_path / 'cycle.py'} {NODE} {self.go}"
        self.fakes = ["--systemctl", systemd.systemctl]

    def detach(self, action, *args):
        argv = [sys.executable, str(NODE / "detach.py"), action, "--dir", str(self.dir), *self.fakes, *args]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        return done.returncode, done.stdout.splitlines()

    def start(self, cycle_id="1", command=None, booted=None):
        return self.detach(
            "start",
            *("--id", cycle_id, "--service", "sglang", "--profile", "new-profile"),
            *("--command", command or self.cycle, "--systemd-run", self.systemd.systemd_run),
            *("--booted", str(booted or self.systemd.booted)),
        )

    def follow(self, offset, cycle_id="1", for_s=0.3):
        _, lines = self.detach("follow", "--id", cycle_id, "--from-offset", str(offset), "--for", str(for_s))
        return result.progress(lines), result.parse(lines)

    def wait_ended(self, cycle_id="1"):
        unit = detach.unit_name("sglang", cycle_id)
        deadline = time.monotonic() + 30
        while self.systemd.state(unit) != "inactive":
            assert time.monotonic() < deadline
            time.sleep(0.05)

    def lock(self, wait_s, stdin=subprocess.DEVNULL):
        argv = [sys.executable, str(NODE / "lock.py"), "--path", str(self.dir.parent / "sglang.lock")]
        argv += ["--wait", str(wait_s), "--holder", "me", "--cycles-dir", str(self.dir), *self.fakes]
        return subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE, text=True)


@pytest.fixture
def node(tmp_path, fake_systemd):
    return Node(tmp_path, fake_systemd)


def _follow_until(node, count, offset=0):
    """Follow calls until ``count`` lines were shown: (lines, offset)."""
    shown, deadline = [], time.monotonic() + 30
    while len(shown) < count:
        assert time.monotonic() < deadline, shown
        lines, found = node.follow(offset)
        shown += lines
        offset = found["offset"]
    return shown, offset


def test_progress_is_followed_from_offsets_without_duplicates_or_gaps(node):
    code, lines = node.start()
    started = result.parse(lines)
    assert code == status.READY and started["unit"] == "sglang-deploy-cycle-sglang-1.service"
    assert "--collect" in node.systemd.calls()[0]
    shown, offset = _follow_until(node, 3)
    lines, found = node.follow(offset)  # the half line waits for its end: not shown, not skipped
    assert (lines, found["state"], found["offset"]) == ([], "running", offset)
    node.go.write_text("")
    while found["state"] == "running":
        lines, found = node.follow(found["offset"], for_s=5)
        shown += lines
    assert shown == ALL_LINES
    assert found["cycle"]["outcome"] == "served" and found["exit_status"] == 0  # the result, after the end
    log = node.dir / "cycle-1.log"
    assert found["offset"] == log.stat().st_size and oct(log.stat().st_mode & 0o777) == "0o600"
    assert oct(node.dir.stat().st_mode & 0o777) == "0o700"


def test_start_refuses_a_second_cycle_of_the_service_while_one_runs(node):
    node.start()
    code, lines = node.start("2")
    assert code == status.LOCKED and "sglang-deploy-cycle-sglang-1.service" in result.parse(lines)["cause"]
    node.go.write_text("")


def test_without_systemd_nothing_starts(node, tmp_path):
    code, lines = node.start(booted=tmp_path / "no-systemd")
    assert code == status.NO_SYSTEMD and node.systemd.calls() == []


def test_a_cycle_killed_on_the_node_ends_with_no_result(node):
    node.start(command="sleep 2")
    node.systemd.set_state(detach.unit_name("sglang", "1"), "failed")  # stopped: no end file written
    _, found = node.follow(0)
    assert found["state"] == "ended" and found["cycle"] is None and found["exit_status"] is None


def _events(proc):
    out, _ = proc.communicate(timeout=60)
    return proc.returncode, result.events(out.splitlines())


def test_a_cycle_that_ended_unwatched_is_reported_once_by_the_next_run(node):
    node.start()
    node.go.write_text("")  # no controller follows it
    node.wait_ended()
    _, listed = node.detach("status")
    assert [c["state"] for c in result.parse(listed)["cycles"]] == ["ended"]
    code, events = _events(node.lock(5))
    assert code == 0 and [e["event"] for e in events] == ["previous_cycle", "locked"]
    assert previous_cycle_line(events[0]).endswith("finished while no controller watched: served new-profile")
    assert events[0]["started"] in previous_cycle_line(events[0])
    code, events = _events(node.lock(5))  # said once
    assert [e["event"] for e in events] == ["locked"]
    assert result.parse(node.detach("status")[1])["cycles"] == []


def test_a_follow_whose_controller_died_leaves_the_end_for_the_next_run_to_report(node):
    # The follow's SSH session outlives a controller killed mid-cycle: it sees the end, but
    # nobody reads it, so the cycle stays unreported until a controller acknowledges it.
    node.start()
    node.go.write_text("")
    node.wait_ended()
    _follow_until(node, len(ALL_LINES))
    listed = result.parse(node.detach("status")[1])["cycles"]
    assert [c["state"] for c in listed] == ["ended"]
    code, events = _events(node.lock(5))
    assert [e["event"] for e in events] == ["previous_cycle", "locked"]


def test_a_controller_that_read_the_end_acknowledges_it(node, monkeypatch):
    monkeypatch.setattr(streamed.time, "sleep", lambda s: None)
    node.go.write_text("")
    ok, _ = streamed.run_detached(LocalHost(), Scripts(node), node.cycle, follow_s=0.5)
    assert ok and result.parse(node.detach("status")[1])["cycles"] == []


def test_the_lock_is_refused_while_a_cycle_runs_and_taken_once_it_ended(node):
    node.start()
    _follow_until(node, 3)
    code, events = _events(node.lock(0.5))
    assert code == status.LOCKED
    assert [e["event"] for e in events][0] == "cycle_running"
    assert [e["line"] for e in events if e["event"] == "cycle_progress"] == ALL_LINES[:3]
    assert "sglang-deploy-cycle-sglang-1.service" in events[-1]["holder"] and events[-1]["event"] == "busy"
    waiting = node.lock(30)
    time.sleep(1)
    node.go.write_text("")
    code, events = _events(waiting)
    assert code == 0 and [e["event"] for e in events if e["event"] != "cycle_progress"] == [
        "cycle_running",
        "previous_cycle",
        "locked",
    ]
    assert [e["line"] for e in events if e["event"] == "cycle_progress"] == ALL_LINES
    assert "ended while this run waited for it: served new-profile" in previous_cycle_line(events[-2], True)


def test_previous_cycle_lines_say_what_the_node_serves():
    base = {"started": "2026-12-01 12:00:01", "profile": "new"}
    rolled = dict(base, outcome="rolled_back", cause="gate: oom", restored_profile="old")
    assert previous_cycle_line(rolled) == (
        "the restart of the previous run (started 2026-12-01 12:00:01) finished while no controller "
        "watched: rolled back: serves old (gate: oom)"
    )
    assert "no result (exit status None): state unknown" in previous_cycle_line(dict(base, outcome=None))


# The controller's side: run_detached over a host that runs commands here.


class LocalHost:
    name = "node1"

    def __init__(self, drop_follow_at=()):
        self.shown, self.logged, self.calls = [], [], 0
        self.drop_follow_at = set(drop_follow_at)  # the follow calls whose link drops

    def log(self, text, level=None):
        self.logged.append(text)

    def run_shell_command(self, command, print_output=False):
        command = str(command)
        if "detach.py" in command and " follow " in command:
            self.calls += 1
            if self.calls in self.drop_follow_at:
                raise OSError("Socket is closed")
        done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=60)
        if print_output:
            self.shown += done.stdout.splitlines()
        return done.returncode == 0, CommandOutput(
            [OutputLine("stdout", line) for line in done.stdout.splitlines()]
            + [OutputLine("stderr", line) for line in done.stderr.splitlines()]
        )


class Scripts:
    """NodeScripts' detach commands, pointed at the fake systemd."""

    def __init__(self, node, booted=None):
        self.node, self.booted = node, booted or node.systemd.booted

    def detach_start(self, command, cycle_id):
        line = commands.detach_start_command(
            str(NODE), str(self.node.dir), "sglang", cycle_id, "new-profile", command
        )
        return f"{line} --systemd-run {self.node.systemd.systemd_run} --booted {self.booted} --systemctl {self.node.systemd.systemctl}"

    def detach_follow(self, cycle_id, offset, for_s=10.0):
        line = commands.detach_follow_command(str(NODE), str(self.node.dir), cycle_id, offset, for_s)
        return f"{line} --systemctl {self.node.systemd.systemctl}"

    def detach_ack(self, cycle_id):
        return commands.detach_ack_command(str(NODE), str(self.node.dir), cycle_id)


def test_the_controller_shows_progress_as_today_and_reads_the_result(node, monkeypatch):
    monkeypatch.setattr(streamed.time, "sleep", lambda s: None)
    node.go.write_text("")
    host = LocalHost()
    ok, output = streamed.run_detached(host, Scripts(node), node.cycle, follow_s=0.5)
    assert ok and host.shown == ALL_LINES  # no JSON line shown
    assert result.parse(output.stdout_lines)["outcome"] == "served"


def test_a_controller_whose_link_drops_mid_cycle_picks_up_where_it_was(node, monkeypatch):
    host = LocalHost(drop_follow_at={2, 3})
    real_sleep = time.sleep

    def sleep(seconds):  # the link comes back; the cycle goes on meanwhile
        node.go.write_text("") if host.calls >= 3 else None
        real_sleep(0.05)

    monkeypatch.setattr(streamed.time, "sleep", sleep)
    ok, output = streamed.run_detached(host, Scripts(node), node.cycle, follow_s=0.5)
    assert ok and host.shown == ALL_LINES
    assert [line for line in output.stdout_lines if result.parse([line]) is None] == ALL_LINES
    assert result.parse(output.stdout_lines)["outcome"] == "served"


def test_a_cycle_lost_for_good_is_said_to_go_on_on_the_node(node, monkeypatch):
    monkeypatch.setattr(streamed.time, "sleep", lambda s: None)
    host = LocalHost(drop_follow_at=range(1, 10))
    ok, output = streamed.run_detached(host, Scripts(node), node.cycle, follow_s=0.2)
    assert not ok and result.parse(output.stdout_lines) is None
    assert "it goes on on the node: the next run reports it" in output.stderr_lines[-1]
    node.go.write_text("")


def test_without_systemd_the_cycle_runs_in_the_session_said_once(node, tmp_path, monkeypatch):
    node.go.write_text("")
    host = LocalHost()
    for _ in range(2):
        ok, output = streamed.run_detached(host, Scripts(node, tmp_path / "none"), node.cycle)
        assert ok and result.parse(output.stdout_lines)["outcome"] == "served"
    assert len(host.logged) == 1 and "runs in this SSH session" in host.logged[0]
    assert node.systemd.calls() == []


def test_the_lock_command_names_the_cycles_of_its_service():
    assert commands.cycles_dir_of_lock("/run/sglang-deploy/sglang.lock") == "/run/sglang-deploy/sglang"
    line = commands.lock_command("/run/x/s.lock", 5, "me", directory="/d", cycles_dir="/run/x/s")
    assert line.endswith("--cycles-dir /run/x/s")


@pytest.mark.parametrize("asked, given", [(None, "30"), ("700", "700")])
def test_a_stop_of_the_unit_leaves_it_the_time_asked_for(node, asked, given):
    code, _ = node.detach(
        "start",
        *("--id", "1", "--service", "sglang", "--profile", "p"),
        *(("--stop-timeout", asked) if asked else ()),
        *("--command", node.cycle, "--systemd-run", node.systemd.systemd_run),
        *("--booted", str(node.systemd.booted)),
    )
    assert code == 0
    assert f"--property=TimeoutStopSec={given}" in node.systemd.calls()[0].split()
