"""Command lines of the scripts that join a node to its fleet: a follower reaching rank 0, the
router's gate, the rotation, Prometheus' gate and targets (built by builder.script)."""

from sglang_deploy.plan.commands.builder import optional, script


def dist_reach_command(directory, addr, rank, timeout_s, listening_port=None):
    """dist_reach.py: a follower reaches rank 0's dist-init address."""
    return script(
        "python3",
        directory,
        "dist_reach.py",
        "--addr",
        addr,
        "--node-rank",
        rank,
        "--timeout",
        f"{timeout_s:g}",
        *optional(listening_port, "--listening-port", listening_port),
    )


def router_gate_command(directory, url, timeout_s, workers, probe_url=None):
    """router_gate.py: the router ready (asked on its probe port when it has one) and every
    worker healthy in it."""
    args = [arg for worker in workers for arg in ("--worker", worker)]
    return script(
        "python3",
        directory,
        "router_gate.py",
        "--url",
        url,
        *optional(probe_url, "--probe-url", probe_url),
        "--timeout",
        timeout_s,
        *args,
    )


def rotation_command(directory, *args):
    """rotation.py with ``args`` (plan/fleet_hosts.Rotation builds them)."""
    return script("python3", directory, "rotation.py", *args)


def prometheus_gate_command(directory, url, path, unit, timeout_s, reload=False):
    """prometheus_gate.py: Prometheus (or the node exporter) answers ``path`` 200; ``reload``:
    after loading its configuration again (systemctl reload, checked in its own metrics)."""
    args = [
        "--url",
        url,
        "--path",
        path,
        "--unit",
        unit,
        "--timeout",
        timeout_s,
        *optional(reload, "--reload"),
    ]
    return script("python3", directory, "prometheus_gate.py", *args)


def prometheus_targets_command(directory, url, expected, settle_s):
    """prometheus_targets.py: every expected scrape URL up in Prometheus' /api/v1/targets."""
    args = [arg for target in expected for arg in ("--expect", target)]
    return script("python3", directory, "prometheus_targets.py", "--url", url, "--settle", settle_s, *args)
