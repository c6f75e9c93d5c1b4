"""The /metrics scrape a canary's bake runs on each node (facts/metrics.py): its command run here
against a server answering SGLang's captured /metrics, and against a closed port."""

import http.server
import socket
import subprocess
import threading
from pathlib import Path

from sglang_deploy.facts.metrics import EngineMetrics
from sglang_deploy.report import prom_text

CAPTURED = (Path(__file__).parent / "captured" / "sglang_0.5.3_metrics_end.txt").read_bytes()


def _run(port):
    fact = EngineMetrics()
    out = subprocess.run(["sh", "-c", fact.command(port)], capture_output=True, text=True, timeout=30).stdout
    return fact.process(out.splitlines())


def test_the_scrape_keeps_the_bakes_families_and_the_nodes_clock():
    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/metrics" else 404)
            self.end_headers()
            self.wfile.write(CAPTURED)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        scrape = _run(server.server_address[1])
    finally:
        server.shutdown()
    assert scrape.error is None and scrape.at > 0
    found = prom_text.parse(scrape.text)
    assert found.total("sglang:num_requests_total") == 65.0
    assert found.buckets("sglang:time_to_first_token_seconds")
    assert found.total("sglang:prompt_tokens_total") is None and "token_usage" not in scrape.text


def test_a_closed_port_is_an_error_not_a_scrape():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    scrape = _run(port)
    assert scrape.text is None and "URLError" in scrape.error


def test_nothing_printed_is_said():
    assert "printed nothing" in EngineMetrics.default().error
    assert "no answer" in EngineMetrics().process(["Traceback ...", "boom"]).error
