"""Deploy and host settings: the schema of pyinfra's host data, and `settings_of`.

This is the one place for their defaults: a setting no host data gives gets the default written
next to its field below (group_data/all.py hands them to pyinfra as group `all`'s data). Any of
them can be set for a host (its inventory entry: inventory/hosts.yml, the sandbox inventory),
for a group (group_data/<group>.py) or for a run (`pyinfra ... --data rollback=false`). A key
that is neither a setting nor pyinfra's own stops the deploy before any host is touched, naming
the key, where it was set and the nearest setting. What the server runs is not here: that is
the profile's (sglang_deploy/profile/schema.py). docs/settings.md lists every setting
(`make docs`).
"""

from __future__ import annotations

import difflib
import re
import shlex
from collections.abc import Mapping
from functools import cache, cached_property
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from sglang_deploy.errors import DeployError
from sglang_deploy.plan.router_flags import RETIRED, gateway_pin, names_retired
from sglang_deploy.profile.fields import AbsPath, LockPlatform, Pin, PythonVersion, VenvPath, engine_home
from sglang_deploy.rollout.sizes import count_or_percent

Port = Annotated[int, Field(ge=1, le=65535)]
Seconds = Annotated[float, Field(gt=0)]


def _router_pins(pins: list[str]) -> list[str]:
    gateway_pin(pins)  # ValueError: no gateway pinned, or two
    return pins


def _no_retired_gateway(value: Any) -> Any:
    # Before the pins are read as exact pins: a bare `sglang-router` gets this answer too.
    if isinstance(value, (list, tuple)) and names_retired(value):
        smg = ", ".join(Router.model_fields["router_packages"].default)
        raise ValueError(f"{RETIRED} is retired; smg is the gateway: router_packages: [{smg}]")
    return value


def _words(value: Any) -> Any:
    # `--data router_extra_args="--retry-max-retries 3"` arrives as one string.
    return shlex.split(value) if isinstance(value, str) else value


# A number of nodes: a count, or a percentage of the run's serving nodes ("25%").
NodeCount = Annotated[int | str, BeforeValidator(count_or_percent, json_schema_input_type=int | str)]
NodeCountOrOff = Annotated[
    int | str, BeforeValidator(lambda v: count_or_percent(v, minimum=0), json_schema_input_type=int | str)
]


def _apt_pin(value: Any) -> Any:
    if not isinstance(value, str) or not APT_PIN.fullmatch(value):
        raise ValueError(f"a Debian package pinned as name=version, got {value!r}")
    return value


# A Debian package name (Debian Policy 5.6.1) and version (5.6.12), as apt-get install takes them.
APT_PIN = re.compile(r"[a-z0-9][a-z0-9+.-]+=[0-9][A-Za-z0-9.+~:-]*")

AptPin = Annotated[str, AfterValidator(_apt_pin)]
RouterPins = Annotated[list[Pin], AfterValidator(_router_pins), BeforeValidator(_no_retired_gateway)]
Words = Annotated[list[str], BeforeValidator(_words, json_schema_input_type=str | list[str])]


class _Group(BaseModel):
    """A group of settings (a section of docs/settings.md; host data itself is flat)."""

    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True)


class WhatToServe(_Group):
    """What to serve"""

    profile: str = Field(
        "baseline",
        min_length=1,
        description="The profile: a name under profiles/ or a path to a profile file.",
    )
    profile_overrides: dict[str, Any] = Field(
        {},
        description='Mapping deep-merged over the profile for this host, e.g. `{"service": {"port": 30001}}`.',
    )


class ServingGroups(_Group):
    """Serving groups: one model on several nodes (sglang_deploy/plan/serving_group.py)"""

    serving_group: str | None = Field(
        None,
        description="Hosts with the same serving_group run one multi-node server (SGLang --nnodes, the "
        "profile's server_args.nnodes); unset: the host serves on its own.",
    )
    node_rank: int | None = Field(
        None,
        ge=0,
        description="The member's --node-rank; unset: the order of the group's hosts in the inventory (first: rank 0).",
    )
    cluster_address: str | None = Field(
        None,
        description="The host's address on the cluster network; rank 0's is the group's --dist-init-addr host "
        "(port: the profile's service.dist_init_port). Unset: its ssh_hostname.",
    )
    socket_ifname: str | None = Field(
        None,
        description="The host's cluster network interface: NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME in its env "
        "file (unset: NCCL and gloo pick one).",
    )
    group_follower_stop_s: Seconds = Field(
        20,
        description="Coordinated stop: rank 0 stops first and broadcasts the shutdown; a follower still running "
        "this many seconds after rank 0 is gone is killed (SGLang's followers ignore SIGTERM).",
    )


class NodePaths(_Group):
    """Where things go on the node"""

    sglang_deploy_dir: AbsPath = Field(
        "/opt/sglang-deploy",
        description="On-node scripts (gate, restart, worker check), uploaded wheels, tool venvs.",
    )
    env_dir: AbsPath = Field(
        "/etc/sglang", description="Env files (root, 0700 directory, 0600 files): `<env_dir>/<service>.env`."
    )
    unit_dir: AbsPath = Field(
        "/etc/systemd/system", description="systemd units: `<unit_dir>/<service>.service`."
    )
    venvs_dir: AbsPath | None = Field(
        None,
        description="Engine venvs, one per pin set (named after its pins, wheels and Python version); the unit "
        "runs through the profile's engine.venv, a link the restart cycle points at one of them. Unset: the "
        "service's own, `/opt/sglang/venvs` for the service `sglang`, `/opt/sglang/services/<service>/venvs` "
        "for any other (the profile's service.name), so two services of one node share no venv.",
    )
    state_dir: AbsPath = Field(
        "/var/lib/sglang-deploy",
        description="Node-side state: the last configuration that passed the gate, per service.",
    )
    run_dir: AbsPath = Field(
        "/run/sglang-deploy",
        description="Runtime files of a deploy (lost on reboot): the deploy lock, units being verified, the "
        "readiness gate's report of the last start.",
    )

    def engine_venvs_dir(self, service: str) -> str:
        """Where the engine venvs of ``service`` (the profile's service.name) are: venvs_dir, or
        the service's own (profile/fields.py engine_home)."""
        return self.venvs_dir or f"{engine_home(service)}/venvs"


class TheOs(_Group):
    """The OS"""

    os_packages: list[str] = Field(
        ["python3", "python3-venv", "pciutils", "rsync", "iproute2"],
        description="Debian/Ubuntu packages the recipe needs on the node, installed with apt when missing (the "
        "package index is refreshed only then): venvs, lspci/setpci for the ACS check and unit, rsync for "
        "copying files where both ends have it, `ss` for make verify's port check.",
    )


class ModelStaging(_Group):
    """Model staging"""

    huggingface_hub_pin: Pin = Field(
        "huggingface_hub==2.4.0",
        description="Models with `source: {huggingface: ...}` are downloaded on the node by this huggingface_hub, "
        "in a venv of its own under sglang_deploy_dir (hf-venv), never the engine's.",
    )
    model_keep_previous: bool = Field(
        True,
        description="A new model is staged beside the served one and swapped in by the restart, after preflight; "
        "the old weights stay (`<dir>.sglang-deploy-previous`) until the new configuration is recorded as the "
        "last known good, so a rollback renames them back. That needs room for both copies (the new model's "
        "changed files): where the disk has not, staging is refused before anything is touched. `false` "
        "replaces the weights in place instead: the old ones are removed first when both do not fit, the new "
        "ones swapped in as soon as they are verified. Trade-off: no weight rollback (a rollback restarts the "
        "old configuration on the new weights), and a server that dies before the copy ends cannot start.",
    )


class Deploys(_Group):
    """Deploys: the lock, rollback, repair"""

    deploy_lock_wait_s: float = Field(
        600,
        ge=0,
        description="One deploy at a time per node (and one rollout per fleet): how long a second deploy waits "
        "before it fails saying who holds the lock. The lock goes away with the deploy that holds it.",
    )
    rollback: bool = Field(
        True,
        description="When a new configuration fails its readiness gate, restore the last one that passed, restart "
        "on it and gate again (the deploy still fails). `--data rollback=false` leaves a failed node as it is, "
        "for debugging.",
    )
    repair: bool = Field(
        False,
        description="`make repair` (`--data repair=true`): force-reinstall the engine distributions whose installed "
        "files drifted from their wheels' RECORD (the profile's engine.drift_check), then restart.",
    )


class EngineVenvs(_Group):
    """Engine venvs"""

    venvs_keep: int = Field(
        3,
        ge=0,
        description="How many engine venvs to keep (newest first); older ones go, but never the live one nor the "
        "last known good's, so rolling back an engine change needs no download.",
    )
    venv_min_free_gib: float = Field(
        2.0,
        ge=0,
        description="Free disk (GiB) that must remain beside the engine venvs: a new venv needs the live one's size "
        "plus this; preflight refuses before anything is built or stopped.",
    )


class Connection(_Group):
    """How the controller reaches a host (pyinfra's own keys: unset, pyinfra's defaults; its other ssh_* keys pass through)"""

    ssh_hostname: str | None = Field(None, description="The address to reach (unset: the host's name).")
    ssh_user: str | None = Field(None, description="The login user.")
    ssh_port: Port | None = Field(None, description="The SSH port (unset: 22).")
    ssh_key: str | None = Field(None, description="A private key file on the controller.")
    sudo: bool = Field(
        False,
        description="Log in as ssh_user and run every command as root through a passwordless sudo (pyinfra's "
        "`_sudo`, which a hosts file's `sudo: true` and the sandbox's `--sudo-user` nodes set); secrets still "
        "reach the node in no file another user can read. For every host of one run: `pyinfra --sudo`.",
    )


class Fleet(_Group):
    """Fleets: SGLang's router in front of the serving nodes (sglang_deploy/plan/fleet.py)"""

    role: Literal["router", "monitoring"] | None = Field(
        None,
        description="`router`: the host runs SGLang's router (so does every host of the inventory's `routers` "
        "group); `monitoring`: it runs Prometheus over the fleet (so does every host of the `monitoring` group).",
    )
    fleet_address: str | None = Field(
        None,
        description="How other hosts reach this one (routers -> nodes, nodes -> routers); unset: its "
        "ssh_hostname. A server its profile's service.host binds to one address is reached there.",
    )


class Router(_Group):
    """The router (on router hosts)"""

    router_packages: RouterPins = Field(
        ["smg==1.13.0"],
        description="The router's exact pins: one gateway (`smg==<version>`; `sglang-router`, its former name, "
        "is refused) and any others, installed in a venv of their own from "
        "their lock (locks/, `make lock ROUTER_PIN=...`): every distribution with its sha256, no dependency "
        "resolution; a pin set without a lock stops the run at plan time, naming the command that makes it. "
        "The gateway's flag names come from its version's option list (sglang_deploy/plan/router_options/): a "
        "flag the version lacks stops the run at plan time.",
    )
    router_platform: LockPlatform = Field(
        "x86_64-manylinux_2_34",
        description="The router hosts' platform, which the router's lock is resolved for (CPU architecture and "
        "glibc as a manylinux tag, as the engine's `engine.platform`).",
    )
    router_python_version: PythonVersion = Field(
        "3.11",
        description="The X.Y of router_python on the router hosts (Debian 12's python3), which the router's lock "
        "is resolved for; a host whose interpreter is another one stops the run, naming the lock to make.",
    )
    router_install_from: Literal["wheelhouse", "index"] = Field(
        "wheelhouse",
        description="`wheelhouse`: the router's locked wheels are downloaded once on the controller (`make "
        "router-wheels`) and uploaded, so the host needs no route to an index; `index`: the host downloads "
        "them itself (hashes still required).",
    )
    router_venvs_dir: VenvPath = Field(
        "/opt/sglang-router/venvs",
        description="Where the router's venvs live on its host: one per lock, "
        "`<gateway>-<version>-<hash of the lock>`, so a new pin or lock is built beside the running one and "
        "the unit moves to it on restart.",
    )
    router_python: str = Field(
        "python3", min_length=1, description="The interpreter that creates the router's venv."
    )
    router_bind: str = Field(
        "0.0.0.0", min_length=1, description="The address the router and its exporter listen on."
    )
    router_port: Port = Field(30000, description="The router's port: clients send their requests here.")
    router_prometheus_port: Port = Field(
        29000,
        description="The router's Prometheus exporter (the router will not start when this port is taken).",
    )
    router_health_check_port: Port | None = Field(
        29001,
        description="smg's dedicated probe port (`--health-check-port`): /readiness and /health served on a "
        "runtime of their own, which the router's gate asks. null: none.",
    )
    router_policy: str = Field(
        "round_robin",
        min_length=1,
        description="The gateway's load-balancing policy: one of its version's `--policy` choices (smg 1.13.0: "
        "random, round_robin, passthrough, cache_aware, power_of_two, least_load, manual, consistent_hashing, "
        "prefix_hash).",
    )
    router_health_check_interval_s: int = Field(
        2,
        ge=1,
        description="Seconds between the router's health checks of its workers (its own default is far slower: a "
        "node that comes back would wait a minute for its first check).",
    )
    router_worker_startup_check_interval_s: int = Field(
        2,
        ge=1,
        description="Seconds between the router's checks of a worker it is adding (listed in its unit, or added "
        "back by a node's rotation) until the worker answers. The gateways' own default, 30 s, kept a fresh "
        "fleet's nodes out of rotation for minutes after they served.",
    )
    router_health_check_timeout_s: int = Field(
        5, ge=1, description="Seconds one health check of a worker may take."
    )
    router_health_failure_threshold: int = Field(
        3, ge=1, description="Failed health checks in a row before the router takes a worker out."
    )
    router_health_success_threshold: int = Field(
        1, ge=1, description="Passed health checks in a row before the router sends a worker requests again."
    )
    router_retry_max_retries: int = Field(
        5,
        ge=1,
        description="Attempts of one request across workers (1: no retry). Rendered always, like "
        "every retry, circuit-breaker and health setting: the gateways' own defaults move between versions.",
    )
    router_retry_initial_backoff_ms: int = Field(50, ge=0, description="Backoff before the first retry.")
    router_retry_max_backoff_ms: int = Field(30000, ge=0, description="Longest backoff between retries.")
    router_retry_backoff_multiplier: float = Field(1.5, ge=1, description="Backoff growth per retry.")
    router_retry_jitter_factor: float = Field(
        0.2, ge=0, le=1, description="Share of a backoff drawn at random (0 to 1)."
    )
    router_cb_failure_threshold: int = Field(
        10, ge=1, description="Failed requests to a worker (within the window) that open its circuit breaker."
    )
    router_cb_success_threshold: int = Field(
        3, ge=1, description="Successes in the half-open state that close a worker's circuit breaker again."
    )
    router_cb_timeout_s: int = Field(
        60,
        ge=1,
        description="Seconds an open circuit breaker waits before trying the worker again (half-open).",
    )
    router_cb_window_s: int = Field(
        120, ge=1, description="Seconds of the sliding window the circuit breaker counts failures in."
    )
    router_drain_settle_s: int = Field(
        5,
        ge=0,
        description="smg: seconds a worker taken out of rotation stays listed as Draining (no new requests, in-flight "
        "ones finish) before it is removed, set per worker (PATCH /workers) before its removal; the node's own "
        "drain (/get_load, rolling_drain_timeout_s) follows.",
    )
    router_shutdown_grace_s: int = Field(
        60,
        ge=1,
        description="Seconds a stopping router finishes its requests in flight (`--shutdown-grace-period-secs`; smg "
        'answers /readiness 503 "draining" meanwhile); the unit\'s TimeoutStopSec is 15 s longer.',
    )
    router_extra_args: Words = Field(
        [],
        description='Extra arguments for the gateway\'s launcher, e.g. `["--log-level", "debug"]`; each flag '
        "checked against the pinned version's option list.",
    )
    router_gate_timeout_s: Seconds = Field(
        120,
        description="How long the router's gate waits for /readiness 200 (on router_health_check_port when set) "
        "and every worker healthy.",
    )


class RollingRestarts(_Group):
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


class Canary(_Group):
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


class Monitoring(_Group):
    """Monitoring: Prometheus over the fleet, a node exporter on every host, Grafana's dashboards where it runs (sglang_deploy/plan/monitoring.py)"""

    node_exporter: bool = Field(
        True,
        description="Install and run Prometheus' node exporter (node_exporter_packages) on this host, after its "
        "other steps; the monitoring host scrapes it.",
    )
    node_exporter_packages: list[AptPin] = Field(
        ["prometheus-node-exporter=1.5.0-1+b6"],
        description="The node exporter's distribution package, pinned (`name=version`, Debian bookworm's).",
    )
    node_exporter_port: Port = Field(9100, description="The port the node exporter listens on.")
    prometheus_packages: list[AptPin] = Field(
        ["prometheus=2.42.0+ds-5+deb12u1"],
        description="Prometheus' distribution package on monitoring hosts, pinned (`name=version`, Debian "
        "bookworm's; its promtool checks every configuration before it is installed).",
    )
    prometheus_port: Port = Field(9090, description="The port Prometheus listens on (monitoring hosts).")
    prometheus_scrape_interval_s: int = Field(
        15, ge=1, description="Seconds between two scrapes of a target (and between two rule evaluations)."
    )
    prometheus_rule_files: list[str] = Field(
        ["templates/prometheus/sglang-alerts.rules.yml"],
        description="Alert rule files on the controller (relative: to the repository), installed under "
        "/etc/prometheus/rules/; one that does not exist is skipped, said in the run's output.",
    )
    prometheus_ready_timeout_s: Seconds = Field(
        60,
        description="After a restart or reload, how long Prometheus may take to answer /-/ready 200 (and to "
        "report the new configuration loaded); the node exporter gets as long to answer /metrics.",
    )
    grafana_provisioning_dir: AbsPath = Field(
        "/etc/grafana/provisioning",
        description="Where a monitoring host's Grafana reads its provisioning (Grafana's own package's "
        "default). Grafana is not in Debian's archive and the deploy never installs it: where this directory "
        "exists, it gets our Prometheus datasource and a dashboard provider (Grafana restarted if that changed "
        "and it runs); where it does not, the step says Grafana is not there and changes nothing.",
    )
    grafana_dashboards_dir: AbsPath = Field(
        "/var/lib/grafana/dashboards/sglang-deploy",
        description="Where the dashboards (grafana_dashboard_files) go on a monitoring host with Grafana; "
        "the provider reads them from there.",
    )
    grafana_dashboard_files: list[str] = Field(
        ["templates/grafana/sglang-deploy.json", "build/grafana/sglang-dashboard.json"],
        description="Grafana dashboards on the controller (relative: to the repository): ours, and SGLang's "
        "published one (`make grafana-dashboards` downloads it); each one's Prometheus queries are bound to "
        "our datasource. One that does not exist is skipped, said in the run's output where Grafana is.",
    )


class Fanout(_Group):
    """Fan-out: model directories and the engine wheelhouse passed node to node (sglang_deploy/plan/fanout.py)"""

    fanout: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Nodes that need the same model (or wheelhouse) copy it from each other in a tree, so the "
        "controller sends each byte once: rsync over SSH, the child pulling from a parent whose copy was "
        "verified against the manifest, with a per-run key the parent accepts for a read-only rrsync of that "
        "directory alone. `auto`: on when more than two nodes of the run need the same bytes; `off`: every "
        "node from the controller.",
    )
    fanout_degree: int = Field(
        2,
        ge=1,
        description="How many nodes the controller feeds at once, and how many children each node with a "
        "verified copy serves.",
    )
    fanout_ssh_port: Port | None = Field(
        None,
        description="The SSH port other nodes reach this one on (unset: its ssh_port, else 22); its address is "
        "fleet_address (else ssh_hostname).",
    )
    fanout_bwlimit_kib: int | None = Field(
        None, ge=1, description="rsync --bwlimit (KiB/s) of a copy between nodes; unset: none."
    )
    controller_bwlimit_kib: int | None = Field(
        None,
        ge=1,
        description="rsync --bwlimit (KiB/s) of every copy from the controller (model staging, fan-out roots): "
        "spare the controller's uplink; unset: none. Per-file uploads (no rsync on one end) are not limited.",
    )
    fanout_stall_timeout_s: int = Field(
        60,
        ge=1,
        description="A copy between nodes that moves no data this long (rsync --timeout) fails: the node "
        "copies from another source.",
    )


# In docs/settings.md's order.
GROUPS = (
    WhatToServe,
    ServingGroups,
    NodePaths,
    TheOs,
    ModelStaging,
    Deploys,
    EngineVenvs,
    Connection,
    Fleet,
    Router,
    RollingRestarts,
    Canary,
    Monitoring,
    Fanout,
)


def _view(group):
    """A settings group read from the whole, as that group's model (its fields, their values)."""

    def read(self):
        return group.model_construct(**{name: getattr(self, name) for name in group.model_fields})

    read.__doc__ = group.__doc__
    return cached_property(read)


class Settings(*reversed(GROUPS)):
    """Every setting of one host (host data is flat: group_data/all.py, the inventory, --data).
    Each group is also a view of its own (``settings.router.router_port``), for code that takes
    one group: pass the view, never a hand copy of its fields."""

    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True, frozen=True)

    serve = _view(WhatToServe)
    groups = _view(ServingGroups)
    paths = _view(NodePaths)
    os = _view(TheOs)
    staging = _view(ModelStaging)
    deploys = _view(Deploys)
    venvs = _view(EngineVenvs)
    connection = _view(Connection)
    fleet = _view(Fleet)
    router = _view(Router)
    rolling = _view(RollingRestarts)
    canary = _view(Canary)
    monitoring = _view(Monitoring)
    fan_out = _view(Fanout)


# -- Reading host data -----------------------------------------------------------------------

FIELDS = tuple(Settings.model_fields)
# The keys a hosts file's `fleet:` section may set: settings of the whole fleet.
FLEET_KEYS = tuple(name for group in (Router, RollingRestarts, Canary) for name in group.model_fields)


def default(key: str) -> Any:
    """The default of setting ``key`` (where an operation needs one without host data)."""
    return Settings.model_fields[key].get_default(call_default_factory=True)


def group_defaults() -> dict[str, Any]:
    """What group_data/all.py gives pyinfra: every setting's default but pyinfra's own keys
    (Connection: pyinfra keeps its defaults for those)."""
    return {key: default(key) for key in FIELDS if key not in Connection.model_fields}


@cache
def pyinfra_keys() -> frozenset:
    """Host data keys pyinfra itself reads: its connectors' (ssh_*, docker_*, ...). Keys
    starting with ``_`` are its operation arguments (``_sudo``, ...) and are legal too."""
    from pyinfra.api.connectors import get_all_connectors

    return frozenset(key for connector in get_all_connectors().values() for key in connector.data_meta or {})


def check_keys(data: Mapping[str, Any], where: str, known: tuple | None = None, path: str = "") -> None:
    """DeployError naming the first key of ``data`` that is no setting (of ``known``; default:
    every setting) nor pyinfra's, where it was set, and the nearest known key. ``path``: the
    key path down to ``data`` in a file (``hosts.gpu1.``), written before the key."""
    choices = FIELDS if known is None else known
    legal = set(choices) if known is not None else set(FIELDS) | pyinfra_keys()
    for key in data:
        if isinstance(key, str) and (key in legal or (known is None and key.startswith("_"))):
            continue
        close = difflib.get_close_matches(str(key), sorted(legal), n=1)
        hint = f"did you mean {close[0]!r}?" if close else "the settings: docs/settings.md"
        raise DeployError(f"{where}: {path}{key}: unknown key ({hint})")


def validate(data: Mapping[str, Any], where: str = "host data", path: str = "") -> Settings:
    """The settings ``data`` (one mapping) sets, every other at its default; DeployError for
    an unknown key or a bad value, naming it and ``where`` (``path``: as for check_keys)."""
    return _validated([(where, data)], path)


def settings_of(data, who: str | None = None) -> Settings:
    """The settings of a host whose data is ``data``: pyinfra's host data (each of its layers
    checked: --data, the inventory's entry, group data, group_data/all.py) or a plain mapping
    ((name, data) pairs of plan/hosts.py and the tests; ``who`` names it in errors)."""
    if isinstance(data, Settings):
        return data
    if isinstance(data, Mapping):
        return _validated([(who or "host data", data)])
    return _validated(_pyinfra_layers(data))


def _pyinfra_layers(data) -> list[tuple[str, Mapping]]:
    """pyinfra's host data as (where, mapping), first the one that wins (pyinfra's order)."""
    host = data.host
    inventory = host.inventory
    layers = [
        (f"data host {host.name} was given during the deploy", data.override_datas),
        ("--data", inventory.get_override_data()),
        (f"host {host.name} in the inventory", inventory.get_host_data(host.name)),
    ]
    layers += [
        (f"group {group}'s data (group_data/{group}.py or the inventory)", inventory.get_group_data(group))
        for group in reversed(host.groups)  # the last group's value wins, as in pyinfra
    ]
    layers += [
        ("group all's data (group_data/all.py)", inventory.get_data()),
        ("a @deploy's data defaults", host.get_deploy_data()),
    ]
    return layers


def _validated(layers: list[tuple[str, Mapping]], path: str = "") -> Settings:
    for where, layer in layers:
        check_keys(layer, where, path=path)
    merged: dict[str, Any] = {}
    for _, layer in reversed(layers):
        merged.update((key, value) for key, value in layer.items() if key in Settings.model_fields)
    try:
        return Settings.model_validate(merged)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = err["loc"][0]
        where = next(where for where, layer in layers if key in layer)
        raise DeployError(f"{where}: {path}{key}: {reason(err)}") from None


def reason(err: Mapping[str, Any]) -> str:
    """One pydantic error as the operator reads it (the value it got, where it is plain)."""
    if err["type"] == "value_error":
        return str(err["ctx"]["error"])
    value = err["input"]
    if value is None or isinstance(value, (str, int, float)):
        return f"{err['msg']} (got {value!r})"
    return err["msg"]
