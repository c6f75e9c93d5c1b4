"""The readiness gate's HTTP side: a thread that asks the server whether it serves.

GET /v1/models must list the served name (SGLang 0.5.23 answers it during warmup already),
then GET /ping must answer 200 (is_healthy(): set when the warmup's generation succeeded,
cleared by SIGTERM; answered at once). Where /ping is missing (404: an older release) /health
stands in. /health itself runs a one-token generation (no sooner than 1 s): it is asked only
to confirm a start whose journal lost its "fired up" line (the gate sets `confirm`).
With the server's API key (`key`, lib/engine_auth.py) every request carries it; a 401 says
whether one was sent.
"""

import json
import threading
import time
import urllib.error

from . import engine_auth


def probe_host(host):
    """``host`` as a URL names it: loopback for every interface (0.0.0.0, ``::``), an IPv6
    literal bracketed."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    return "[%s]" % host if ":" in host else host


def server_url(host, port):
    """The base URL of the server on ``port`` bound to ``host`` (its --host), as our scripts on
    the node ask it (the gate, the decode check, the drain, node_status.py)."""
    return "http://%s:%d" % (probe_host(host), port)


class HttpProbe(threading.Thread):
    """Polls /v1/models until it lists the served name, then /ping until 200 (/health where the
    server has no /ping); sets `up` then. With `confirm` set (the gate has waited long enough
    for "fired up"), it also asks /health and sets `health_ok` on a 200."""

    def __init__(self, host, port, served_name, interval, timeout, health_timeout, key=None):
        super().__init__(daemon=True)
        self.base = server_url(host, port)
        self.served_name, self.interval = served_name, interval
        self.timeout, self.health_timeout = timeout, health_timeout
        self.opener = engine_auth.opener(key)
        self.unauthorized = (
            "401 (the API key sent was refused)" if key else "401 (an API key is wanted: none sent)"
        )
        self.state = "not probed yet"
        self.models_ok = False
        self.up_path = "/ping"
        self.up = threading.Event()  # models listed and /ping (or /health) 200
        self.up_mono = None
        self.confirm = threading.Event()  # set by the gate: ask /health too
        self.health_ok = threading.Event()
        self.wake = threading.Event()
        self.stopped = threading.Event()

    def get(self, path, timeout):
        """(status code, body) or (None, reason)."""
        try:
            with self.opener.open(self.base + path, timeout=timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, b""
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, ConnectionRefusedError):
                return None, "port closed"
            return None, "%s: %s" % (path, reason)
        except OSError as exc:  # timeouts, resets
            return None, "%s: %s" % (path, exc.__class__.__name__)

    def said(self, code):
        return self.unauthorized if code == 401 else str(code)

    def probe_once(self):
        if not self.models_ok:
            code, body = self.get("/v1/models", self.timeout)
            if code != 200:
                self.state = body if code is None else "/v1/models %s" % self.said(code)
                return
            try:
                names = [m.get("id") for m in json.loads(body.decode("utf-8")).get("data", [])]
            except (ValueError, AttributeError):
                names = []
            if self.served_name not in names:
                self.state = "/v1/models lists %s, not %r" % (names, self.served_name)
                return
            self.models_ok = True
        if not self.up.is_set():
            health = self.up_path == "/health"
            code, reason = self.get(self.up_path, self.health_timeout if health else self.timeout)
            if code == 404 and not health:  # a release without /ping
                self.up_path = "/health"
                return self.probe_once()
            if code != 200:
                self.state = "/v1/models ok, " + (
                    reason if code is None else "%s %s" % (self.up_path, self.said(code))
                )
                return
            self.up_mono = time.monotonic()
            self.up.set()
            if health:
                self.health_ok.set()
            self.state = "/v1/models ok, %s 200" % self.up_path
        if self.confirm.is_set() and not self.health_ok.is_set():
            code, reason = self.get("/health", self.health_timeout)
            if code == 200:
                self.health_ok.set()
            self.state = "/v1/models ok, %s 200, no 'fired up' line, /health %s" % (
                self.up_path,
                reason if code is None else code,
            )

    def run(self):
        while not self.stopped.is_set():
            self.probe_once()
            self.wake.wait(self.interval)
            self.wake.clear()
