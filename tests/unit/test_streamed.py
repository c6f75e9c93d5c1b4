"""operations/streamed.py with node/lib/result.py's result file: a streamed script's output shows
its progress and no JSON; the caller still reads its result, and the scripts it runs print
theirs to it as before. The scripts run for real, here, through a shell as on a node."""

import json
import shlex
import subprocess
import sys
from pathlib import Path

from pyinfra.connectors.util import CommandOutput, OutputLine

from sglang_deploy.node import cycle
from sglang_deploy.node.lib import result, status
from sglang_deploy.operations.streamed import run_streamed

NODE = str(Path(cycle.__file__).parent)


class LocalHost:
    """Runs commands here; keeps what the operator would have seen of each."""

    def __init__(self):
        self.shown, self.commands = [], []

    def run_shell_command(self, command, print_output=False):
        self.commands.append(str(command))
        done = subprocess.run(str(command), shell=True, capture_output=True, text=True, timeout=60)
        if print_output:
            self.shown += done.stdout.splitlines() + done.stderr.splitlines()
        return done.returncode == 0, CommandOutput(
            [OutputLine("stdout", line) for line in done.stdout.splitlines()]
            + [OutputLine("stderr", line) for line in done.stderr.splitlines()]
        )


def _script(code, *details):
    """A command line of a script that prints a progress line and ends with emit(code)."""
    text = (
        f"import sys; sys.path.insert(0, {NODE!r}); from lib import result; print('working'); "
        f"sys.exit(result.emit({code}, {'no' if code else None!r}, **dict({list(details)!r})))"
    )
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(text)}"


def test_the_operator_sees_progress_and_the_caller_reads_the_result():
    host = LocalHost()
    ok, output = run_streamed(host, _script(3, ("profile", "p")))
    assert not ok and host.shown == ["working"]  # no JSON line shown
    found = result.parse(output.stdout_lines)
    assert found["status"] == 3 and found["cause"] == "no" and found["profile"] == "p"
    path = host.commands[0].split("=", 1)[1].split(";")[0]
    assert not Path(path).exists()  # read back and removed


def test_the_scripts_a_streamed_script_runs_print_their_results_to_it():
    steps = {name: _script(0) for name in cycle.STEPS}
    command = f"{shlex.quote(sys.executable)} {NODE}/cycle.py --steps-json {shlex.quote(json.dumps(steps))}"
    host = LocalHost()
    ok, output = run_streamed(host, command)
    found = result.parse(output.stdout_lines)
    assert ok and found["outcome"] == "served" and found["status"] == status.READY
    assert [step["status"] for step in found["steps"]] == [0] * 7  # each step's result was read
    assert not any(line.lstrip().startswith("{") for line in host.shown)


def test_a_script_that_dies_before_its_result_is_read_from_its_output():
    host = LocalHost()
    ok, output = run_streamed(host, f"{shlex.quote(sys.executable)} -c 'raise SystemExit(\"boom\")'")
    assert not ok and result.parse(output.stdout_lines) is None and output.stderr_lines == ["boom"]
