"""A bounded client load through SGLang's router, and a watcher of the router's view of its
workers: what bench/rolling.py and tests/e2e/test_fleet.py measure a rollout with.

Load: ``concurrency`` threads send ``count`` streaming chat requests in all, ``long_every``-th
of them long (``long_tokens``), the others short; it stops by itself. A request fails when it
does not answer 200 or its stream ends without its final ``[DONE]`` (cut mid-stream).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.request
from dataclasses import dataclass, field

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass
class LoadResult:
    sent: int = 0
    failed: int = 0
    failures: list = field(default_factory=list)  # (index, why), the first few
    long_sent: int = 0
    seconds: float = 0.0


def one_request(port, model, tokens, timeout=120.0):
    """None when the streamed answer completed, else why not."""
    body = json.dumps(
        {
            "model": model,
            "stream": True,
            "max_tokens": tokens,
            "messages": [{"role": "user", "content": "Count slowly."}],
        }
    )
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        answer = conn.getresponse()
        if answer.status != 200:
            return f"HTTP {answer.status}: {answer.read()[:120]!r}"
        data = answer.read().decode(errors="replace")
        if "[DONE]" not in data:
            return "stream ended without [DONE]"
        return None
    except (OSError, http.client.HTTPException) as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()


def run_load(
    port, model, count=40, concurrency=4, short_tokens=16, long_tokens=400, long_every=4, stop=None
) -> LoadResult:
    out = LoadResult()
    lock = threading.Lock()
    indices = iter(range(count))
    started = time.monotonic()

    def worker():
        while stop is None or not stop.is_set():
            with lock:
                index = next(indices, None)
            if index is None:
                return
            is_long = long_every and index % long_every == long_every - 1
            why = one_request(port, model, long_tokens if is_long else short_tokens)
            with lock:
                out.sent += 1
                out.long_sent += bool(is_long)
                if why:
                    out.failed += 1
                    if len(out.failures) < 10:
                        out.failures.append((index, why))

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.seconds = time.monotonic() - started
    return out


def router_view(port):
    """{url: healthy} as the router lists its workers; None when it does not answer."""
    try:
        with _OPENER.open(f"http://127.0.0.1:{port}/workers", timeout=3) as answer:
            workers = json.loads(answer.read())["workers"]
    except (OSError, ValueError, KeyError):
        return None
    return {w["url"]: bool(w.get("is_healthy")) for w in workers}


def node_serves(port):
    try:
        with _OPENER.open(f"http://127.0.0.1:{port}/ping", timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


class Watcher(threading.Thread):
    """Samples, every ``interval`` seconds, how many nodes serve (their /ping answers 200)
    and how many the router lists healthy; per node, the seconds it was out of the router."""

    def __init__(self, router_port, node_ports, interval=0.2):
        super().__init__(daemon=True)
        self.router_port, self.node_ports, self.interval = router_port, dict(node_ports), interval
        self.stop = threading.Event()
        self.min_serving = len(self.node_ports)
        self.min_in_router = len(self.node_ports)
        self.out_s = {name: 0.0 for name in self.node_ports}
        self.samples = 0

    def run(self):
        last = time.monotonic()
        while not self.stop.is_set():
            serving = sum(node_serves(p) for p in self.node_ports.values())
            view = router_view(self.router_port) if self.router_port else None
            now = time.monotonic()
            self.samples += 1
            self.min_serving = min(self.min_serving, serving)
            if view is not None:
                healthy = {url for url, ok in view.items() if ok}
                self.min_in_router = min(self.min_in_router, len(healthy))
                for name, port in self.node_ports.items():
                    if not any(url.endswith(f":{port}") for url in healthy):
                        self.out_s[name] += now - last
            last = now
            self.stop.wait(self.interval)


def deploy_under_load(router_port, ports, model, requests, run_deploy):
    """(what ``run_deploy()`` returned, the load's LoadResult, the Watcher): ``requests``
    streaming requests through the router (4 at a time, every 4th 400 tokens long) while the
    watcher reads the router's and the nodes' view; the load runs 2 s before the deploy starts,
    so nothing restarts before it does."""
    watcher = Watcher(router_port, ports)
    watcher.start()
    load = {}
    client = threading.Thread(
        target=lambda: load.update(
            r=run_load(
                router_port,
                model,
                count=requests,
                concurrency=4,
                short_tokens=16,
                long_tokens=400,
                long_every=4,
            )
        )
    )
    client.start()
    time.sleep(2)
    ran = run_deploy()
    client.join()
    watcher.stop.set()
    watcher.join()
    return ran, load["r"], watcher
