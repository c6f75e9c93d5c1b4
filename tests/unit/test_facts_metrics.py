"""The /metrics scrape a canary's bake runs on each node (facts/metrics.py): its command run here
against a server answering SGLang's captured /metrics, against a closed port, and against
routers' exporters answering smg 1.13.0's captured /metrics (one of them closed)."""

import http.server
import socket
import subprocess
import threading
from pathlib import Path

from sglang_deploy.facts.metrics import EngineMetrics
from sglang_deploy.report import canary_gateway, prom_text

CAPTURED = (Path(__file__).parent / "captured" / "sglang_0.5.3_metrics_end.txt").read_bytes()
SMG = (Path(__file__).parent / "captured" / "smg_1.13.0_metrics_end.txt").read_bytes()


def _run(port, **kwargs):
    fact = EngineMetrics()
    command = fact.command(port, **kwargs)
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=30).stdout
    return fact.process(out.splitlines())


def _serving(body):
    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/metrics" else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_scrape_keeps_the_bakes_families_and_the_nodes_clock():
    server = _serving(CAPTURED)
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
    scrape = _run(_closed_port())
    assert scrape.text is None and "URLError" in scrape.error


def test_each_routers_exporter_is_read_for_the_nodes_own_series():
    worker = next(
        s.labels["worker"] for s in prom_text.parse(SMG.decode()).samples if s.name == canary_gateway.OUTCOMES
    )
    engine, exporter = _serving(CAPTURED), _serving(SMG)
    gateway = f"http://127.0.0.1:{exporter.server_address[1]}/metrics"
    closed = f"http://127.0.0.1:{_closed_port()}/metrics"
    try:
        scrape = _run(engine.server_address[1], worker_url=worker, gateways=(gateway, closed))
    finally:
        engine.shutdown()
        exporter.shutdown()
    assert scrape.worker == worker and list(scrape.gateway) == [gateway, closed]
    read = scrape.gateway[gateway]
    assert read.error is None and read.at > 0
    found = prom_text.parse(read.text)
    assert found.types == {canary_gateway.OUTCOMES: "counter"}
    assert found.samples and {s.labels["worker"] for s in found.samples} == {worker}
    assert scrape.gateway[closed].text is None and "URLError" in scrape.gateway[closed].error
    assert prom_text.parse(scrape.text).total("sglang:num_requests_total") == 65.0


def test_nothing_printed_is_said():
    assert "printed nothing" in EngineMetrics.default().error
    assert "no answer" in EngineMetrics().process(["Traceback ...", "boom"]).error
