"""The canary wave in a rolling restart (operations/rollout.py with rollout/bake.py), with
fake hosts: the canary restarts alone, every node reads its /metrics at the bake's start and
end, and a canary that does worse than the nodes on the old configuration is rolled back while
the rest keep what they serve; percentages that mean no node refuse the whole restart."""

import json
import math
from types import SimpleNamespace

import gevent
import pytest
from pyinfra.api.command import StringCommand

from sglang_deploy import run_state
from sglang_deploy.facts.fleet import ServingView
from sglang_deploy.facts.metrics import EngineMetrics
from sglang_deploy.facts.serving import UnitState
from sglang_deploy.operations import rollout as fleet_ops
from sglang_deploy.plan.fleet_hosts import Rotation
from sglang_deploy.plan.hosts import deploy_defaults
from sglang_deploy.plan.settings import settings_of
from sglang_deploy.report.canary import Scrape
from sglang_deploy.rollout import rendezvous, waves

pytestmark = pytest.mark.usefixtures("cycle_in_session")

ROUTER = "http://10.0.0.5:30000"
EXPORTER = "http://10.0.0.5:29000/metrics"
ACTIVE = {"LoadState": "loaded", "ActiveState": "active", "SubState": "running"}
EVENTS = []


class Output:
    def __init__(self, lines):
        self.stdout_lines, self.stderr_lines = lines, []


class Scripts:
    directory = "/opt/sglang-deploy/node"
    unit = "sglang.service"
    last_good_dir = "/var/lib/sglang-deploy/sglang.service/last-good"

    def cycle(self, hook_files, rollback=True):
        return "python3 cycle.py"

    def revert_cycle(self, hook_files):
        return "python3 cycle.py --revert"

    def restore_last_good(self):
        return "python3 lastgood.py restore"

    def keep_last_good(self):
        return "python3 lastgood.py keep"


def metrics(requests, tokens, first_token_s, tok_s):
    """SGLang's /metrics after ``requests`` requests of 100 tokens each."""
    lines = [
        f'sglang:num_requests_total{{model_name="m"}} {float(requests)}',
        'sglang:num_aborted_requests_total{model_name="m"} 0.0',
        f'sglang:generation_tokens_total{{model_name="m"}} {float(tokens)}',
        f'sglang:time_to_first_token_seconds_sum{{model_name="m"}} {requests * first_token_s}',
        f'sglang:e2e_request_latency_seconds_sum{{model_name="m"}} {requests * first_token_s + tokens / tok_s}',
    ]
    for bound in (0.1, 0.2, 0.4, 0.8, math.inf):
        le = "+Inf" if math.isinf(bound) else str(bound)
        count = requests if first_token_s <= bound else 0
        lines.append(f'sglang:time_to_first_token_seconds_bucket{{model_name="m",le="{le}"}} {float(count)}')
    return "\n".join(lines) + "\n"


def outcomes(worker, success, failure):
    """smg 1.13.0's exporter: one worker's circuit-breaker outcomes (captured/smg_1.13.0_*)."""
    return (
        "# TYPE smg_worker_cb_outcomes_total counter\n"
        f'smg_worker_cb_outcomes_total{{worker="{worker}",outcome="success"}} {success}\n'
        f'smg_worker_cb_outcomes_total{{worker="{worker}",outcome="failure"}} {failure}\n'
    )


class Node:
    """A serving node; after its restart it decodes at ``new_tok_s`` (the old configuration
    at 80 tok/s) and fails ``new_failed`` of its 20 answers per scrape through the gateway;
    ``metrics_error``: its /metrics cannot be read; ``gateway_error``: nor the router's."""

    def __init__(self, name, new_tok_s=80.0, metrics_error=None, new_failed=0, gateway_error=None):
        self.name, self.new_tok_s, self.metrics_error = name, new_tok_s, metrics_error
        self.new_failed, self.gateway_error = new_failed, gateway_error
        self.current_op_hash = "restart-op"
        self.logged, self.restarted, self.scrapes = [], False, 0
        self.answers = [0, 0]  # through the gateway: success, failure
        self.asked = []  # the scrape's arguments

    def get_fact(self, cls, **kwargs):
        if cls is EngineMetrics:
            self.asked.append(kwargs)
            return self.scrape()
        return {
            UnitState: ACTIVE,
            ServingView: {"routers": {ROUTER: "healthy"}, "ping": True, "last_good": True},
        }[cls]

    def scrape(self):
        EVENTS.append(("scrape", self.name))
        if self.metrics_error:
            return Scrape(error=self.metrics_error)
        self.scrapes += 1
        requests = 20 * self.scrapes
        tok_s = self.new_tok_s if self.restarted else 80.0
        failed = self.new_failed if self.restarted else 0
        self.answers = [self.answers[0] + 20 - failed, self.answers[1] + failed]
        worker = f"http://{self.name}:30000"
        if self.gateway_error:
            gateway = Scrape(error=self.gateway_error)
        else:
            gateway = Scrape(at=30.0 * self.scrapes, text=outcomes(worker, *self.answers))
        return Scrape(
            at=30.0 * self.scrapes,
            text=metrics(requests, requests * 100, 0.15, tok_s),
            worker=worker,
            gateway={EXPORTER: gateway},
        )

    def run_shell_command(self, command, print_output=False):
        text = str(command.bits[0]) if isinstance(command, StringCommand) else str(command)
        if "lastgood.py keep" in text:
            EVENTS.append(("keep", self.name))
            return True, Output([json.dumps({"status": 0, "cause": None, "profile": "old"})])
        if "cycle.py --revert" in text:
            EVENTS.append(("revert", self.name))
            self.restarted = False
            found = {"status": 0, "cause": None, "outcome": "rolled_back", "profile": "old", "steps": []}
            return True, Output([json.dumps(found)])
        if "lastgood.py restore" in text and "rotation.py" not in text:
            EVENTS.append(("kept", self.name))
            return True, Output([json.dumps({"status": 0, "cause": None, "profile": "old"})])
        EVENTS.append(("start", self.name))
        gevent.sleep(0.02)
        self.restarted = True
        return True, Output([json.dumps({"status": 0, "cause": None, "outcome": "served", "steps": []})])

    def log(self, message, *args):
        self.logged.append(message)

    def log_styled(self, message, **kwargs):
        self.logged.append(message)


@pytest.fixture
def roll(monkeypatch, caplog):
    EVENTS.clear()
    monkeypatch.setattr(fleet_ops, "hook_paths", lambda python: {"hook": "/h.py"})
    monkeypatch.setattr(fleet_ops.canary, "hook_paths", lambda python: {"hook": "/h.py"})

    def run(nodes, **settings):
        data = {**deploy_defaults(), "rolling_canary_bake_s": 0.05, **settings}
        models = {n.name: "m" for n in nodes}
        hosts = [SimpleNamespace(name=n.name) for n in nodes]
        state = SimpleNamespace(
            inventory=SimpleNamespace(get_active_hosts=lambda: hosts), pool=SimpleNamespace(size=len(nodes))
        )
        for node in nodes:
            rendezvous.expect(waves.NODES, node.name, state=state)
        jobs = []
        for node in nodes:
            rotation = Rotation(
                f"http://{node.name}:30000",
                30000,
                [ROUTER],
                settings_of(data).rolling,
                model="m",
                fleet_models=tuple(sorted(models.items())),
                gateway_metrics=(EXPORTER,),
                canary=settings_of(data).canary,
            )
            args = (state, node, Scripts(), "/venv/bin/python", rotation, "new", True)
            jobs.append(gevent.spawn(fleet_ops._rotate, *args))
        with caplog.at_level("INFO"):
            gevent.joinall(jobs, raise_error=True)
        return [job.get() for job in jobs], caplog.text, run_state.of(state).rollout

    return run


def events(kind):
    return [name for what, name in EVENTS if what == kind]


def test_a_canary_like_the_old_nodes_passes_and_the_rest_follow(roll):
    ok, said, run = roll([Node("n1"), Node("n2"), Node("n3")], rolling_canary=1)
    assert ok == [True, True, True]
    assert events("keep") == ["n1"] and events("start") == ["n1", "n2", "n3"]
    assert set(events("scrape")[:6]) == {"n1", "n2", "n3"}, "every node read twice before n2 restarts"
    assert EVENTS.index(("start", "n2")) > max(i for i, e in enumerate(EVENTS) if e[0] == "scrape")
    assert "canary wave: n1 alone" in said and "canary bake passed: n1" in said
    assert run.notes["n1"] == "serves new, back in rotation; canary passed its bake"


def test_a_slower_canary_is_rolled_back_and_the_run_stops_naming_it_and_the_metric(roll):
    ok, said, run = roll([Node("n1", new_tok_s=30.0), Node("n2"), Node("n3")], rolling_canary=1)
    assert ok == [False, False, False]
    assert events("start") == ["n1"], "no node restarts after a failed bake"
    assert events("revert") == ["n1"] and events("kept") == ["n2", "n3"]
    assert "canary n1 failed its bake: n1: decode tok/s" in said
    assert run.notes["n1"] == "canary rolled back: serves old"
    assert run.notes["n2"] == "not restarted: serves old"
    assert run.refusal("n2").startswith("rollout stopped: canary n1 failed its bake")


def test_a_bake_with_no_metrics_reachable_rolls_the_canary_back(roll):
    nodes = [Node(n, metrics_error="URLError: connection refused") for n in ("n1", "n2", "n3")]
    ok, said, _ = roll(nodes, rolling_canary=1)
    assert ok == [False, False, False] and events("revert") == ["n1"]
    assert "n1: metrics: no /metrics at the bake's start: URLError: connection refused" in said
    assert "no metrics from any node on the old configuration" in said


def test_a_canary_as_large_as_the_fleet_restarts_nothing(roll):
    ok, said, _ = roll([Node("n1"), Node("n2")], rolling_canary="100%")
    assert ok == [False, False] and not events("start") and events("kept") == ["n1", "n2"]
    assert "rolling_canary: 100% is 2 canaries of 2 serving nodes" in said


def test_a_batch_percentage_that_means_no_node_restarts_nothing(roll):
    ok, said, _ = roll([Node("n1"), Node("n2"), Node("n3")], rolling_batch="10%")
    assert ok == [False, False, False] and not events("start")
    assert "rolling_batch: 10% of 3 nodes is 0 nodes; use at least 34% or a count" in said


def test_a_percentage_batch_rolls_that_share_at_a_time(roll):
    ok, said, _ = roll([Node(f"n{i}") for i in range(1, 5)], rolling_batch="50%")
    assert ok == [True] * 4
    assert "rolling 2 at a time: n1, n2 | n3, n4" in said


def test_a_canary_failing_more_through_the_gateway_is_rolled_back_naming_gateway_error_rate(roll):
    nodes = [Node("n1", new_failed=5), Node("n2"), Node("n3")]
    ok, said, run = roll(nodes, rolling_canary=1)
    assert ok == [False, False, False] and events("start") == ["n1"] and events("revert") == ["n1"]
    assert "canary n1 failed its bake: n1: gateway: error rate: 5 of its 20 answers failed (25.0%)" in said
    assert run.notes["n1"] == "canary rolled back: serves old"
    assert nodes[0].asked[-1] == {
        "port": 30000,
        "worker_url": "http://n1:30000",
        "gateways": ("http://10.0.0.5:29000/metrics",),
        "host": "127.0.0.1",
    }


def test_gateway_metrics_not_reachable_are_said_and_the_bake_judges_on_sglang_alone(roll):
    nodes = [Node(n, gateway_error="URLError: connection refused") for n in ("n1", "n2", "n3")]
    ok, said, _ = roll(nodes, rolling_canary=1)
    assert ok == [True, True, True]
    assert (
        "canary bake (m): gateway: metrics not reachable: http://10.0.0.5:29000/metrics (n1: no /metrics"
        in said
    )
    assert "canary bake passed: n1; the others follow (not everything judged: m: gateway: metrics not" in said


def test_gateway_metrics_not_reachable_roll_the_canary_back_when_required(roll):
    nodes = [Node(n, gateway_error="URLError: connection refused") for n in ("n1", "n2", "n3")]
    ok, said, _ = roll(nodes, rolling_canary=1, rolling_canary_require_gateway_metrics=True)
    assert ok == [False, False, False] and events("revert") == ["n1"]
    assert "canary n1 failed its bake: bake: gateway: metrics not reachable" in said
