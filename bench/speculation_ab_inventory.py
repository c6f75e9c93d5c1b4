"""bench/speculation_ab.py's inventory: the sandbox's nodes and router (inventory/sandbox.py's,
from $SANDBOX_DIR/state.json), every node's stand-in decoding at the incident's baseline rate
(SGLANG_STANDIN_TOKENS_PER_SECOND, $SPECULATION_AB_TOKENS_PER_SECOND, default 82), and on the
nodes named in $SPECULATION_AB_MUST_PAY (comma-separated) throughput.min_speedup_over: sandbox,
so a speculating profile deployed there must decode faster than sandbox's figure on the node."""

import os

from sglang_deploy.cli import exit_on_deploy_error
from sglang_deploy.plan.hosts import sandbox_hosts, sandbox_routers

RATE = float(os.environ.get("SPECULATION_AB_TOKENS_PER_SECOND", "82"))
MUST_PAY = {name for name in os.environ.get("SPECULATION_AB_MUST_PAY", "").split(",") if name}


def at_the_incidents_rate(name, data):
    overrides = dict(data.get("profile_overrides") or {})
    overrides["env"] = {**overrides.get("env", {}), "SGLANG_STANDIN_TOKENS_PER_SECOND": RATE}
    if name in MUST_PAY:
        overrides["throughput"] = {"min_speedup_over": "sandbox"}
    return name, {**data, "profile_overrides": overrides}


with exit_on_deploy_error():
    sandbox = [at_the_incidents_rate(name, data) for name, data in sandbox_hosts()]
    routers = sandbox_routers()
