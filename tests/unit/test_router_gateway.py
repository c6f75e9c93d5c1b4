"""The gateway a router host runs (plan/router_flags.py, plan/router_unit.py): its flag names
from the pinned version's option list, the retry, circuit-breaker and health flags always
rendered, a flag the version lacks refused at plan time, and sglang-router (smg's former name)
refused wherever it is pinned, naming smg."""

import json
import re
import shlex
from pathlib import Path

import pytest
from test_operations import FakeHost, on_node, run  # noqa: F401 (fixture)
from test_render import parse_exec_line

from sglang_deploy.errors import DeployError
from sglang_deploy.plan import router_flags
from sglang_deploy.plan.fleet import router_host
from sglang_deploy.plan.fleet_hosts import router_plan
from sglang_deploy.plan.hosts import deploy_defaults, gpu_hosts
from sglang_deploy.plan.router_unit import router_argv

CAPTURED = Path(__file__).parent / "captured"
DEFAULTS = deploy_defaults()


def router_data(**overrides):
    return {**DEFAULTS, "ssh_hostname": "10.0.0.5", "ssh_port": 22, "role": "router", **overrides}


def node_data(**overrides):
    return {**DEFAULTS, "ssh_hostname": "10.0.0.11", "profile": "sandbox", **overrides}


def fleet(**router):
    return [("n1", node_data()), ("n2", node_data(ssh_hostname="10.0.0.12")), ("r1", router_data(**router))]


def argv_of(**router):
    """The unit's ExecStart= as systemd splits it into argv."""
    return parse_exec_line(_exec_start(router_plan("r1", fleet(**router)).unit_text))


def _exec_start(unit_text):
    return next(line for line in unit_text.splitlines() if line.startswith("ExecStart=")).partition("=")[2]


def _value(argv, flag):
    return argv[argv.index(flag) + 1]


@pytest.mark.parametrize("dist, version, help_file", [("smg", "1.13.0", "smg-1.13.0")])
def test_each_option_list_is_its_versions_help(dist, version, help_file):
    # The lists come from the gateway's own parser; its --help, captured from the same
    # wheels, names every option of them.
    options = router_flags.options_for(dist, version)
    text = (CAPTURED / help_file / "launch_help.txt").read_text()
    in_help = set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*[a-z0-9])(?![\w-])", text))
    assert {o for o in options.options if o.startswith("--")} <= in_help | {"--help"}
    assert options.distribution == dist and options.version == version
    # What the unit renders is in every version's list.
    assert {key for key, flag in router_flags.FLAGS.items() if flag not in options.options} == set()


def test_flag_names_and_launcher_follow_the_pinned_gateway():
    new = argv_of()
    assert new[1:3] == ["-m", "smg.launch_router"]
    assert re.fullmatch(r"/opt/sglang-router/venvs/smg-1\.13\.0-[0-9a-f]{12}/bin/python", new[0])
    assert _value(new, "--health-check-port") == "29001"
    # null: no probe port, the one flag left out.
    without = argv_of(router_health_check_port=None)
    assert [a for a in new[3:] if a.startswith("--") and a != "--health-check-port"] == [
        a for a in without[3:] if a.startswith("--")
    ]


def test_retries_circuit_breaker_and_health_checks_are_rendered_from_their_settings():
    argv = argv_of(
        router_retry_max_retries=2,
        router_retry_initial_backoff_ms=100,
        router_retry_max_backoff_ms=2000,
        router_retry_backoff_multiplier=2,
        router_retry_jitter_factor=0.1,
        router_cb_failure_threshold=4,
        router_cb_success_threshold=2,
        router_cb_timeout_s=15,
        router_cb_window_s=30,
        router_health_check_interval_s=3,
        router_health_check_timeout_s=4,
        router_health_failure_threshold=2,
        router_health_success_threshold=2,
        router_worker_startup_check_interval_s=4,
        router_shutdown_grace_s=20,
    )
    assert {
        flag: _value(argv, flag) for flag in argv if flag.startswith("--") and flag != "--worker-urls"
    } == {
        "--host": "0.0.0.0",
        "--port": "30000",
        "--policy": "round_robin",
        "--prometheus-host": "0.0.0.0",
        "--prometheus-port": "29000",
        "--health-check-port": "29001",
        "--shutdown-grace-period-secs": "20",
        "--retry-max-retries": "2",
        "--retry-initial-backoff-ms": "100",
        "--retry-max-backoff-ms": "2000",
        "--retry-backoff-multiplier": "2",
        "--retry-jitter-factor": "0.1",
        "--cb-failure-threshold": "4",
        "--cb-success-threshold": "2",
        "--cb-timeout-duration-secs": "15",
        "--cb-window-duration-secs": "30",
        "--health-check-endpoint": "/health",
        "--health-check-interval-secs": "3",
        "--health-check-timeout-secs": "4",
        "--health-failure-threshold": "2",
        "--health-success-threshold": "2",
        "--worker-startup-check-interval": "4",
    }
    # Rendered at their defaults too: a gateway that moves its own defaults moves nothing here.
    flags = ("--retry-max-retries", "--cb-failure-threshold", "--health-check-interval-secs")
    for flag in (*flags, "--worker-startup-check-interval"):
        assert flag in argv_of()
    assert "TimeoutStopSec=35" in router_plan("r1", fleet(router_shutdown_grace_s=20)).unit_text


def test_extra_args_reach_the_gateway_as_written_through_systemd():
    # ExecStart= is read by systemd, not a shell: `%` is a specifier and `$` a variable there
    # unless doubled, and single quotes are no shell quoting.
    values = ["/var/log/smg-%i", "$HOME/logs", "it's a ${x} %% $$", "a b;c"]
    extra = [word for value in values for word in ("--log-dir", value)]
    argv = argv_of(router_extra_args=extra)
    assert [argv[i + 1] for i, word in enumerate(argv) if word == "--log-dir"] == values


@pytest.mark.parametrize(
    "router, match",
    [
        ({"router_extra_args": ["--mini-lb"]}, r"r1: router: --mini-lb is not a flag of smg 1\.13\.0"),
        ({"router_extra_args": ["--retry-max-r", "3"]}, r"abbreviation of --retry-max-retries"),
        ({"router_extra_args": ["--retry-max-retries", "3"]}, r"rendered from router_retry_max_retries"),
        ({"router_extra_args": ["--host=::"]}, r"--host=:: is rendered from router_bind"),
        ({"router_extra_args": ["--policy", "random"]}, r"rendered from router_policy"),
        ({"router_extra_args": ["--log-level", "loud"]}, r"--log-level 'loud' is not one of smg 1\.13\.0's"),
    ],
)
def test_a_flag_the_pinned_version_lacks_stops_the_plan_naming_it(router, match):
    with pytest.raises(DeployError, match=match):
        router_plan("r1", fleet(**router))


def test_policies_are_the_pinned_versions():
    assert "--policy least_load" in router_plan("r1", fleet(router_policy="least_load")).unit_text
    with pytest.raises(
        DeployError, match=r"r1: router_policy: unknown policy 'fastest' \(smg 1\.13\.0 knows"
    ):
        router_host("r1", router_data(router_policy="fastest"))


def test_a_gateway_version_without_an_option_list_is_refused():
    with pytest.raises(DeployError, match=r"no option list for smg 1\.99\.0 \(have: smg-1\.13\.0\)"):
        router_host("r1", router_data(router_packages=["smg==1.99.0"]))


def test_the_options_list_generator_reads_the_installed_parser(tmp_path, monkeypatch):
    # generate() runs the gateway's own RouterArgs.add_cli_args: a fake package stands in.
    pkg = tmp_path / "site" / "smg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "router_args.py").write_text(
        "class RouterArgs:\n"
        "    @staticmethod\n"
        "    def add_cli_args(parser, use_router_prefix=False):\n"
        "        parser.add_argument('--port', type=int)\n"
        "        parser.add_argument('--policy', choices=['random', 'round_robin'])\n"
    )
    dist = tmp_path / "site" / "smg-7.0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: smg\nVersion: 7.0.0\n")
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={tmp_path / "site"} exec {__import__("sys").executable} "$@"\n')
    python.chmod(0o755)
    monkeypatch.setattr(router_flags, "OPTIONS_DIR", tmp_path)
    path = router_flags.generate(str(python), "smg")
    data = json.loads(path.read_text())
    assert path.name == "smg-7.0.0.json"
    assert set(data["options"]) == {"--policy", "--port", "-h", "--help"}
    assert data["choices"] == {"--policy": ["random", "round_robin"]}


# -- sglang-router, smg's former name, is retired -------------------------------------------

RETIRED = "router_packages: sglang-router is retired; smg is the gateway: router_packages: [smg==1.13.0]"


@pytest.mark.parametrize(
    "pins",
    [
        ["sglang-router==0.3.2"],
        ["sglang-router"],
        ["sglang_router[all]==0.3.2", "smg==1.13.0"],
        ["sglang-router>=0.3"],
    ],
)
def test_a_router_pinning_sglang_router_is_refused_naming_smg(pins):
    with pytest.raises(DeployError) as raised:
        router_plan("r1", fleet(router_packages=pins))
    assert str(raised.value).endswith(f": {RETIRED}")


def test_a_hosts_file_naming_sglang_router_is_refused_naming_smg_and_the_setting(tmp_path):
    path = tmp_path / "hosts.yml"
    path.write_text(
        "hosts:\n  gpu1: {}\n  r1: {role: router}\nfleet:\n  router_packages: [sglang-router==0.3.2]\n"
    )
    with pytest.raises(DeployError) as raised:
        gpu_hosts(path)
    assert str(raised.value) == f"{path}: fleet.{RETIRED}"
    path.write_text("hosts:\n  gpu1: {}\n  r1: {role: router, router_packages: [sglang-router]}\n")
    with pytest.raises(DeployError) as raised:
        gpu_hosts(path)
    assert str(raised.value) == f"{path}: hosts.r1.{RETIRED}"


def test_locking_sglang_router_is_refused_naming_smg():
    with pytest.raises(ValueError, match=r"sglang-router is retired; smg is the gateway \(smg==<version>\)"):
        router_flags.gateway_pin(["sglang-router==0.3.2"])
    assert router_flags.known_versions() == ["smg-1.13.0"]


def test_the_gate_asks_smgs_probe_port_and_a_node_gets_the_drain_settle_time():
    plan = router_plan("r1", fleet(router_drain_settle_s=7))
    gate = shlex.split(plan.gate("/opt/sd/node"))
    assert (
        _value(gate, "--probe-url") == "http://127.0.0.1:29001"
        and _value(gate, "--url") == "http://127.0.0.1:30000"
    )
    assert "--probe-url" not in router_plan("r1", fleet(router_health_check_port=None)).gate("/opt/sd/node")
    from sglang_deploy.plan.fleet_hosts import rotation_for

    hosts = fleet(router_drain_settle_s=7)
    rotation = rotation_for("n1", hosts[0][1], hosts, 30000)
    assert _value(shlex.split(rotation.out("/opt/sd/node")), "--drain-settle") == "7"


def test_router_ports_clash_with_the_probe_port():
    with pytest.raises(
        DeployError, match="r1: router_prometheus_port and router_health_check_port are both 29000"
    ):
        router_plan("r1", fleet(router_health_check_port=29000))


def test_argv_checks_use_the_options_given():
    # router_argv takes the option list it checks against: a version that lacks a flag we
    # render (here: a list without the retry flags) stops it, naming the flag.
    options = router_flags.options_for("smg", "1.13.0")
    fewer = router_flags.RouterOptions(
        "smg", "1.13.0", frozenset(o for o in options.options if not o.startswith("--retry")), options.choices
    )
    with pytest.raises(DeployError, match=r"--retry-max-retries is not a flag of smg 1\.13\.0"):
        router_argv(router_host("r1", router_data()), [], fewer)
