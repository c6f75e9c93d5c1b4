"""Command lines of the scripts that report a node: its hardware passport, `make status`'s
views and the node exporter's textfile (built by builder.script)."""

from sglang_deploy.plan.commands.builder import optional, script


def passport_command(directory, path):
    """passport.py collect: the node's hardware passport, kept at ``path`` when it changed."""
    return script("python3", directory, "passport.py", "collect", "--write", path)


def node_status_command(
    directory, unit, port, venv_link, venvs_dir, last_good_dir, history, passport, host="127.0.0.1", auth=()
):
    """node_status.py node: the unit, engine, last known good, last decode check and hardware
    passport of one service, in its result line only (`make status`); ``host``: where its
    server is asked (service.probe_host); ``auth``: api_key_args(), how it reads the server's key."""
    args = [
        "--json",
        "node",
        "--unit",
        unit,
        "--host",
        host,
        "--port",
        port,
        "--venv-link",
        venv_link,
        "--venvs-dir",
        venvs_dir,
        "--last-good-dir",
        last_good_dir,
        "--history",
        history,
        "--passport",
        passport,
        *auth,
    ]
    return script("python3", directory, "node_status.py", *args)


def router_status_command(directory, url):
    """node_status.py router: a router's health and its workers, in its result line only."""
    return script("python3", directory, "node_status.py", "--json", "router", "--url", url)


def metrics_textfile_command(
    directory,
    service,
    engine_port,
    history,
    last_good_dir,
    expected=None,
    pcie_json=None,
    textfile_dir=None,
    passport=None,
    no_routers=False,
    check=False,
):
    """metrics_textfile.py: the deploy's figures into the node exporter's textfile directory
    (its default: Debian's); ``expected``: the profile's expectations the alert rules compare
    against, {metrics_textfile.py option: value}; ``passport``: the node's hardware passport file (its GPU links);
    ``no_routers``: the inventory names no router (no rotation sample); ``check``: only say
    whether the file's figures would change."""
    return script(
        "python3",
        directory,
        "metrics_textfile.py",
        "--service",
        service,
        "--engine-port",
        engine_port,
        "--history",
        history,
        "--last-good-dir",
        last_good_dir,
        *[arg for name, value in (expected or {}).items() for arg in ("--" + name.replace("_", "-"), value)],
        *optional(pcie_json, "--pcie-json", pcie_json),
        *optional(passport, "--passport", passport),
        *optional(textfile_dir, "--dir", textfile_dir),
        *optional(no_routers, "--no-routers"),
        *optional(check, "--check"),
    )
