"""The router's systemd unit for the gateway its pins name (smg or sglang-router), with that
version's flag names (plan/router_flags.py).

Retries, the circuit breaker and health checks are always rendered, each from its setting:
the gateways' own defaults moved between versions, and a fleet should not change behaviour
because its router was upgraded. A flag the pinned version lacks (one of ours, or one of
``router_extra_args``) stops the run here, naming it.
"""

from __future__ import annotations

from sglang_deploy.errors import DeployError
from sglang_deploy.plan.render import systemd_exec_quote
from sglang_deploy.plan.router_flags import RouterOptions, check_argv, pinned_options

# The setting each rendered flag comes from (where the name is not router_<key>).
SETTING = {
    "host": "router_bind",
    "prometheus_host": "router_bind",
    "health_check_endpoint": "the deploy (SGLang's /health)",
}

# systemd waits this much longer than the gateway's own grace before it kills it.
STOP_MARGIN_S = 15


def _num(value) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def router_argv(router, worker_urls, options: RouterOptions | None = None) -> list[str]:
    """The launcher's argv (interpreter first); DeployError naming a flag the version lacks."""
    options = options or pinned_options(router.packages)
    values = [
        ("host", router.bind),
        ("port", router.port),
        ("policy", router.policy),
        ("prometheus_host", router.bind),
        ("prometheus_port", router.prometheus_port),
    ]
    if router.health_check_port:
        values.append(("health_check_port", router.health_check_port))
    values.append(("shutdown_grace_s", router.shutdown_grace_s))
    keys = ("retry_max_retries", "retry_initial_backoff_ms", "retry_max_backoff_ms")
    keys += ("retry_backoff_multiplier", "retry_jitter_factor")
    values += zip(keys, router.retry)
    keys = ("cb_failure_threshold", "cb_success_threshold", "cb_timeout_s", "cb_window_s")
    values += zip(keys, router.circuit_breaker)
    values += [
        ("health_check_endpoint", "/health"),
        ("health_check_interval_s", router.health_check_interval_s),
        ("health_check_timeout_s", router.health_check_timeout_s),
        ("health_failure_threshold", router.health_failure_threshold),
        ("health_success_threshold", router.health_success_threshold),
        ("worker_startup_check_interval_s", router.worker_startup_check_interval_s),
    ]
    argv = [f"{router.venv}/bin/python", "-m", options.gateway.module]
    ours = {options.flag(key): key for key, _ in values} | {options.flag("worker_urls"): "worker_urls"}
    for flag in router.extra_args:
        key = ours.get(flag.partition("=")[0])
        if key:
            setting = "the fleet's nodes" if key == "worker_urls" else SETTING.get(key, f"router_{key}")
            raise DeployError(
                f"{router.name}: router_extra_args: {flag} is rendered from {setting}: set that instead"
            )
    for key, value in values:
        argv += [options.flag(key), value if isinstance(value, str) else _num(value)]
    argv += list(router.extra_args)
    urls = sorted(worker_urls)
    if urls:
        argv += [options.flag("worker_urls"), *urls]
    check_argv(argv[3:], options, f"{router.name}: router")
    return argv


def render_unit(router, worker_urls) -> str:
    options = pinned_options(router.packages)
    argv = router_argv(router, worker_urls, options)
    exec_start = " ".join(systemd_exec_quote(a) for a in argv)
    pins = ", ".join(router.packages)
    urls = sorted(worker_urls)
    return (
        f"# Rendered by sglang-deploy: SGLang's gateway ({pins}) in front of "
        f"{len(urls)} worker(s).\n"
        "[Unit]\n"
        f"Description=SGLang gateway {options.distribution} {options.version} on port {router.port} "
        f"({router.policy})\n"
        "After=network-online.target\nWants=network-online.target\n\n"
        "[Service]\nType=simple\n"
        f"ExecStart={exec_start}\n"
        f"TimeoutStopSec={router.shutdown_grace_s + STOP_MARGIN_S}\n"
        "Restart=on-failure\nRestartSec=2\n\n"
        "[Install]\nWantedBy=multi-user.target\n"
    )
