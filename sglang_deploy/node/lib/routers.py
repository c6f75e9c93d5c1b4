"""SGLang's router (sglang-router 0.3.2) as seen through its worker API, from a node or a router
host. Standard library only.

    GET    /workers              {"workers": [{"id", "url", "is_healthy", "load", ...}], ...}
    POST   /workers {"url": U}   queues an addition  -> {"status": "accepted", "worker_id"}
    DELETE /workers/<id>         queues a removal    -> {"status": "accepted", ...}
    GET    /readiness            200 once a worker is healthy, else 503
    GET    /health               200 "OK" while the router runs

Additions and removals are queued: ``wait_for`` polls /workers until the router's view is the
one asked for.
"""

import json
import time
import urllib.error
import urllib.request

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class RouterError(Exception):
    """A router did not answer, or not as expected; the message names the router."""


def parse_workers(payload):
    """{url: {"id", "healthy", "load"}} from a /workers answer (text or parsed)."""
    data = json.loads(payload) if isinstance(payload, (str, bytes)) else payload
    if not isinstance(data, dict) or not isinstance(data.get("workers"), list):
        raise ValueError("not a /workers answer: no 'workers' list")
    found = {}
    for worker in data["workers"]:
        if not isinstance(worker, dict) or "url" not in worker:
            raise ValueError("not a /workers answer: a worker without 'url'")
        found[normal_url(worker["url"])] = {
            "id": worker.get("id"),
            "healthy": bool(worker.get("is_healthy")),
            "load": worker.get("load"),
        }
    return found


def normal_url(url):
    return url.rstrip("/")


class Router:
    def __init__(self, url, timeout=5.0):
        self.url = normal_url(url)
        self.timeout = timeout

    def _call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with _OPENER.open(request, timeout=self.timeout) as answer:
                return answer.status, answer.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")
        except (OSError, ValueError) as exc:
            raise RouterError("router %s: unreachable (%s)" % (self.url, _reason(exc))) from None

    def health(self):
        """True when the router answers /health 200."""
        return self._call("GET", "/health")[0] == 200

    def readiness(self):
        return self._call("GET", "/readiness")

    def workers(self):
        code, text = self._call("GET", "/workers")
        if code != 200:
            raise RouterError("router %s: GET /workers answered %d" % (self.url, code))
        try:
            return parse_workers(text)
        except ValueError as exc:
            raise RouterError("router %s: %s" % (self.url, exc)) from None

    def remove(self, worker_url):
        """Queue the removal of ``worker_url``; False when the router does not list it."""
        listed = self.workers().get(normal_url(worker_url))
        if listed is None:
            return False
        code, text = self._call("DELETE", "/workers/%s" % listed["id"])
        if code not in (200, 202):
            raise RouterError(
                "router %s: removing %s answered %d: %s" % (self.url, worker_url, code, text[:200])
            )
        return True

    def add(self, worker_url):
        code, text = self._call("POST", "/workers", {"url": normal_url(worker_url)})
        if code not in (200, 201, 202):
            raise RouterError(
                "router %s: adding %s answered %d: %s" % (self.url, worker_url, code, text[:200])
            )

    def wait_for(self, worker_url, want, timeout, interval=0.25):
        """Poll until the router lists ``worker_url`` as ``want`` ("absent" or "healthy");
        RouterError naming what it saw when ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while True:
            seen = self.workers().get(normal_url(worker_url))
            if (want == "absent" and seen is None) or (want == "healthy" and seen and seen["healthy"]):
                return
            if time.monotonic() >= deadline:
                state = "not listed" if seen is None else ("healthy" if seen["healthy"] else "unhealthy")
                raise RouterError(
                    "router %s: %s still %s after %.0fs (waited for %s)"
                    % (self.url, worker_url, state, timeout, want)
                )
            time.sleep(interval)


def _reason(exc):
    reason = getattr(exc, "reason", None) or exc
    return " ".join(str(reason).split()) or type(exc).__name__
