"""pyinfra facts about a fleet's hosts: how every router lists a node (node/lib/routers.py, run
on the node: the node reaches the routers anyway), whether it answers /ping and whether a
configuration ever passed its gate there; whether the router passes its gate now; whether a
serving group's follower reaches rank 0's dist-init port (those two: the script's result line,
node/lib/result.py, or None when it printed none)."""

from __future__ import annotations

import json
import posixpath
from pathlib import Path

from pyinfra.api import FactBase

from sglang_deploy.facts.serving import ScriptResult
from sglang_deploy.node import lastgood
from sglang_deploy.node.lib import engine_auth, routers
from sglang_deploy.node.lib.http_probe import server_url
from sglang_deploy.plan.commands.builder import inline

# routers.py and engine_auth.py are standard library only: their sources and a few lines run as
# one `python3 -c` (the server's /ping asked with its API key, which the node reads itself).
_VIEW_PY = (
    engine_auth.inline_source()
    + Path(routers.__file__).read_text()
    + """
import argparse, os, sys
worker, server, manifest, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
flags = argparse.ArgumentParser()
add_arguments(flags)
key = key_of(flags.parse_args(sys.argv[5 + count :]))
seen = {}
for url in sys.argv[5 : 5 + count]:
    try:
        listed = Router(url, timeout=3.0).workers().get(normal_url(worker))
        seen[url] = "absent" if listed is None else ("healthy" if listed["healthy"] else "unhealthy")
    except RouterError:
        seen[url] = "unreachable"
try:
    with opener(key).open(server + "/ping", timeout=3) as answer:
        ping = answer.status == 200
except urllib.error.HTTPError as exc:
    ping = exc.code == 401  # started with another key than the env file's: it serves all the same
except OSError:
    ping = False
print(json.dumps({"routers": seen, "ping": ping, "last_good": os.path.exists(manifest)}))
"""
)


class ServingView(FactBase):
    """
    ``{"routers": {router URL: "healthy" | "unhealthy" | "absent" | "unreachable"}, "ping":
    the server's /ping is 200 (asked at ``local_host``: service.probe_host, with the API key
    ``auth`` names: NodeScripts.api_key_args()), "last_good": a configuration passed its gate
    here}``; None when nothing was printed (no python3).
    """

    def command(self, worker_url, local_port, last_good_dir, router_urls=(), local_host="127.0.0.1", auth=()):
        manifest = posixpath.join(last_good_dir, lastgood.MANIFEST)
        server = server_url(local_host, int(local_port))
        args = [worker_url, server, manifest, len(router_urls), *router_urls, *auth]
        return inline(_VIEW_PY, *args) + " || true"

    def process(self, output):
        text = "\n".join(output).strip()
        try:
            return json.loads(text.splitlines()[-1]) if text else None
        except ValueError:
            return None


class RouterGate(ScriptResult):
    """
    router_gate.py's result line, asked once (``--timeout 0``): ``{"status", "cause",
    "workers", "readiness"}``. The command is built by ``RouterPlan.gate``.
    """

    def command(self, command):
        return f"{command} || true"


class DistInitReach(ScriptResult):
    """
    dist_reach.py's result line from a serving group's follower: ``{"status", "cause", ...}``,
    status 0 when it reached rank 0's ``--dist-init-addr``. The command is built by
    operations/group.py.
    """

    def command(self, command):
        return f"{command} || true"
