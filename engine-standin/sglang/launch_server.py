"""Launch the inference server: `python -m sglang.launch_server --model-path ... [options]`.

Exit status: 0 after a clean stop (a SIGTERM to the launcher drained on rank 0; a follower
whose schedulers ended), killed by SIGTERM when stopped while loading (no handler yet, as in
SGLang), 2 for a bad flag (argparse) or a bad SGLANG_STANDIN_* knob, 1 for a failure while
starting (an uncaught exception's traceback, a scheduler dead before ready), and killed by
SIGKILL of itself, as SGLang's kill_process_tree(os.getpid()) ends it, where a subprocess died
once serving (also one killed by a stop's SIGTERM to every process) or the warmup failed.
Whatever happens, the process tree goes with the launcher. docs/sglang-shutdown.md: how SGLang
0.5.23 stops.
"""

import os
import sys

from sglang.srt.server_args import prepare_server_args
from sglang.srt.utils import kill_process_tree


def run_server(server_args) -> int:
    from sglang.srt.entrypoints.http_server import launch_server

    return launch_server(server_args)


if __name__ == "__main__":
    server_args = prepare_server_args(sys.argv[1:])
    try:
        code = run_server(server_args)
    finally:
        kill_process_tree(os.getpid(), include_parent=False)
    # Gone at once, as SGLang's SIGQUIT handler SIGKILLs its launcher, without the interpreter
    # tearing down the HTTP stack's modules (up to a second on a busy machine): the stop
    # timings stay the ones README.md states. The tree is dead already; nothing is left to run.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
