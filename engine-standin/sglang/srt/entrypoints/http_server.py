"""The HTTP server and the launch sequence (SGLang's http_server.launch_server).

Sequence, as in SGLang 0.5.23:
  1. read config.json (a wrong --model-path raises OSError here: exit 1, nothing spawned);
  2. log `server_args={...}`, set the environment, spawn the subprocesses;
  3. wait until every scheduler is ready -- the port stays CLOSED meanwhile;
  4. bind the port and log uvicorn's start-up lines; /v1/models, /model_info answer at
     once, /health, /health_generate, /ping and /ready answer 503 (status Starting);
  5. warmup: sleep 1 s, GET /model_info (again every 1 s until 200), POST a short /generate
     (the first forward pass takes SGLANG_STANDIN_WARMUP_SECONDS); its 200 sets the status
     Up, so /ping and /ready answer 200 from here on; POST /freeze_gc, then log "The server
     is fired up and ready to roll!". /health answers 200 once Up, after a one-token
     generation and at least 1 s. A failed warmup logs "Initialization failed. warmup error:
     <traceback>" and tears the tree down, itself last (SIGKILL).
  6. supervise (_supervise): SIGTERM to the launcher -> drain on SGLang's 5-s clock,
     ShutdownReq, clean stop, exit 0 (the deploy's unit, KillMode=mixed); a subprocess gone
     (seen by the 1-s watchdog) -> SIGQUIT, the tree and the launcher SIGKILLed. A SIGTERM to
     every process at once (KillMode=control-group) kills the schedulers first: that way.
     docs/sglang-shutdown.md has the facts and their sources.

As in 0.5.23, /ping turns 200 a moment before the "fired up" line (the /freeze_gc round trip).
Across nodes (--nnodes > 1; sandbox/dist_group.py for the rendezvous): every scheduler waits in
"Init parallel" until all ranks of all nodes met at --dist-init-addr. Nodes with --node-rank >= 1
run no tokenizer and no API: once their schedulers are ready they start SGLang's dummy health
server on --port (/health, /health_generate, /ping: always 200; uvicorn at log level warning, so
no access lines), ignore SIGTERM, and block until their schedulers exit -- on rank 0's shutdown
broadcast, on a SIGTERM of their own (systemctl stop signals the whole unit), or failing when
rank 0 is lost.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Optional

# SGLang's http_server imports its HTTP/JSON stack here, at server start. The stand-in serves
# with http.server, but a venv that lacks one of them (or holds a broken one) fails the start
# as SGLang's does: the import's traceback, exit 1, nothing spawned.
import fastapi  # noqa: F401
import orjson
import uvicorn  # noqa: F401

from sglang.srt.entrypoints.engine import Engine, Lifecycle, set_envs_and_config
from sglang.srt.entrypoints.http_api import (
    Server,
    ServerState,
    ServerStatus,
    display_url,
    local_url,
    make_server,
)
from sglang.srt.hf_transformers_utils import derive_context_length, get_config
from sglang.srt.sandbox.knobs import KnobError, from_environ
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils import configure_logger, get_exception_traceback, uvicorn_log

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------- warmup
def _http(method: str, url: str, body: Optional[dict] = None, timeout: float = 600, key=None):
    """(status, body text) of one request; HTTP errors are answers, not exceptions. ``key``:
    the server's --api-key, sent as SGLang's warmup sends it."""
    data = orjson.dumps(body) if body is not None else None
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def _execute_server_warmup(url: str, state: ServerState) -> None:
    """SGLang's warmup: wait for /model_info, one short /generate (its 200 sets the status Up),
    then /freeze_gc."""
    key = getattr(state.server_args, "api_key", None)
    last_error = None
    for _ in range(120):
        time.sleep(1)  # as SGLang: 1 s before each try, the first one included
        try:
            status, text = _http("GET", url + "/model_info", timeout=5, key=key)
            if status == 200:
                break
            last_error = f"status={status}, text={text!r}"
        except OSError as e:
            last_error = e
    else:
        raise RuntimeError(f"/model_info did not answer: {last_error}")
    json_data = {
        "sampling_params": {"temperature": 0, "max_new_tokens": 8},
        "text": "The capital city of France is",
    }
    status, text = _http("POST", url + "/generate", json_data, key=key)
    assert status == 200, f"{text}"
    state.server_status = ServerStatus.UP
    try:
        _http("POST", url + "/freeze_gc", timeout=10, key=key)
    except OSError:
        logger.warning("post-warmup freeze_gc failed", exc_info=True)


def _wait_and_warmup(state: ServerState, url: str, lifecycle: Lifecycle, launched: float) -> None:
    try:
        _execute_server_warmup(url, state)
    except Exception:
        last_traceback = get_exception_traceback()
        logger.error(f"Initialization failed. warmup error: {last_traceback}")
        lifecycle.fatal.set()
        return
    state.startup_time = round(time.monotonic() - launched, 3)
    logger.info("The server is fired up and ready to roll!")


# ---------------------------------------------------------------------- stopping
WATCHDOG_INTERVAL_S = 1.0  # SubprocessWatchdog(interval=1.0)
SIGTERM_POLL_S = 5.0  # TokenizerManager.sigterm_watchdog: asyncio.sleep(5)
SCHEDULER_EXIT_TIMEOUT_S = 15  # tokenizer_manager._SCHEDULER_EXIT_TIMEOUT_SECS
POLL_S = 0.05


def _force_shutdown() -> bool:
    return os.environ.get("SGL_FORCE_SHUTDOWN", "false").strip().lower() in ("true", "1")


def _supervise(
    server: Server, state: ServerState, engine: Engine, lifecycle: Lifecycle, warmup: threading.Thread
) -> int:
    """Rank 0 from the open port to its end, with SGLang 0.5.23's two clocks:

    * SubprocessWatchdog: every 1 s from when the schedulers were ready, any subprocess gone
      with an exit code other than 0 -> "Subprocess ... crashed ..." and SIGQUIT (the tree and
      the launcher SIGKILLed). Under a SIGTERM to every process (KillMode=control-group) the
      schedulers die of it at once, so rank 0 then ends this way.
    * sigterm_watchdog: every 5 s from the first generation request, a look at
      gracefully_exit; once set, "Gracefully exiting..." every 5 s until no request is left,
      then the clean stop (_stop_cleanly, exit 0).
    SIGTERM/SIGINT before the first request is uvicorn's: the HTTP server stops at once, the
    lifespan waits for the warmup thread, then the signal is raised again.
    Returns the exit status, or None when the captured signal is to be raised again.
    """
    next_check = engine.ready_at + WATCHDOG_INTERVAL_S
    next_sigterm_poll = None
    uvicorn_stopping = False
    while True:
        time.sleep(POLL_S)
        now = time.monotonic()
        if lifecycle.fatal.is_set():
            return 1
        if engine.a_scheduler_is_gone():
            state.generator.halt()
        if now >= next_check:
            while next_check <= now:
                next_check += WATCHDOG_INTERVAL_S
            crashed = engine.crashed_child()
            if crashed is not None:
                name, proc = crashed
                if proc in engine.scheduler_procs and proc.exitcode == -9:
                    # Older SGLang releases word a lost scheduler this way; log both wordings.
                    rank = engine.scheduler_ranks[engine.scheduler_procs.index(proc)]
                    logger.error(f"Rank {rank} scheduler is dead. Please check if there are relevant logs.")
                logger.error(
                    f"Subprocess {name} (pid={proc.pid}) crashed with exit code "
                    f"{proc.exitcode}. Triggering SIGQUIT for cleanup..."
                )
                os.kill(os.getpid(), signal.SIGQUIT)
                continue
        if lifecycle.first_request_at is not None and not uvicorn_stopping:
            if next_sigterm_poll is None:
                next_sigterm_poll = lifecycle.first_request_at + SIGTERM_POLL_S
            if now >= next_sigterm_poll:
                next_sigterm_poll += SIGTERM_POLL_S
                if lifecycle.gracefully_exit.is_set() and _drained(state):
                    return _stop_cleanly(server, engine)
        if lifecycle.uvicorn_exit.is_set() and not uvicorn_stopping:
            uvicorn_stopping = True
            uvicorn_log("INFO", "Shutting down")
            server.shutdown()
            server.server_close()  # the port closes here
            uvicorn_log("INFO", "Waiting for application shutdown.")
        if uvicorn_stopping and not warmup.is_alive():  # the lifespan joins the warmup thread
            uvicorn_log("INFO", "Application shutdown complete.")
            uvicorn_log("INFO", f"Finished server process [{os.getpid()}]")
            return None


def _drained(state: ServerState) -> bool:
    """One turn of sigterm_watchdog's drain loop: True when it may stop now."""
    if state.server_status == ServerStatus.UNHEALTHY:
        logger.error("Signal SIGTERM received while health check failed. Force exiting.")
        return True
    if _force_shutdown():
        logger.error("Signal SIGTERM received while force shutdown flag set. Force exiting.")
        return True
    rids = state.generator.active_rids()
    logger.info(
        f"Gracefully exiting... Remaining number of requests {len(rids)}. "
        f"Remaining requests remaining_rids={rids!r}."
    )
    return not rids


def _stop_cleanly(server: Server, engine: Engine) -> int:
    """The end of sigterm_watchdog: ShutdownReq, up to 15 s for the schedulers to exit, the
    tree killed, then uvicorn stops (port closed last) and its lifespan ends."""
    engine.send_shutdown_req()
    stragglers = engine.wait_schedulers_gone(SCHEDULER_EXIT_TIMEOUT_S)
    if stragglers:
        logger.warning(
            f"Schedulers still alive {SCHEDULER_EXIT_TIMEOUT_S}s after ShutdownReq, "
            f"killing them before they released: {stragglers}"
        )
    engine.kill_tree()
    time.sleep(0.1)  # uvicorn's main loop looks at should_exit every 0.1 s
    uvicorn_log("INFO", "Shutting down")
    server.shutdown()
    server.server_close()
    uvicorn_log("INFO", "Waiting for application shutdown.")
    uvicorn_log("INFO", "Application shutdown complete.")
    uvicorn_log("INFO", f"Finished server process [{os.getpid()}]")
    engine.kill_tree()  # launch_server.py's `finally`
    return 0


# ---------------------------------------------------------------------- launch
def _bind(server_args: ServerArgs, state: ServerState, dummy: bool) -> Optional[Server]:
    try:
        return make_server(server_args.host, server_args.port, state, dummy)
    except OSError as e:
        reason = (e.strerror or str(e)).lower()
        uvicorn_log(
            "ERROR",
            f"[Errno {e.errno}] error while attempting to bind on address "
            f"({server_args.host!r}, {server_args.port}): {reason}",
        )
        return None


def _run_follower(server_args: ServerArgs, state: ServerState, engine: Engine, lifecycle: Lifecycle) -> int:
    """--node-rank >= 1 once its schedulers are ready (0.5.23's _launch_subprocesses)."""
    lifecycle.ignore_sigterm(server_args.node_rank)
    where = f"{server_args.host}:{server_args.port}"
    if ":" in server_args.host:
        where = f"[{server_args.host}]:{server_args.port}"
    logger.info(f"Dummy health check server started in background thread at {where}")
    server = _bind(server_args, state, dummy=True)  # a failed bind: uvicorn's error, no exit
    if server is None:
        logger.info(f"Dummy health check server stopped at {where}")
    else:
        threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="health-check-server",
            daemon=True,
        ).start()
    code = engine.watch_follower()
    if server is not None:
        server.shutdown()
        server.server_close()
    if code != 0:
        engine.kill_tree(include_parent=True)  # the SIGQUIT handler's: SIGKILL of itself, not returned from
    engine.kill_tree()  # launch_server.py's `finally`
    return 0


def launch_server(server_args: ServerArgs) -> int:
    """Run the server until it is stopped; returns the process exit status."""
    configure_logger()
    try:
        knobs = from_environ(os.environ)
    except KnobError as e:
        print(f"sglang (sandbox stand-in): error: {e}", file=sys.stderr, flush=True)
        return 2
    if knobs.fail_rank is not None:
        if knobs.fail_rank >= server_args.nnodes:
            print(
                f"sglang (sandbox stand-in): error: SGLANG_STANDIN_FAIL_RANK={knobs.fail_rank} but "
                f"--nnodes {server_args.nnodes}",
                file=sys.stderr,
                flush=True,
            )
            return 2
        if knobs.fail_rank != server_args.node_rank:
            knobs = dataclasses.replace(knobs, fail=None)  # the failure is another node's
    server_args.check_server_args()
    hf_config = get_config(server_args.model_path)
    if server_args.speculative_draft_model_path:
        get_config(server_args.speculative_draft_model_path)
    launched = time.monotonic()
    context_len = derive_context_length(hf_config, server_args.context_length)
    logger.info(f"server_args={dataclasses.asdict(server_args)}")

    lifecycle = Lifecycle()
    lifecycle.install_signal_handlers()
    set_envs_and_config(server_args)
    engine = Engine(server_args, knobs, context_len, lifecycle)
    engine.launch()
    if not engine.wait_for_ready():
        engine.shutdown()
        return 0

    state = ServerState(server_args, knobs, hf_config, context_len, engine.scheduler_infos)
    state.gracefully_exit = lifecycle.gracefully_exit
    if server_args.node_rank != 0:
        return _run_follower(server_args, state, engine, lifecycle)
    server = _bind(server_args, state, dummy=False)
    if server is None:
        engine.shutdown()
        return 1
    uvicorn_log("INFO", f"Started server process [{os.getpid()}]")
    uvicorn_log("INFO", "Waiting for application startup.")
    uvicorn_log("INFO", "Application startup complete.")
    uvicorn_log(
        "INFO", f"Uvicorn running on {display_url(server_args.host, server_args.port)} (Press CTRL+C to quit)"
    )
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="http-server", daemon=True
    ).start()
    lifecycle.server_started()
    state.backend.on_request = lifecycle.first_request
    warmup = threading.Thread(
        target=_wait_and_warmup,
        name="warmup",
        daemon=True,
        args=(state, local_url(server_args.host, server_args.port), lifecycle, launched),
    )
    warmup.start()

    code = _supervise(server, state, engine, lifecycle, warmup)
    if code is None:
        # uvicorn raises the captured signal again before launch_server returns: the launcher
        # dies of it, its subprocesses of PR_SET_PDEATHSIG.
        lifecycle.raise_captured()
        return 0
    if code != 0:
        # The SIGQUIT handler's kill_process_tree(os.getpid()): SGLang SIGKILLs its tree and
        # itself (the port closes with it): not returned from.
        engine.kill_tree(include_parent=True)
    return code
