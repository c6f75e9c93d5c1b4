"""A pyinfra fact: the server's SGLang /metrics, read on the node (the controller may not reach
the server's port; curl is not on every node, python3 is), cut to the families a canary's bake
compares (report/canary.py FAMILIES), with the node's clock at the read; and each router's
exporter as the node reaches it, cut to the node's own series of the gateway's families
(report/canary.py GATEWAY_FAMILIES, label ``worker`` the node's worker URL)."""

from __future__ import annotations

import json

from pyinfra.api import FactBase

from sglang_deploy.node.lib.http_probe import server_url
from sglang_deploy.plan.commands.builder import inline
from sglang_deploy.report.canary import FAMILIES, GATEWAY_FAMILIES, Scrape

_SCRAPE_PY = """
import json, sys, time, urllib.request
ask = json.loads(sys.argv[1])
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

def read(url, families, worker=None):
    at = time.time()
    try:
        with opener.open(url, timeout=5) as answer:
            body = answer.read().decode("utf-8", "replace")
    except Exception as exc:
        return {"at": at, "error": "%s: %s" % (type(exc).__name__, exc)}
    types = tuple("# TYPE " + f for f in families)
    mine = None
    if worker is not None:
        mine = 'worker="%s"' % worker.replace("\\\\", "\\\\\\\\").replace('"', '\\\\"')
    keep = [
        line for line in body.splitlines()
        if line.startswith(types) or (line.startswith(tuple(families)) and (mine is None or mine in line))
    ]
    return {"at": at, "text": "\\n".join(keep) + "\\n"}

found = read(ask["server"] + "/metrics", ask["families"])
found["worker"] = ask["worker"]
found["gateway"] = {url: read(url, ask["gateway_families"], ask["worker"]) for url in ask["gateways"]}
print(json.dumps(found))
"""


class EngineMetrics(FactBase):
    """
    The server's /metrics on ``port`` (asked at ``host``: service.probe_host) as a
    report.canary.Scrape: its text (the bake's families only) and when it was read, or why it
    could not be; with ``gateways`` (router exporter URLs) and ``worker_url`` (the URL they know
    this node by), each one's read of this node's series.
    """

    @staticmethod
    def default():
        return Scrape(error="the node printed nothing (no python3?)")

    def command(self, port, worker_url=None, gateways=(), host="127.0.0.1"):
        ask = {
            "server": server_url(host, int(port)),
            "families": list(FAMILIES),
            "worker": worker_url,
            "gateways": list(gateways),
            "gateway_families": list(GATEWAY_FAMILIES),
        }
        return inline(_SCRAPE_PY, json.dumps(ask)) + " || true"

    def process(self, output):
        text = "\n".join(output).strip()
        try:
            found = json.loads(text.splitlines()[-1]) if text else None
        except ValueError:
            found = None
        if not isinstance(found, dict):
            return Scrape(error=f"no answer from the node's scrape: {text[-200:] or 'nothing printed'}")
        gateway = {
            url: _scrape(read) for url, read in (found.get("gateway") or {}).items() if isinstance(read, dict)
        }
        return Scrape(
            at=float(found.get("at", 0.0)),
            text=found.get("text"),
            error=found.get("error"),
            worker=found.get("worker"),
            gateway=gateway,
        )


def _scrape(read):
    return Scrape(at=float(read.get("at", 0.0)), text=read.get("text"), error=read.get("error"))
