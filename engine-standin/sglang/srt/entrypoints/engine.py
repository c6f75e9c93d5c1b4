"""Launching and supervising the subprocesses, as SGLang 0.5.23's engine does.

* The environment SGLang sets for itself goes into os.environ BEFORE anything is spawned
  (NCCL_CUMEM_ENABLE=0 / NCCL_NVLS_ENABLE=0 only when unset, CUDA_DEVICE_MAX_CONNECTIONS=8,
  TRTLLM_ENABLE_PDL=1, CUTE_DSL_*, SGLANG_RUN_ID, PROMETHEUS_MULTIPROC_DIR with
  --enable-metrics); spawned children start a fresh interpreter with exactly that
  environment, which is what /proc/<pid>/environ of a scheduler shows.
* Start method `spawn`; one scheduler per TP rank on this node, plus a detokenizer on
  node 0.
* While waiting for "ready", a scheduler that dies raises SGLang's
  "Rank N scheduler died during initialization (exit code: X) ..." RuntimeError.
* Afterwards a watchdog (every 1 s, from the moment all were ready) logs "Subprocess <name>
  (pid=P) crashed with exit code X. Triggering SIGQUIT for cleanup..." for any subprocess
  gone with a code other than 0 (-15 after a SIGTERM included) and signals the launcher,
  which tears the tree down.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import multiprocessing.connection
import os
import random
import signal
import sys
import tempfile
import threading
import time
from typing import Optional

from sglang.srt.managers.detokenizer_manager import run_detokenizer_process
from sglang.srt.managers.scheduler import run_scheduler_process
from sglang.srt.sandbox.failures import failing_local_index
from sglang.srt.sandbox.knobs import Knobs
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils import get_free_port, kill_process_tree, set_ulimit

logger = logging.getLogger(__name__)

POLL_S = 0.05  # how often the main thread looks at children and signals
SETTLE_S = 0.05  # after a child death: time for a pending SIGTERM to be seen first


class Lifecycle:
    """Which signal does what, phase by phase, as in SGLang 0.5.23.

    loading (until the port opens): no SIGTERM handler, so SIGTERM kills the launcher at
      once (its workers follow through PR_SET_PDEATHSIG); SIGINT stops cleanly (exit 0).
    port open, before the first generation request: uvicorn's handlers capture SIGTERM and
      SIGINT (uvicorn_exit): the HTTP server shuts down, and the signal is raised again once
      uvicorn's lifespan is over.
    from the first generation request (the warmup's /generate; TokenizerManager.
      auto_create_handle_loop): SIGTERM only sets gracefully_exit (sigterm_handler), which the
      5-s sigterm_watchdog acts on; SIGQUIT gets the running-phase wording.
    fatal: SIGQUIT from a failing child or from the subprocess watchdog, or a failed warmup.
    """

    def __init__(self):
        self.stop = threading.Event()  # SIGINT while loading
        self.fatal = threading.Event()
        self.gracefully_exit = threading.Event()  # TokenizerManager.gracefully_exit
        self.uvicorn_exit = threading.Event()  # uvicorn's handle_exit
        self.captured: list[int] = []  # what uvicorn raises again at its end
        self.first_request_at: Optional[float] = None

    @property
    def running_phase(self) -> bool:
        return self.first_request_at is not None

    def install_signal_handlers(self) -> None:
        def on_sigquit(signum, frame):
            if self.running_phase:
                logger.error("SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
            else:
                logger.error("Received sigquit from a child process. It usually means the child failed.")
            self.fatal.set()

        signal.signal(signal.SIGQUIT, on_sigquit)
        signal.signal(signal.SIGINT, lambda signum, frame: self.stop.set())

    def server_started(self) -> None:
        """uvicorn's capture_signals, replaced for SIGTERM at the first request."""

        def on_signal(signum, frame):
            if signum == signal.SIGTERM and self.running_phase:
                logger.warning(
                    "SIGTERM received. signum=None frame=None. Draining requests and shutting down..."
                )
                self.gracefully_exit.set()
                return
            self.captured.append(signum)
            self.uvicorn_exit.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)

    def first_request(self) -> None:
        """Called by every generation request; the first one starts the running phase."""
        if self.first_request_at is None:
            self.first_request_at = time.monotonic()

    def raise_captured(self) -> None:
        """uvicorn, leaving capture_signals: default handlers back, the signal raised again."""
        for signum in reversed(self.captured):
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
        time.sleep(1)  # not reached for SIGTERM/SIGINT

    def ignore_sigterm(self, node_rank: int) -> None:
        """A ready node with --node-rank >= 1 cannot drain on its own: it stops when rank 0's
        ShutdownReq broadcast stops its schedulers (or when killed)."""

        def on_sigterm(signum, frame):
            logger.warning(
                f"SIGTERM received on node_rank {node_rank}; waiting for the rank-0 ShutdownReq "
                "broadcast to stop the schedulers."
            )

        signal.signal(signal.SIGTERM, on_sigterm)


_prometheus_multiproc_dir = None  # kept alive (and removed at exit) like SGLang's


def set_envs_and_config(server_args: ServerArgs) -> None:
    """The environment and limits SGLang sets in its own process before spawning."""
    global _prometheus_multiproc_dir
    if "NCCL_CUMEM_ENABLE" not in os.environ:
        os.environ["NCCL_CUMEM_ENABLE"] = "0"
    if "NCCL_NVLS_ENABLE" not in os.environ:
        os.environ["NCCL_NVLS_ENABLE"] = "0"
    os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "8"
    if os.environ.get("TRTLLM_ENABLE_PDL", "1") != "0":
        os.environ["TRTLLM_ENABLE_PDL"] = "1"
    os.environ.setdefault("CUTE_DSL_LOG_LEVEL", "30")
    os.environ.setdefault("CUTE_DSL_LOG_TO_CONSOLE", "1")
    os.environ["SGLANG_RUN_ID"] = f"sglang-run-{time.time()}-{random.randint(0, 100000000)}"
    if server_args.enable_metrics:
        if "PROMETHEUS_MULTIPROC_DIR" in os.environ:
            _prometheus_multiproc_dir = tempfile.TemporaryDirectory(
                dir=os.environ["PROMETHEUS_MULTIPROC_DIR"]
            )
        else:
            _prometheus_multiproc_dir = tempfile.TemporaryDirectory()
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = _prometheus_multiproc_dir.name
    set_ulimit()
    mp.set_start_method("spawn", force=True)


def _scheduler_died_error(rank: int, proc) -> RuntimeError:
    proc.join(timeout=10)
    return RuntimeError(
        f"Rank {rank} scheduler died during initialization (exit code: {proc.exitcode}). "
        "If exit code is -9 (SIGKILL), a common cause is the OS OOM killer. "
        "Run `dmesg -T | grep -i oom` to check."
    )


class Engine:
    """The subprocesses of one node and their supervision."""

    def __init__(self, server_args: ServerArgs, knobs: Knobs, context_len: int, lifecycle: Lifecycle):
        self.server_args = server_args
        self.knobs = knobs
        self.context_len = context_len
        self.lifecycle = lifecycle
        self.scheduler_procs: list[mp.Process] = []
        self.scheduler_ranks: list[int] = []
        self.readers = []
        self.shutdown_writers = []
        self.ready_at = 0.0  # when the subprocess watchdog starts (SGLang: after wait_for_ready)
        self.detokenizer_proc: Optional[mp.Process] = None
        self.scheduler_infos: list[dict] = []

    # ------------------------------------------------------------------ launch
    def launch(self) -> None:
        args = self.server_args
        tp_per_node = args.tp_size // args.nnodes
        ranks = range(tp_per_node * args.node_rank, tp_per_node * (args.node_rank + 1))
        # torch's init address: --dist-init-addr, else (as SGLang) one random port per node on
        # --host across nodes, 127.0.0.1 on one node (the stand-in's real NCCL only).
        default_host = (args.host or "127.0.0.1") if args.nnodes > 1 else "127.0.0.1"
        nccl_init_addr = args.dist_init_addr or f"{default_host}:{get_free_port()}"
        fail_index = failing_local_index(self.knobs.fail, len(ranks))
        for index, tp_rank in enumerate(ranks):
            reader, writer = mp.Pipe(duplex=False)
            shutdown_reader, shutdown_writer = mp.Pipe(duplex=False)  # SGLang's ZMQ ShutdownReq
            gpu_id = index  # --base-gpu-id 0, --gpu-id-step 1
            proc = mp.Process(
                target=run_scheduler_process,
                args=(
                    args,
                    self.knobs,
                    self.context_len,
                    tp_rank,
                    gpu_id,
                    index == fail_index,
                    nccl_init_addr,
                    writer,
                    shutdown_reader,
                ),
            )
            proc.start()
            writer.close()  # the child holds the only write end: EOF means it died
            shutdown_reader.close()
            self.shutdown_writers.append(shutdown_writer)
            self.scheduler_procs.append(proc)
            self.scheduler_ranks.append(tp_rank)
            self.readers.append(reader)
        if args.node_rank == 0:
            self.detokenizer_proc = mp.Process(target=run_detokenizer_process, args=(args,))
            self.detokenizer_proc.start()

    def _named_procs(self):
        procs = [(f"scheduler_{i}", p) for i, p in enumerate(self.scheduler_procs)]
        if self.detokenizer_proc is not None:
            procs.append(("detokenizer", self.detokenizer_proc))
        return procs

    # ------------------------------------------------------------------ start-up
    def wait_for_ready(self) -> bool:
        """Block until every scheduler reported ready. False if a stop was requested.

        Raises RuntimeError (SGLang's wording) when a subprocess dies first.
        """
        pending = dict(enumerate(self.readers))
        infos = {}
        fatal_since = None
        while pending:
            if self.lifecycle.stop.is_set():
                return False
            waitables = list(pending.values()) + [p.sentinel for _, p in self._named_procs()]
            ready = mp.connection.wait(waitables, timeout=POLL_S)
            for index, reader in list(pending.items()):
                if reader in ready:
                    try:
                        message = reader.recv()
                    except (EOFError, OSError):
                        continue  # the scheduler died; found below
                    if isinstance(message, dict) and message.get("status") == "ready":
                        infos[index] = message
                        del pending[index]
            dead = [(name, p) for name, p in self._named_procs() if not p.is_alive()]
            if dead:
                time.sleep(SETTLE_S)
                if self.lifecycle.stop.is_set():
                    return False
                for index, proc in enumerate(self.scheduler_procs):
                    if not proc.is_alive():
                        raise _scheduler_died_error(self.scheduler_ranks[index], proc)
                name, proc = dead[0]
                proc.join(timeout=1)
                logger.error(
                    f"Subprocess {name} (pid={proc.pid}) crashed with exit code {proc.exitcode}. "
                    "Triggering SIGQUIT for cleanup..."
                )
                raise RuntimeError("Initialization failed. Please see the error messages above.")
            if self.lifecycle.fatal.is_set():
                # A child signalled failure; its death follows within moments.
                fatal_since = fatal_since or time.monotonic()
                if time.monotonic() - fatal_since > 2.0:
                    raise RuntimeError("Initialization failed. Please see the error messages above.")
        self.scheduler_infos = [infos[i] for i in sorted(infos)]
        self.ready_at = time.monotonic()
        return True

    # ------------------------------------------------------------------ serving
    def crashed_child(self):
        """SubprocessWatchdog._check_processes: the first subprocess (schedulers, then the
        detokenizer) that is gone with an exit code other than 0, as (name, proc), or None."""
        for name, proc in self._named_procs():
            if proc.is_alive() or proc.exitcode == 0:
                continue
            return name, proc
        return None

    def a_scheduler_is_gone(self) -> bool:
        return any(not p.is_alive() for p in self.scheduler_procs)

    def send_shutdown_req(self) -> None:
        """The tokenizer manager's ShutdownReq; across nodes TP0 broadcasts it to every rank."""
        for writer in self.shutdown_writers:
            try:
                writer.send("shutdown")
            except OSError:
                pass  # that scheduler is gone already

    def wait_schedulers_gone(self, timeout: float) -> list[int]:
        """Poll every 0.1 s until no scheduler runs; the pids still running after timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(p.is_alive() for p in self.scheduler_procs):
            time.sleep(0.1)
        return [p.pid for p in self.scheduler_procs if p.is_alive()]

    def watch_follower(self) -> int:
        """--node-rank >= 1 after ready: block until the schedulers exit (SGLang's
        block_until_scheduler_exits), logging each; 1 if one signalled a failure (SIGQUIT),
        else 0 -- whatever their exit codes, as in 0.5.23."""
        for proc in self.scheduler_procs:
            while proc.is_alive() and not self.lifecycle.fatal.is_set():
                proc.join(timeout=POLL_S)
            if self.lifecycle.fatal.is_set():
                return 1
            logger.error(f"Scheduler or DataParallelController {proc.pid} terminated with {proc.exitcode}")
        time.sleep(SETTLE_S)  # a failing scheduler's SIGQUIT comes just before its exit
        return 1 if self.lifecycle.fatal.is_set() else 0

    # ------------------------------------------------------------------ teardown
    def kill_tree(self, include_parent: bool = False) -> None:
        """SGLang's kill_process_tree(os.getpid(), ...): SIGKILL every descendant (the
        subprocesses, multiprocessing's resource tracker), reaped; then, include_parent, the
        launcher itself, as SGLang's SIGQUIT handler and failed warmup end it (exit status 137:
        systemd reads a main process killed by a signal)."""
        pid = os.getpid()
        logger.info(f"kill_process_tree called: parent_pid={pid}, include_parent={include_parent}, pid={pid}")
        kill_process_tree(pid, include_parent=False)
        for _, proc in self._named_procs():
            if proc.pid is not None:
                proc.join(timeout=1)
        if include_parent:
            sys.stdout.flush()
            sys.stderr.flush()
            os.kill(pid, signal.SIGKILL)

    def shutdown(self, grace: float = 0.4, kill: bool = False) -> None:
        """SIGTERM the subprocesses, give them `grace` seconds, then SIGKILL what is left
        (including grandchildren and multiprocessing's resource tracker). kill: SIGKILL at once."""
        procs = [p for _, p in self._named_procs() if p.pid is not None]
        if kill:
            kill_process_tree(os.getpid(), include_parent=False)
        for proc in procs:
            if proc.is_alive():
                try:
                    os.kill(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + grace
        for proc in procs:
            proc.join(timeout=max(0.0, deadline - time.monotonic()))
        kill_process_tree(os.getpid(), include_parent=False)
        for proc in procs:
            proc.join(timeout=0.5)
