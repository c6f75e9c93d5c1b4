"""The settings of a rollout: rolling restarts and the canary wave."""

from __future__ import annotations

from pydantic import Field

from sglang_deploy.plan.settings.values import Group, NodeCount, NodeCountOrOff, Seconds


class RollingRestarts(Group):
    """Rolling restarts (every run that restarts nodes)"""

    rolling_batch: NodeCount = Field(
        1,
        description="Nodes (or serving groups) restarted at a time, as a count or a percentage of the run's "
        'serving nodes (`"25%"`, rounded down; a percentage that rounds to no node is refused): each is taken '
        "out of every router, drained, restarted through its gate, put back and waited for until every router "
        "lists it healthy. Without routers the batches still keep the other nodes serving.",
    )
    rolling_max_failures: int = Field(
        0,
        ge=0,
        description="Once more than this many nodes failed, the rollout stops: later nodes keep their previous "
        "configuration.",
    )
    rolling_max_fail_percent: float | None = Field(
        None,
        ge=0,
        le=100,
        description="Once failed nodes are more than this percentage of the run's nodes, the rollout stops "
        "(unset: rolling_max_failures decides).",
    )
    rolling_drain_timeout_s: Seconds = Field(
        120, description="How long a node out of rotation may take to finish its requests in flight."
    )
    rolling_healthy_timeout_s: Seconds = Field(
        120, description="How long a restarted node may take until every router lists it healthy."
    )
    rolling_without_routers: bool = Field(
        False,
        description="A router that does not answer before a node leaves rotation stops the rollout; true rolls on "
        "without it (that router then keeps sending to the restarting node until its health check).",
    )
    rolling_first_wave: bool = Field(
        True,
        description="Nodes that serve nothing (not installed, unit stopped or failed, healthy in no router) "
        "restart together in a first wave, before the serving ones roll; false rolls every node in batches.",
    )


class Canary(Group):
    """Canary wave (sglang_deploy/report/canary.py, operations/canary.py)"""

    rolling_canary: NodeCountOrOff = Field(
        0,
        description="Nodes restarted first, as a count or a percentage of the serving nodes the run restarts "
        "(0: no canary): after the nodes that serve nothing, only they restart; then for rolling_canary_bake_s their "
        "SGLang /metrics are compared with the nodes still on the old configuration (error rate, TTFT p95, "
        "decode tok/s), and so is what the routers' exporters say of each (the gateway's error rate per worker); "
        "a canary that does worse is rolled back to the configuration it served before and the "
        "run stops, naming it and the metric. Refused when it would leave no node of a canary's model on the "
        "old configuration. Single nodes only: serving groups roll in batches.",
    )
    rolling_canary_bake_s: Seconds = Field(
        300,
        description="How long the canaries serve under traffic before they are compared (on real nodes a few "
        "minutes: TTFT p95 needs requests; the sandbox's tests use a few seconds).",
    )
    rolling_canary_min_requests: int = Field(
        10,
        ge=1,
        description="Requests each canary and the old nodes together must have finished during the bake; fewer "
        "is no evidence, and the bake fails saying so.",
    )
    rolling_canary_max_error_rate: float = Field(
        0.01,
        ge=0,
        le=1,
        description="A canary fails when the share of its requests aborted during the bake "
        "(sglang:num_aborted_requests_total of those and sglang:num_requests_total) is more than this above the "
        "old nodes' share. The gateway's error rate has the same limit: the share of a canary's answers its "
        'routers counted failed (smg_worker_cb_outcomes_total{outcome="failure"} of its worker URL).',
    )
    rolling_canary_max_ttft_regression_pct: float = Field(
        20,
        ge=0,
        description="A canary fails when its TTFT p95 during the bake (sglang:time_to_first_token_seconds bucket "
        "deltas) is more than this percentage above the old nodes' (theirs pooled).",
    )
    rolling_canary_max_decode_regression_pct: float = Field(
        10,
        ge=0,
        description="A canary fails when its decode tok/s during the bake (sglang:generation_tokens_total per "
        "second) is more than this percentage below the old nodes' median.",
    )
    rolling_canary_require_gateway_metrics: bool = Field(
        False,
        description="When a bake's gateway figures (each node's series on every router's exporter, "
        "router_prometheus_port, read from the node) could not be read or saw fewer than "
        "rolling_canary_min_requests answers: false says so as a warning and SGLang's /metrics judge alone; "
        "true fails the bake, and the canary is rolled back. smg exports no latency per worker: SGLang's TTFT "
        "p95 judges latency either way.",
    )
