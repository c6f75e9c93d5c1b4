"""The scheduler subprocess: one per tensor-parallel rank, started with `spawn`.

Like SGLang's run_scheduler_process: set the process title (sglang::scheduler_TP<rank>;
plain sglang::scheduler with --tp-size 1, where SGLang's log prefix is empty too),
die with the parent, run the model runner's start-up, report ready to the launcher through
a pipe, then serve until the launcher's ShutdownReq (a second pipe; SGLang sends it over ZMQ
after its drain), then exit 0. Across nodes TP0 broadcasts the ShutdownReq to every rank; the
others wait for that broadcast. No SIGTERM handler, as in 0.5.23 (run_scheduler_process installs
none): SIGTERM kills a scheduler at once (exit code -15), wherever it came from.
On an exception it logs "Scheduler hit an exception: <traceback>",
sends SIGQUIT to the launcher (SGLang's child-failure signal) and exits 1.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading

from setproctitle import setproctitle

from sglang.srt.hf_transformers_utils import get_config
from sglang.srt.model_executor.model_runner import GPU_TOTAL_GB, ModelRunner
from sglang.srt.sandbox import dist_group, failures
from sglang.srt.sandbox.knobs import Knobs
from sglang.srt.sandbox.proctitle import kill_itself_when_parent_died
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils import configure_logger, get_exception_traceback

logger = logging.getLogger(__name__)


class Scheduler:
    def __init__(
        self,
        server_args: ServerArgs,
        knobs: Knobs,
        context_len: int,
        tp_rank: int,
        gpu_id: int,
        fails_here: bool,
        nccl_init_addr: str,
    ):
        self.server_args = server_args
        self.knobs = knobs
        self.fails_here = fails_here
        hf_config = get_config(server_args.model_path)
        self.model_runner = ModelRunner(
            server_args, knobs, hf_config, context_len, tp_rank, gpu_id, fails_here, nccl_init_addr
        )
        runner = self.model_runner
        self.max_total_num_tokens = runner.max_total_num_tokens
        self.max_running_requests = min(4096, max(1, runner.max_total_num_tokens // 2))
        self.chunked_prefill_size = 8192 if GPU_TOTAL_GB > 60 else 4096
        self.max_prefill_tokens = 16384
        self.context_len = context_len
        if tp_rank == 0:
            self._log_capacity(runner.avail_gb)

    def _log_capacity(self, avail_gb: float) -> None:
        logger.info(
            f"max_total_num_tokens={self.max_total_num_tokens}, "
            f"chunked_prefill_size={self.chunked_prefill_size}, "
            f"max_prefill_tokens={self.max_prefill_tokens}, "
            f"max_running_requests={self.max_running_requests}, "
            f"context_len={self.context_len}, "
            f"available_gpu_mem={avail_gb:.2f} GB"
        )

    def ready_info(self) -> dict:
        return {
            "status": "ready",
            "max_total_num_tokens": self.max_total_num_tokens,
            "max_req_input_len": self.context_len - 1,
            "max_running_requests": self.max_running_requests,
            "chunked_prefill_size": self.chunked_prefill_size,
        }

    def event_loop(self, shutdown_reader) -> None:
        """Serve until the ShutdownReq (across nodes: rank 0's broadcast of it), or until killed.
        The launcher does the generation; the scheduler only lives."""
        if self.knobs.fail == "scheduler-dies-after-ready" and self.fails_here:
            threading.Thread(target=_die_after, args=(self.knobs.fail_after_seconds,), daemon=True).start()
        group = self.model_runner.group
        shutdown = threading.Event()

        def receive_shutdown():
            try:
                shutdown_reader.recv()
            except (EOFError, OSError):
                return  # the launcher is gone: PR_SET_PDEATHSIG ends this process
            shutdown.set()
            if isinstance(group, dist_group.Master):
                group.request_shutdown()

        threading.Thread(target=receive_shutdown, name="shutdown-req", daemon=True).start()
        if group is not None:
            group.serve()  # a non-zero rank returns on rank 0's broadcast only
            return
        shutdown.wait()


def _die_after(seconds: float) -> None:
    failures.sleep_then(seconds)
    failures.die_like_oom_killer()


def run_scheduler_process(
    server_args: ServerArgs,
    knobs: Knobs,
    context_len: int,
    tp_rank: int,
    gpu_id: int,
    fails_here: bool,
    nccl_init_addr: str,
    pipe_writer,
    shutdown_reader,
) -> None:
    prefix = f" TP{tp_rank}" if server_args.tp_size > 1 else ""
    setproctitle(f"sglang::scheduler{prefix.replace(' ', '_')}")
    kill_itself_when_parent_died()
    # Ctrl+C reaches the whole process group; the launcher alone decides how to stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    configure_logger(prefix)
    parent_pid = os.getppid()

    try:
        scheduler = Scheduler(server_args, knobs, context_len, tp_rank, gpu_id, fails_here, nccl_init_addr)
        pipe_writer.send(scheduler.ready_info())
        scheduler.event_loop(shutdown_reader)
    except Exception:
        traceback = get_exception_traceback()
        logger.error(f"Scheduler hit an exception: {traceback}")
        try:
            os.kill(parent_pid, signal.SIGQUIT)
        except ProcessLookupError:
            pass
        sys.exit(1)
