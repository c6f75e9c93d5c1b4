"""One row per node and one per router: what the hosts answered, joined with what the inventory
says and with the recorded drift. Each row is the JSON `make status --json` prints; the table
and the blocks (render.py) are made from these rows only."""

from __future__ import annotations

from sglang_deploy.node.lib.routers import normal_url
from sglang_deploy.status.drift import SOURCE

# How a router lists a node: healthy, unhealthy, absent (not listed), or unreachable (the
# router, or its host, did not answer).
HEALTHY, UNHEALTHY, ABSENT, UNREACHABLE = "healthy", "unhealthy", "absent", "unreachable"


def router_view(answer) -> dict | None:
    """{worker URL: "healthy" | "unhealthy"} of one router's answer; None when it gave none."""
    if not answer.answered:
        return None
    workers = (answer.found.get("router") or {}).get("workers") or {}
    return {normal_url(url): HEALTHY if seen.get("healthy") else UNHEALTHY for url, seen in workers.items()}


def rotation(target, views) -> dict:
    """Whether the node is in rotation: healthy in every router ("in"), in none ("out"), in
    some ("partly"), not known (no router answered); "no routers" without any, "follower" for
    a serving group's follower (its rank 0 is the group's worker)."""
    if not views:
        return {"state": "no routers", "routers": {}}
    if target.worker_url is None:
        return {"state": "follower", "routers": {}}
    seen = {}
    for router, view in views.items():
        if view is None:
            seen[router] = UNREACHABLE
        else:
            seen[router] = view.get(normal_url(target.worker_url), ABSENT)
    healthy = sum(state == HEALTHY for state in seen.values())
    unknown = sum(state == UNREACHABLE for state in seen.values())
    if healthy == len(seen):
        state = "in"
    elif unknown == len(seen):
        state = "unknown"
    elif healthy == 0 and unknown == 0:
        state = "out"
    else:
        state = "partly"
    return {"state": state, "healthy_in": healthy, "routers": seen}


def node_row(target, answer, views, drift) -> dict:
    found = answer.found if answer.answered else {}
    return {
        "host": target.name,
        "role": "node",
        "answered": answer.answered,
        "error": answer.error,
        "seconds": round(answer.seconds, 2),
        "profile": target.profile,
        "unit": found.get("unit"),
        "ping": found.get("ping"),
        "engine": found.get("engine"),
        "last_good": found.get("last_good"),
        "decode": found.get("decode"),
        "rotation": rotation(target, views) if answer.answered else None,
        "serving_group": target.group,
        "drift": drift.get(target.name) or {"state": "not recorded", "source": SOURCE, "age_s": None},
        "passport": found.get("passport"),
    }


def router_row(target, answer) -> dict:
    view = (answer.found or {}).get("router") or {}
    workers = view.get("workers") or {}
    return {
        "host": target.name,
        "role": "router",
        "url": target.url,
        "answered": answer.answered,
        "error": answer.error,
        "seconds": round(answer.seconds, 2),
        "health": view.get("health"),
        "workers": len(workers),
        "healthy": sum(bool(w.get("healthy")) for w in workers.values()),
    }


def rows(targets, answers, drift) -> tuple[list, list]:
    """(node rows, router rows), in the targets' order."""
    views = {t.name: router_view(answers[t.name]) for t in targets if t.role == "router"}
    nodes = [node_row(t, answers[t.name], views, drift) for t in targets if t.role == "node"]
    routers = [router_row(t, answers[t.name]) for t in targets if t.role == "router"]
    return nodes, routers


def unanswered(nodes, routers) -> list:
    """(host, why) of every host that gave no status."""
    return [(row["host"], row["error"]) for row in [*nodes, *routers] if not row["answered"]]
