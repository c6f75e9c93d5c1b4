"""The router's systemd unit for the gateway its pins name (smg), with that version's flag
names (plan/router_flags.py).

Retries, the circuit breaker and health checks are always rendered, each from its setting:
the gateways' own defaults moved between versions, and a fleet should not change behaviour
because its router was upgraded. A flag the pinned version lacks (one of ours, or one of
``router_extra_args``) stops the run here, naming it.
"""

from __future__ import annotations

from sglang_deploy.errors import DeployError
from sglang_deploy.plan.render import systemd_exec_quote
from sglang_deploy.plan.router_flags import RouterOptions, check_argv, pinned_options
from sglang_deploy.plan.settings import Router

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


# The settings each rendered flag comes from, in the unit's order (router_<key> unless SETTING
# names another); a None value is not rendered.
KEYS = ("host", "port", "policy", "prometheus_host", "prometheus_port", "health_check_port")
KEYS += ("shutdown_grace_s", "retry_max_retries", "retry_initial_backoff_ms", "retry_max_backoff_ms")
KEYS += ("retry_backoff_multiplier", "retry_jitter_factor")
KEYS += ("cb_failure_threshold", "cb_success_threshold", "cb_timeout_s", "cb_window_s")
KEYS += ("health_check_endpoint", "health_check_interval_s", "health_check_timeout_s")
KEYS += ("health_failure_threshold", "health_success_threshold", "worker_startup_check_interval_s")


def _value(settings: Router, key: str):
    if key == "health_check_endpoint":
        return "/health"
    return getattr(settings, SETTING.get(key, f"router_{key}"))


def router_argv(router, worker_urls, options: RouterOptions | None = None) -> list[str]:
    """The launcher's argv (interpreter first) of ``router`` (plan/fleet.py RouterHost);
    DeployError naming a flag the version lacks."""
    settings = router.settings
    options = options or pinned_options(settings.router_packages)
    values = [(key, _value(settings, key)) for key in KEYS]
    values = [(key, value) for key, value in values if value is not None]
    argv = [f"{router.venv}/bin/python", "-m", options.gateway.module]
    ours = {options.flag(key): key for key, _ in values} | {options.flag("worker_urls"): "worker_urls"}
    for flag in settings.router_extra_args:
        key = ours.get(flag.partition("=")[0])
        if key:
            setting = "the fleet's nodes" if key == "worker_urls" else SETTING.get(key, f"router_{key}")
            raise DeployError(
                f"{router.name}: router_extra_args: {flag} is rendered from {setting}: set that instead"
            )
    for key, value in values:
        argv += [options.flag(key), value if isinstance(value, str) else _num(value)]
    argv += list(settings.router_extra_args)
    urls = sorted(worker_urls)
    if urls:
        argv += [options.flag("worker_urls"), *urls]
    check_argv(argv[3:], options, f"{router.name}: router")
    return argv


def render_unit(router, worker_urls) -> str:
    settings = router.settings
    options = pinned_options(settings.router_packages)
    argv = router_argv(router, worker_urls, options)
    exec_start = " ".join(systemd_exec_quote(a) for a in argv)
    pins = ", ".join(settings.router_packages)
    urls = sorted(worker_urls)
    return (
        f"# Rendered by sglang-deploy: SGLang's gateway ({pins}) in front of "
        f"{len(urls)} worker(s).\n"
        "[Unit]\n"
        f"Description=SGLang gateway {options.distribution} {options.version} on port {settings.router_port} "
        f"({settings.router_policy})\n"
        "After=network-online.target\nWants=network-online.target\n\n"
        "[Service]\nType=simple\n"
        f"ExecStart={exec_start}\n"
        f"TimeoutStopSec={settings.router_shutdown_grace_s + STOP_MARGIN_S}\n"
        "Restart=on-failure\nRestartSec=2\n\n"
        "[Install]\nWantedBy=multi-user.target\n"
    )
