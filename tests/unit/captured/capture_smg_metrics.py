"""Writes smg_1.13.0_metrics_{start,end}.txt: the real smg 1.13.0's /metrics (its Prometheus
exporter, --prometheus-port) in front of two small HTTP workers serving a model named `tiny`,
started with the flags the deploy renders (round_robin, retries, circuit breaker, health
checks). Between the two scrapes 40 requests go through the gateway; the second worker answers
every third /generate it is sent with a 500, which the gateway retries on the other worker.

    python3 -m venv /tmp/smg && /tmp/smg/bin/pip install --no-index --find-links build/router-wheels smg==1.13.0
    python3 tests/unit/captured/capture_smg_metrics.py /tmp/smg/bin/python tests/unit/captured
"""

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PYTHON = sys.argv[1]
OUT = sys.argv[2] if len(sys.argv) > 2 else "."
MODEL = "tiny"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(fail_every):
    sent = {"generate": 0}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _send(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path in ("/health", "/health_generate"):
                self._send(200, {})
            elif self.path in ("/get_model_info", "/model_info"):
                self._send(200, {"model_path": MODEL, "served_model_name": MODEL, "is_generation": True})
            elif self.path in ("/get_server_info", "/server_info"):
                self._send(200, {"model_path": MODEL, "served_model_name": MODEL, "tp_size": 1, "dp_size": 1})
            elif self.path == "/v1/models":
                self._send(
                    200, {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "x"}]}
                )
            elif self.path == "/get_load":
                self._send(200, [{"dp_rank": 0, "num_reqs": 0, "num_waiting_reqs": 0, "num_tokens": 0}])
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            if self.path != "/generate":
                self._send(404, {"error": "not found"})
                return
            sent["generate"] += 1
            if fail_every and sent["generate"] % fail_every == 0:
                self._send(500, {"error": {"message": "internal error", "code": 500}})
                return
            time.sleep(0.02)
            self._send(
                200, {"text": " ok", "meta_info": {"id": "x", "prompt_tokens": 3, "completion_tokens": 2}}
            )

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        return answer.status, answer.read().decode()


def scrape(url, name):
    _, text = get(url)
    with open(os.path.join(OUT, name), "w") as f:
        # A comment line, as the format allows: where the file comes from.
        f.write("# Captured with capture_smg_metrics.py (smg 1.13.0, the PyPI wheel)\n")
        f.write(text)


urls = [worker(0), worker(3)]
port, prometheus_port, probe_port = free_port(), free_port(), free_port()
gateway = subprocess.Popen(
    [PYTHON, "-m", "smg.launch_router", "--host", "127.0.0.1", "--port", str(port), "--policy", "round_robin"]
    + ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(prometheus_port)]
    + ["--health-check-port", str(probe_port), "--retry-max-retries", "5", "--retry-initial-backoff-ms", "50"]
    + ["--cb-failure-threshold", "10", "--cb-success-threshold", "3", "--cb-timeout-duration-secs", "60"]
    + ["--cb-window-duration-secs", "120", "--health-check-endpoint", "/health"]
    + ["--health-check-interval-secs", "2", "--worker-urls", *urls],
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
)
try:
    for _ in range(120):
        try:
            if get(f"http://127.0.0.1:{probe_port}/readiness")[0] == 200:
                break
        except (OSError, urllib.error.HTTPError):
            pass
        time.sleep(0.5)
    else:
        sys.exit("smg never became ready")
    metrics = f"http://127.0.0.1:{prometheus_port}/metrics"

    def generate(n):
        codes = []
        for _ in range(n):
            body = json.dumps({"text": "hi", "sampling_params": {"max_new_tokens": 2}}).encode()
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/generate", body, {"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(request, timeout=10) as answer:
                    codes.append(answer.status)
            except urllib.error.HTTPError as exc:
                codes.append(exc.code)
        return codes

    generate(6)
    time.sleep(1)
    scrape(metrics, "smg_1.13.0_metrics_start.txt")
    codes = generate(40)
    time.sleep(1)
    scrape(metrics, "smg_1.13.0_metrics_end.txt")
    print("workers:", urls, "answers:", {c: codes.count(c) for c in set(codes)})
finally:
    gateway.terminate()
    gateway.wait(timeout=90)
