"""A follower's group preflight when its probe of rank 0's dist-init port fails
(operations/group.py `_reach`): rank 0 down is skipped; a change that moves the port is probed
where rank 0 listens now; otherwise the follower fails. The follower's dist_reach.py runs for
real against local sockets; rank 0 is a fake host that answers its unit and its argv."""

import socket
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from pyinfra.connectors.util import CommandOutput, OutputLine

from sglang_deploy.node import dist_reach
from sglang_deploy.operations import group
from sglang_deploy.plan import serving_group

SCRIPTS = str(Path(dist_reach.__file__).parent)


class Follower:
    """Runs its commands here, as the follower node would."""

    name = "node2"

    def __init__(self):
        self.logs = []

    def run_shell_command(self, command, print_output=False):
        done = subprocess.run(str(command), shell=True, capture_output=True, text=True, timeout=30)
        return done.returncode == 0, CommandOutput(
            [OutputLine("stdout", line) for line in done.stdout.splitlines()]
            + [OutputLine("stderr", line) for line in done.stderr.splitlines()]
        )

    def log(self, text, log_func=None):
        self.logs.append(text)

    def log_styled(self, text, **kwargs):
        self.logs.append(text)


class Leader:
    """Rank 0: its unit's state and its main process's argv."""

    name = "node1"

    def __init__(self, active, argv):
        self.active, self.argv = active, argv

    def run_shell_command(self, command, print_output=False):
        text = str(command)
        if text.startswith("systemctl show"):
            pid = 4242 if self.active == "active" else 0
            return True, SimpleNamespace(
                stdout_lines=[f"ActiveState={self.active}", f"MainPID={pid}"], stderr_lines=[]
            )
        assert "/cmdline" in text
        return self.active == "active", SimpleNamespace(stdout_lines=self.argv, stderr_lines=[])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def rank0_listens():
    """A port on 127.0.0.1 where rank 0's TCPStore listens."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


def reach(leader, port):
    hosts = [
        (
            "node1",
            {
                "profile": "baseline",
                "serving_group": "g1",
                "ssh_hostname": "127.0.0.1",
                "profile_overrides": {"server_args": {"tp-size": 2, "nnodes": 2}},
            },
        ),
        (
            "node2",
            {
                "profile": "baseline",
                "serving_group": "g1",
                "ssh_hostname": "127.0.0.2",
                "profile_overrides": {"server_args": {"tp-size": 2, "nnodes": 2}},
            },
        ),
    ]
    member = serving_group.resolve_checked(hosts, serving_group.profile_of)["node2"]
    follower = Follower()
    state = SimpleNamespace(inventory=SimpleNamespace(get_host={"node1": leader, "node2": follower}.get))
    ok = group._reach(state, follower, member, SCRIPTS, member.dist_init_addr(port), "sglang.service", 0.3)
    return ok, "\n".join(follower.logs)


def argv(port):
    return [
        "python3",
        "-m",
        "sglang.launch_server",
        "--nnodes",
        "2",
        "--node-rank",
        "0",
        "--dist-init-addr",
        f"127.0.0.1:{port}",
    ]


def test_a_change_that_moves_the_port_is_probed_where_rank_0_listens_now(rank0_listens):
    new = free_port()
    ok, said = reach(Leader("active", argv(rank0_listens)), new)
    assert ok, said
    assert (
        f"group g1 node-rank 1 of 2: rank 0 node1 listens on port {rank0_listens} until the group "
        f"restarts onto {new}: reached on {rank0_listens}"
    ) in said


def test_a_moved_port_whose_host_is_unreachable_fails():
    now, new = free_port(), free_port()
    ok, said = reach(Leader("active", argv(now)), new)
    assert not ok
    assert (
        f"cannot reach 127.0.0.1:{now} (rank 0's dist-init port until the restart moves it to {new})" in said
    )


def test_rank_0_running_on_the_planned_port_that_cannot_be_reached_fails():
    port = free_port()
    ok, said = reach(Leader("active", argv(port)), port)
    assert (
        not ok
        and f"group preflight failed: node-rank 1 cannot reach 127.0.0.1:{port}: connection refused" in said
    )


def test_rank_0_not_running_is_skipped_with_a_note():
    ok, said = reach(Leader("inactive", []), free_port())
    assert ok and "rank 0 node1 is not running: its dist-init port is checked once it runs (skipped)" in said


def test_rank_0_serving_alone_is_skipped_with_a_note():
    # Two serving nodes becoming one group: rank 0 runs, but without a dist-init port yet.
    ok, said = reach(
        Leader("active", ["python3", "-m", "sglang.launch_server", "--port", "30001"]), free_port()
    )
    assert (
        ok
        and (
            "rank 0 node1 serves alone (no --dist-init-addr): its dist-init port is checked "
            "once the group starts (skipped)"
        )
        in said
    )
