"""Our node scripts run with their output streamed to the operator: progress lines as they come,
the result line written to a file of its own (node/lib/result.py's RESULT_FILE_VAR) and read back
after, so the operator never reads a JSON line and every caller still parses the output as the
one protocol says."""

import json
import shlex
import time
import uuid

from pyinfra import logger
from pyinfra.api import StringCommand
from pyinfra.connectors.util import CommandOutput, OutputLine

from sglang_deploy import run_state
from sglang_deploy.node.lib import result, status
from sglang_deploy.operations import remote


def run_streamed(host, command):
    """Run ``command`` (a command line of our scripts) on ``host`` printing its output as it
    comes; (ok, output) with the script's result line as the output's last stdout line."""
    path = f"/tmp/sglang-deploy-result-{uuid.uuid4().hex}.json"
    ok, output = remote.run(
        host,
        StringCommand(f"export {result.RESULT_FILE_VAR}={shlex.quote(path)}; {command}"),
        print_output=True,
    )
    if result.parse(output.stdout_lines) is not None:  # a script that printed its own
        return ok, output
    _, written = remote.run(host, StringCommand(f"cat {path} 2>/dev/null; rm -f {path}"))
    lines = [line for line in written.stdout_lines if result.parse([line]) is not None]
    return ok, CommandOutput([*output.combined_lines, *(OutputLine("stdout", line) for line in lines)])


FOLLOW_S = 10.0  # one follow call's length: a lost channel costs at most this much re-reading
FOLLOW_RETRIES = 3  # follow calls in a row that may fail (a glitch of the link) before giving up


def run_detached(host, scripts, command, follow_s=FOLLOW_S):
    """Run the restart cycle ``command`` on ``host`` detached from this SSH session (a
    transient systemd unit, node/detach.py), following its progress as run_streamed shows it:
    a controller that dies leaves the cycle running to its end, and the next run reports it.
    Without systemd on the node, run_streamed, said once. (ok, output) as run_streamed's, the
    cycle's result line last; the output of a cycle that could not be started or followed has
    no result line, its cause last."""
    cycle_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
    ok, output = run_streamed(host, scripts.detach_start(command, cycle_id))
    started = result.parse(output.stdout_lines)
    if started is not None and started["status"] == status.NO_SYSTEMD:
        told = run_state.of().told_no_systemd  # said once per host and run
        if host.name not in told:
            told.add(host.name)
            host.log(
                f"{started['cause']}: the restart runs in this SSH session "
                "(a controller that dies mid-restart stops it there)",
                logger.warning,
            )
        return run_streamed(host, command)
    if started is None or started["status"] != status.READY:
        cause = started["cause"] if started else "detach.py printed no result"
        return False, CommandOutput([OutputLine("stderr", f"starting the restart cycle failed: {cause}")])
    shown, offset, failures = [], 0, 0
    while True:
        try:
            _, output = run_streamed(host, scripts.detach_follow(cycle_id, offset, follow_s))
        except Exception as exc:  # the link dropped: the cycle goes on, follow it again
            output, found = None, None
            why = f"{type(exc).__name__}: {exc}"
        else:
            found = result.parse(output.stdout_lines)
            why = found["cause"] if found else "detach.py follow printed no result"
        if found is None or found["status"] != status.READY:
            failures += 1
            if failures > FOLLOW_RETRIES:
                unit = started.get("unit")
                cause = (
                    f"lost the restart cycle {unit} ({why}); it goes on on the node: the next run reports it"
                )
                return False, CommandOutput([*shown, OutputLine("stderr", cause)])
            time.sleep(min(2.0 * failures, 5.0))
            continue
        failures = 0
        shown += [line for line in output.combined_lines if result.parse([line.line]) is None]
        offset = found["offset"]
        if found["state"] == "ended":
            break
    # Read: no later run need report it (a controller that dies before this line leaves it
    # to the next run, which says it once more rather than never).
    remote.run(host, StringCommand(scripts.detach_ack(cycle_id)))
    cycle = found.get("cycle")
    if cycle is None:
        exit_status = found.get("exit_status")
        return False, CommandOutput(
            [
                *shown,
                OutputLine("stderr", f"the restart cycle ended (exit status {exit_status}) with no result"),
            ]
        )
    line = json.dumps(cycle, sort_keys=True)
    return cycle.get("status") == status.READY, CommandOutput([*shown, OutputLine("stdout", line)])
