"""SGLang's gateway (smg 1.x) as seen through its worker API, from a node or a router host.
Standard library only.

    GET    /workers              {"workers": [{"id", "url", "model_id", "is_healthy", "load",
                                  "status" (pending, ready, not_ready, failed, draining),
                                  "labels"}], ...}
    POST   /workers {"url": U}   queues an addition  -> 202 {"status": "accepted", "worker_id"}
                                  (smg: 409 while U is still listed, draining included, and
                                  409 {"code": "WORKER_CREATE_IN_PROGRESS"} while an addition
                                  of U is queued: its unit's --worker-urls at start, say; a
                                  queued worker is not listed until it answers)
    PATCH  /workers/<id>         smg: queues an update of labels, health (drain_settle_secs)...
    DELETE /workers/<id>         queues a removal    -> 202; smg lists a ready worker as
                                  "draining" (not routable) for its drain_settle_secs, then
                                  removes it
    GET    /readiness            200 once a worker is healthy, else 503 (smg: also 503
                                  {"reason": "draining"} while the gateway itself stops)
    GET    /health               200 "OK" while the router runs

Additions, updates and removals are queued: ``wait_for`` polls /workers until the router's
view is the one asked for. A worker leaves through Draining (``remove`` with a settle time).
"""

import json
import time
import urllib.error
import urllib.request

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
# The label a drain's PATCH carries: the router lists it once the update is applied.
DRAIN_LABEL = "sglang_deploy_drain"
# smg's answer to an addition of a worker whose addition is already queued.
CREATE_IN_PROGRESS = "WORKER_CREATE_IN_PROGRESS"


class RouterError(Exception):
    """A router did not answer, or not as expected; the message names the router."""


def parse_workers(payload):
    """{url: {"id", "healthy", "load", "model", "state", "routable", "labels"}} from a /workers
    answer (text or parsed); ValueError for a worker without smg's ``status``."""
    data = json.loads(payload) if isinstance(payload, (str, bytes)) else payload
    if not isinstance(data, dict) or not isinstance(data.get("workers"), list):
        raise ValueError("not a /workers answer: no 'workers' list")
    found = {}
    for worker in data["workers"]:
        if not isinstance(worker, dict) or "url" not in worker:
            raise ValueError("not a /workers answer: a worker without 'url'")
        state = worker.get("status")
        if not isinstance(state, str):
            raise ValueError("not smg's /workers answer: a worker without 'status'")
        found[normal_url(worker["url"])] = {
            "id": worker.get("id"),
            "healthy": bool(worker.get("is_healthy")),
            "load": worker.get("load"),
            "model": worker.get("model_id"),
            "state": state,
            "routable": state == "ready",  # only a ready worker is sent requests
            "labels": worker.get("labels") or {},
        }
    return found


def state_of(seen):
    """How a router lists one worker: "absent", "healthy" (ready), or smg's state (pending,
    not_ready, failed, draining)."""
    if seen is None:
        return "absent"
    return "healthy" if seen["routable"] else seen["state"]


def last_routable(listed, worker_url):
    """Why ``worker_url`` must not leave this router now: it is routable and every other
    worker of its model it lists is not (taking it out would leave the model none to route
    to); None otherwise. A model with no other worker listed has no capacity to protect."""
    mine = listed.get(normal_url(worker_url))
    if mine is None or not mine["routable"]:
        return None
    peers = {
        url: w for url, w in listed.items() if url != normal_url(worker_url) and w["model"] == mine["model"]
    }
    if not peers or any(w["routable"] for w in peers.values()):
        return None
    others = ", ".join("%s %s" % (url, state_of(w)) for url, w in sorted(peers.items()))
    return "%s is the last routable worker of %s (%s)" % (worker_url, mine["model"], others)


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

    def remove(self, worker_url, settle_s=None, timeout=30.0):
        """Queue the removal of ``worker_url``; False when the router does not list it. With
        ``settle_s`` given, first set how long it stays listed Draining (PATCH, confirmed by a
        label the update carries) so the removal drains."""
        listed = self.workers().get(normal_url(worker_url))
        if listed is None:
            return False
        if settle_s is not None:
            self.set_drain_settle(worker_url, listed["id"], settle_s, timeout)
        code, text = self._call("DELETE", "/workers/%s" % listed["id"])
        if code not in (200, 202):
            raise RouterError(
                "router %s: removing %s answered %d: %s" % (self.url, worker_url, code, text[:200])
            )
        return True

    def set_drain_settle(self, worker_url, worker_id, settle_s, timeout, interval=0.1):
        """PATCH the worker's drain_settle_secs and wait until the update is applied: updates
        are queued like removals, and a removal that ran first would drain for the old time.
        The update's label says it landed (smg merges labels and the health settings in one
        rebuild of the worker)."""
        mark = "%d-%.6f" % (settle_s, time.time())
        body = {"health": {"drain_settle_secs": int(settle_s)}, "labels": {DRAIN_LABEL: mark}}
        code, text = self._call("PATCH", "/workers/%s" % worker_id, body)
        if code not in (200, 202):
            raise RouterError(
                "router %s: PATCH of %s answered %d: %s" % (self.url, worker_url, code, text[:200])
            )
        deadline = time.monotonic() + timeout
        while True:
            seen = self.workers().get(normal_url(worker_url))
            if seen is None or seen["labels"].get(DRAIN_LABEL) == mark:
                return
            if time.monotonic() >= deadline:
                raise RouterError(
                    "router %s: the drain settle time of %s was not applied after %.0fs"
                    % (self.url, worker_url, timeout)
                )
            time.sleep(interval)

    def add(self, worker_url):
        """Queue the addition of ``worker_url``; one already queued counts as queued."""
        code, text = self._call("POST", "/workers", {"url": normal_url(worker_url)})
        if code == 409 and answer_field(text, "code") == CREATE_IN_PROGRESS:
            return
        if code not in (200, 201, 202):
            raise RouterError(
                "router %s: adding %s answered %d: %s" % (self.url, worker_url, code, text[:200])
            )

    def wait_for(self, worker_url, want, timeout, interval=0.25):
        """Poll until the router lists ``worker_url`` as ``want``: "absent", "healthy"
        (routable), or "out" (absent or draining: the router sends it nothing new);
        RouterError naming what it saw when ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while True:
            seen = self.workers().get(normal_url(worker_url))
            state = state_of(seen)
            if state == want or (want == "out" and state in ("absent", "draining")):
                return
            if time.monotonic() >= deadline:
                state = "not listed" if seen is None else state
                raise RouterError(
                    "router %s: %s still %s after %.0fs (waited for %s)"
                    % (self.url, worker_url, state, timeout, want)
                )
            time.sleep(interval)


def answer_field(text, key):
    """``key`` of a gateway's JSON answer (smg's error ``code``, /readiness's ``reason``), or None."""
    try:
        body = json.loads(text)
    except ValueError:
        return None
    return body.get(key) if isinstance(body, dict) else None


def _reason(exc):
    reason = getattr(exc, "reason", None) or exc
    return " ".join(str(reason).split()) or type(exc).__name__
