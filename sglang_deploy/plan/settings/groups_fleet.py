"""The settings of how hosts are reached and of the fleet: the connection, roles and addresses,
the router."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field

from sglang_deploy.plan.router_flags import RETIRED, gateway_pin, names_retired
from sglang_deploy.plan.settings.values import Group, Port, Seconds, Words
from sglang_deploy.profile.fields import LockPlatform, Pin, PythonVersion, VenvPath


def _router_pins(pins: list[str]) -> list[str]:
    gateway_pin(pins)  # ValueError: no gateway pinned, or two
    return pins


def _no_retired_gateway(value: Any) -> Any:
    # Before the pins are read as exact pins: a bare `sglang-router` gets this answer too.
    if isinstance(value, (list, tuple)) and names_retired(value):
        smg = ", ".join(Router.model_fields["router_packages"].default)
        raise ValueError(f"{RETIRED} is retired; smg is the gateway: router_packages: [{smg}]")
    return value


RouterPins = Annotated[list[Pin], AfterValidator(_router_pins), BeforeValidator(_no_retired_gateway)]


class Connection(Group):
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


class Fleet(Group):
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


class Router(Group):
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
