"""Our node scripts run with their output streamed to the operator: progress lines as they come,
the result line written to a file of its own (node/lib/result.py's RESULT_FILE_VAR) and read back
after, so the operator never reads a JSON line and every caller still parses the output as the
one protocol says."""

import shlex
import uuid

from pyinfra.api import StringCommand
from pyinfra.connectors.util import CommandOutput, OutputLine

from sglang_deploy.node.lib import result
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
