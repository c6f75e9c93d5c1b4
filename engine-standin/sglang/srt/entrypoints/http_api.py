"""SGLang's HTTP endpoints on the standard library's ThreadingHTTPServer.

Served on --host/--port once every scheduler is ready (uvicorn + FastAPI in SGLang):
/health and /health_generate (503 at once while the status is Starting and during shutdown;
otherwise a one-token generation, answered 200 no sooner than 1 s later, as in 0.5.23),
/ping and /ready (is_healthy(): a flag, answered at once), /v1/models[/<name>], /model_info,
/server_info (and their
deprecated /get_* forms, which log a warning), /get_load, /freeze_gc, /metrics (only with
--enable-metrics), /generate, /v1/completions, /v1/chat/completions (JSON or chunked
server-sent events). Access lines are uvicorn's:
`[ts] INFO:     127.0.0.1:49534 - "GET /health HTTP/1.1" 200 OK`.
"""

from __future__ import annotations

import dataclasses
import hmac
import http.server
import json
import logging
import os
import socket
import sys
import threading
import time
import urllib.parse
from http import HTTPStatus

from sglang.srt.entrypoints import openai_api
from sglang.srt.observability.metrics_collector import EngineMetrics
from sglang.srt.sandbox import speculation
from sglang.srt.sandbox.knobs import Knobs
from sglang.srt.sandbox.textgen import Generator
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils import uvicorn_log
from sglang.version import __version__

logger = logging.getLogger("sglang.srt.entrypoints.http_server")

# SGLang 0.5.23's health_generate: poll for an answer every 1 s, give up after
# SGLANG_HEALTH_CHECK_TIMEOUT (20) seconds.
HEALTH_POLL_S = 1.0


def health_check_timeout() -> float:
    return float(int(os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", "20")))


def health_generation_enabled() -> bool:
    """SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION (default true); false makes /health a flag check."""
    return os.environ.get("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "true").strip().lower() not in (
        "0",
        "false",
        "no",
        "off",
        "",
    )


class ServerStatus:
    """TokenizerManager.server_status in 0.5.23."""

    UP, STARTING, UNHEALTHY = "Up", "Starting", "UnHealthy"


class ServerState:
    """Everything the request handlers read; written only by the launcher."""

    def __init__(
        self, server_args: ServerArgs, knobs: Knobs, hf_config: dict, context_len: int, scheduler_infos: list
    ):
        self.server_args = server_args
        self.knobs = knobs
        self.hf_config = hf_config
        self.context_len = context_len
        self.scheduler_infos = scheduler_infos
        self.created = int(time.time())
        now = time.monotonic()
        capacity = scheduler_infos[0] if scheduler_infos else {}
        # SGLang makes its collectors only with --enable-metrics; /metrics is mounted only then.
        self.metrics = EngineMetrics(server_args.served_model_name) if server_args.enable_metrics else None
        self.generator = Generator(
            knobs.tokens_per_second,
            max_running_requests=capacity.get("max_running_requests", 4096),
            max_total_num_tokens=capacity.get("max_total_num_tokens", 1 << 40),
            metrics=self.metrics,
            speculation=speculation.of(server_args, knobs),
        )
        if self.metrics is not None:
            self.metrics.emit_constants(self.generator.max_total_num_tokens, context_len)
        self.backend = openai_api.Backend(
            served_model_name=server_args.served_model_name,
            context_len=context_len,
            generator=self.generator,
            first_forward_at=now + knobs.warmup_seconds,
            broken_at=now + knobs.fail_after_seconds if knobs.fail == "warmup-fails" else None,
            hangs=knobs.fail == "hang-warmup",
            reasoning=getattr(server_args, "reasoning_parser", None) is not None,
        )
        # Starting until the warmup's /generate answered 200 (then Up); /health sets Up or
        # UnHealthy after each generation check.
        self.server_status = ServerStatus.STARTING
        self.gracefully_exit = threading.Event()  # set by SIGTERM (the launcher shares its own)
        self.startup_time = 0.0  # seconds from launch to ready, set by launch_server

    @property
    def shutting_down(self) -> bool:
        return self.gracefully_exit.is_set()

    # -------------------------------------------------------------- read-only endpoints
    def models(self) -> dict:
        name = self.server_args.served_model_name
        return {
            "object": "list",
            "data": [
                {
                    "id": name,
                    "object": "model",
                    "created": self.created,
                    "owned_by": "sglang",
                    "root": name,
                    "parent": None,
                    "max_model_len": self.context_len,
                }
            ],
        }

    def healthy_now(self) -> bool:
        """SGLang's is_healthy(): status Up and not shutting down."""
        return self.server_status == ServerStatus.UP and not self.shutting_down

    def health_generate(self) -> bool:
        """SGLang's health_generate: a one-token generation, then every 1 s a look whether the
        engine answered anything since; True (status Up) or, after the timeout, False
        (status UnHealthy, logged)."""
        tic = time.monotonic()
        threading.Thread(target=self.backend.health_token, name="health-check", daemon=True).start()
        deadline = tic + health_check_timeout()
        while time.monotonic() < deadline:
            time.sleep(HEALTH_POLL_S)
            if self.generator.last_receive > tic:
                self.server_status = ServerStatus.UP
                return True
        started = time.strftime("%H:%M:%S", time.localtime(time.time() - (time.monotonic() - tic)))
        last = self.generator.last_receive
        last_wall = time.strftime("%H:%M:%S", time.localtime(time.time() - (time.monotonic() - last)))
        logger.error(
            f"Health check failed. Server couldn't get a response from detokenizer for last "
            f"{int(health_check_timeout())} seconds. tic start time: {started}. "
            f"last_heartbeat time: {last_wall}"
        )
        self.server_status = ServerStatus.UNHEALTHY
        return False

    def model_info(self) -> dict:
        return {
            "model_path": self.server_args.model_path,
            "served_model_name": self.server_args.served_model_name,
            "tokenizer_path": self.server_args.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "load_format": "auto",
            "reasoning_parser": getattr(self.server_args, "reasoning_parser", None),
            "tool_call_parser": None,
            "disaggregation_mode": "null",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": self.hf_config.get("model_type"),
            "architectures": self.hf_config.get("architectures"),
        }

    def server_info(self) -> dict:
        info = dataclasses.asdict(self.server_args)
        if self.scheduler_infos:
            info.update({k: v for k, v in self.scheduler_infos[0].items() if k != "status"})
        info["internal_states"] = [
            {
                "last_gen_throughput": self.generator.last_gen_throughput,
                "memory_usage": {
                    "weight": 0.0,
                    "kvcache": 0.0,
                    "token_capacity": info.get("max_total_num_tokens", 0),
                    "graph": 0.0,
                },
            }
        ]
        accept_length = self.generator.avg_spec_accept_length
        if accept_length is not None:  # a speculating scheduler, once it decoded
            info["internal_states"][0]["avg_spec_accept_length"] = accept_length
        info["startup_time"] = self.startup_time
        info["version"] = __version__
        info["frontend"] = "python"
        return info

    def load(self) -> list:
        g = self.generator
        return [
            {"dp_rank": 0, "num_reqs": g.running, "num_waiting_reqs": g.queued, "num_tokens": g.used_tokens}
        ]

    def metrics_text(self) -> str:
        """/metrics: SGLang's families in Prometheus text format (only with --enable-metrics)."""
        return self.metrics.exposition()


class Handler(http.server.BaseHTTPRequestHandler):
    """HTTP/1.1 with keep-alive, JSON bodies, chunked server-sent events."""

    protocol_version = "HTTP/1.1"
    state: ServerState = None  # set on the subclass made per server
    dummy_health_only = False

    # ------------------------------------------------------------------ plumbing
    # SGLang's add_api_key_middleware: with --api-key every endpoint but these wants
    # `Authorization: Bearer <key>` (401 {"error": "Unauthorized"}); probes and scrapes stay open.
    OPEN_PREFIXES = ("/health", "/ready", "/metrics")

    def _authorized(self, path: str) -> bool:
        key = getattr(self.state.server_args, "api_key", None)
        if not key or self.command == "OPTIONS" or path.startswith(self.OPEN_PREFIXES):
            return True
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token, key)

    def _refused(self, path: str) -> bool:
        """Answered 401 (the body read and dropped) when the request lacks the server's key."""
        if self._authorized(path):
            return False
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self._json(401, {"error": "Unauthorized"})
        return True

    def setup(self):
        super().setup()
        # Token-by-token streaming: do not let Nagle batch the small writes.
        try:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass

    def version_string(self):
        return "uvicorn"

    def log_request(self, code="-", size="-"):
        """uvicorn's access line: `INFO:     127.0.0.1:49534 - "GET /health HTTP/1.1" 200 OK`
        (none from the dummy health server: SGLang runs it at log level warning)."""
        if self.dummy_health_only:
            return
        try:
            phrase = HTTPStatus(int(code)).phrase
        except ValueError:
            phrase = ""
        host, port = self.client_address[:2]
        uvicorn_log(
            "INFO",
            f'{host}:{port} - "{self.command} {self.path} HTTP/1.1" {code} {phrase}',
            stream=sys.stdout,
        )

    def log_message(self, format, *args):
        pass  # errors are answered with a status; uvicorn logs nothing more for them

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, obj) -> None:
        self._send(status, json.dumps(obj).encode(), "application/json")

    def _empty(self, status: int) -> None:
        self._send(status, b"", "text/plain; charset=utf-8")

    def _read_json(self):
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError as e:
            raise openai_api.ApiError(400, f"Invalid JSON body: {e}")
        if not isinstance(body, dict):
            raise openai_api.ApiError(400, "The request body must be a JSON object")
        return body

    def _stream(self, events) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        try:
            for event in events:
                self._chunk(b"data: " + json.dumps(event).encode() + b"\n\n")
            self._chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away; stop generating
        except openai_api.ApiError as e:
            self._chunk(b"data: " + json.dumps({"error": e.openai_body()}).encode() + b"\n\n")
            self.wfile.write(b"0\r\n\r\n")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    # ------------------------------------------------------------------ routes
    def do_GET(self):
        path = self.path.split("?", 1)[0]
        state = self.state
        if self._refused(path):
            return None
        if self.dummy_health_only and path in ("/health", "/health_generate", "/ping"):
            return self._empty(200)
        if path in ("/health", "/health_generate"):
            if state.shutting_down:
                logger.info("Health check request received during shutdown. Returning 503.")
                return self._empty(503)
            if state.server_status == ServerStatus.STARTING:
                return self._empty(503)
            if path == "/health" and not health_generation_enabled():
                return self._empty(200)
            return self._empty(200 if state.health_generate() else 503)
        if self.dummy_health_only:
            return self._json(404, {"detail": "Not Found"})
        if path in ("/ping", "/ready"):
            return self._empty(200 if state.healthy_now() else 503)
        if path == "/v1/models":
            return self._json(200, state.models())
        if path.startswith("/v1/models/"):
            name = urllib.parse.unquote(path[len("/v1/models/") :])
            if name != state.server_args.served_model_name:
                return self._json(
                    404,
                    {
                        "error": {
                            "message": f"The model '{name}' does not exist",
                            "type": "invalid_request_error",
                            "param": "model",
                            "code": "model_not_found",
                        }
                    },
                )
            return self._json(200, state.models()["data"][0])
        if path in ("/model_info", "/get_model_info"):
            if path == "/get_model_info":
                logger.warning(
                    "Endpoint '/get_model_info' is deprecated and will be removed in a "
                    "future version. Please use '/model_info' instead."
                )
            return self._json(200, state.model_info())
        if path in ("/server_info", "/get_server_info"):
            if path == "/get_server_info":
                logger.warning(
                    "Endpoint '/get_server_info' is deprecated and will be removed in a "
                    "future version. Please use '/server_info' instead."
                )
            return self._json(200, state.server_info())
        if path == "/get_load":
            return self._json(200, state.load())
        if path == "/freeze_gc":
            return self._send(200, b"Garbage collection frozen.\n", "text/plain; charset=utf-8")
        if path == "/metrics" and state.metrics is not None:
            return self._send(200, state.metrics_text().encode(), "text/plain; version=0.0.4; charset=utf-8")
        if path in ("/generate", "/v1/completions", "/v1/chat/completions"):
            return self._json(405, {"detail": "Method Not Allowed"})
        return self._json(404, {"detail": "Not Found"})

    def do_POST(self):
        path = self.path.split("?", 1)[0]
        if self._refused(path):
            return None
        routes = {
            "/generate": openai_api.generate,
            "/v1/completions": openai_api.completions,
            "/v1/chat/completions": openai_api.chat_completions,
        }
        if not self.dummy_health_only and path == "/freeze_gc":
            self.rfile.read(int(self.headers.get("content-length") or 0))
            return self._send(200, b"Garbage collection frozen.\n", "text/plain; charset=utf-8")
        if self.dummy_health_only or path not in routes or (self.command == "PUT" and path != "/generate"):
            self.rfile.read(int(self.headers.get("content-length") or 0))
            known = (
                path
                in (
                    "/health",
                    "/health_generate",
                    "/v1/models",
                    "/model_info",
                    "/get_model_info",
                    "/ping",
                    "/ready",
                )
                or path in routes
            )
            return self._json(
                405 if known else 404, {"detail": "Method Not Allowed" if known else "Not Found"}
            )
        try:
            result = routes[path](self.state.backend, self._read_json())
        except openai_api.ApiError as e:
            body = e.openai_body() if path.startswith("/v1/") else {"error": {"message": e.message}}
            return self._json(e.status, body)
        if isinstance(result, openai_api.Stream):
            return self._stream(result.events)
        return self._json(result.status, result.body)

    do_PUT = do_POST  # SGLang's /generate also takes PUT


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def make_server(host: str, port: int, state: ServerState, dummy: bool) -> Server:
    handler = type("Handler", (Handler,), {"state": state, "dummy_health_only": dummy})
    server_cls = Server
    if ":" in host:
        server_cls = type("Server6", (Server,), {"address_family": socket.AF_INET6})
    return server_cls((host, port), handler)


def display_url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def local_url(host: str, port: int) -> str:
    """Where the launcher reaches its own server for the warmup."""
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return display_url(host, port)
