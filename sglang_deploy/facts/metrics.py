"""A pyinfra fact: the server's SGLang /metrics, read on the node (the controller may not reach
the server's port; curl is not on every node, python3 is), cut to the families a canary's bake
compares (report/canary.py FAMILIES), with the node's clock at the read."""

from __future__ import annotations

import json
import shlex

from pyinfra.api import FactBase

from sglang_deploy.report.canary import FAMILIES, Scrape

_SCRAPE_PY = """
import json, sys, time, urllib.request
port, families = int(sys.argv[1]), tuple(sys.argv[2:])
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
at = time.time()
try:
    with opener.open("http://127.0.0.1:%d/metrics" % port, timeout=5) as answer:
        body = answer.read().decode("utf-8", "replace")
except Exception as exc:
    print(json.dumps({"at": at, "error": "%s: %s" % (type(exc).__name__, exc)}))
else:
    keep = [
        line for line in body.splitlines()
        if line.startswith(families) or line.startswith(tuple("# TYPE " + f for f in families))
    ]
    print(json.dumps({"at": at, "text": "\\n".join(keep) + "\\n"}))
"""


class EngineMetrics(FactBase):
    """
    The server's /metrics on ``port`` as a report.canary.Scrape: its text (the bake's families
    only) and when it was read, or why it could not be.
    """

    @staticmethod
    def default():
        return Scrape(error="the node printed nothing (no python3?)")

    def command(self, port):
        args = [str(int(port)), *FAMILIES]
        return f"python3 -c {shlex.quote(_SCRAPE_PY)} " + " ".join(shlex.quote(a) for a in args) + " || true"

    def process(self, output):
        text = "\n".join(output).strip()
        try:
            found = json.loads(text.splitlines()[-1]) if text else None
        except ValueError:
            found = None
        if not isinstance(found, dict):
            return Scrape(error=f"no answer from the node's scrape: {text[-200:] or 'nothing printed'}")
        return Scrape(at=float(found.get("at", 0.0)), text=found.get("text"), error=found.get("error"))
