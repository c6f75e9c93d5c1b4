"""The fleet's pure parts: batching, the rollout's stop rule, router settings, the router's
unit, the router's /workers answer, a node's load, and routers in the inventories."""

import json
import shlex

import pytest

from sglang_deploy.errors import DeployError
from sglang_deploy.node.lib.routers import parse_workers
from sglang_deploy.node.rotation import in_flight
from sglang_deploy.plan.fleet import (
    check_ports,
    is_router,
    render_router_unit,
    router_host,
)
from sglang_deploy.plan.fleet_hosts import rotation_for, router_plan
from sglang_deploy.plan.hosts import deploy_defaults, gpu_hosts, gpu_routers, sandbox_hosts, sandbox_routers
from sglang_deploy.plan.monitoring import scrape_targets
from sglang_deploy.plan.settings import settings_of
from sglang_deploy.report.outcome import Outcome, with_rollout_notes
from sglang_deploy.rollout.order import Rollout, batches

DEFAULTS = deploy_defaults()


def router_data(**overrides):
    return {**DEFAULTS, "ssh_hostname": "10.0.0.5", "ssh_port": 22, "role": "router", **overrides}


def node_data(**overrides):
    return {**DEFAULTS, "ssh_hostname": "10.0.0.11", "profile": "sandbox", **overrides}


def test_batches_keep_inventory_order():
    assert batches(["a", "b", "c", "d", "e"], 2) == [["a", "b"], ["c", "d"], ["e"]]
    assert batches(["a", "b", "c"], 1) == [["a"], ["b"], ["c"]]
    with pytest.raises(ValueError):
        batches(["a"], 0)


def test_rollout_stops_after_max_failures():
    run = Rollout(max_failures=0)
    assert run.refusal("n1") is None
    run.succeeded("n1")
    run.failed("n2", "readiness gate failed")
    refusal = run.refusal("n3")
    assert refusal == "rollout stopped at n2 (readiness gate failed); restarted before it: n1"
    tolerant = Rollout(max_failures=1)
    tolerant.failed("n1", "x")
    assert tolerant.refusal("n2") is None
    tolerant.failed("n2", "y")
    assert tolerant.refusal("n3").startswith("rollout stopped at n1")


def test_rolling_defaults_and_bad_values():
    rolling = settings_of(DEFAULTS).rolling
    assert (rolling.rolling_batch, rolling.rolling_max_failures) == (1, 0)
    assert rolling.rolling_without_routers is False
    assert settings_of({**DEFAULTS, "rolling_batch": "2"}).rolling.rolling_batch == 2
    for key, value in [
        ("rolling_batch", 0),
        ("rolling_batch", "two"),
        ("rolling_max_failures", -1),
        ("rolling_drain_timeout_s", 0),
        ("rolling_without_routers", "maybe"),
    ]:
        with pytest.raises(DeployError, match=key):
            settings_of({**DEFAULTS, key: value})


def test_unknown_router_policy_fails_naming_it():
    with pytest.raises(DeployError, match="r1: router_policy: unknown policy 'fastest'"):
        router_host("r1", router_data(router_policy="fastest"))


def test_router_pins_must_name_one_gateway_exactly():
    for pins in (
        ["smg>=1.13"],
        ["smg"],
        ["requests==2.32.3"],
        ["smg==1.13.0", "smg==1.12.0"],
    ):
        with pytest.raises(DeployError, match="router_packages"):
            router_host("r1", router_data(router_packages=pins))


def test_router_port_clashes_fail_before_anything_runs():
    hosts = [
        ("n1", node_data(ssh_hostname="10.0.0.5", profile_overrides={"service": {"port": 30000}})),
        ("r1", router_data()),
    ]
    with pytest.raises(DeployError, match="r1: router_port 30000 clashes with n1's server port on 10.0.0.5"):
        router_plan("r1", hosts)
    with pytest.raises(DeployError, match="is its SSH port"):
        check_ports([router_host("r1", router_data(router_port=22))], [], {"r1": 22})
    two = [("r1", router_data()), ("r2", router_data(router_prometheus_port=29002))]
    with pytest.raises(DeployError, match="router r1's router_port"):
        router_plan("r2", two)
    with pytest.raises(DeployError, match="r2: router_prometheus_port 29000 clashes"):
        router_plan("r2", [("r1", router_data()), ("r2", router_data(router_port=30100))])
    # A node's plan checks the fleet too: its deploy fails just the same.
    with pytest.raises(DeployError, match="clashes"):
        rotation_for("n1", hosts[0][1], hosts, 30000)


def test_router_unit_lists_every_serving_node():
    hosts = [
        ("n2", node_data(ssh_hostname="10.0.0.12")),
        ("n1", node_data()),
        ("r1", router_data(router_policy="cache_aware", router_extra_args=["--log-level", "debug"])),
    ]
    plan = router_plan("r1", hosts)
    assert plan.worker_urls == ["http://10.0.0.11:30000", "http://10.0.0.12:30000"]
    exec_start = next(line for line in plan.unit_text.splitlines() if line.startswith("ExecStart="))
    assert exec_start == (
        f"ExecStart={plan.router.venv}/bin/python -m smg.launch_router --host 0.0.0.0 "
        "--port 30000 --policy cache_aware --prometheus-host 0.0.0.0 --prometheus-port 29000 "
        "--health-check-port 29001 --shutdown-grace-period-secs 60 "
        "--retry-max-retries 5 --retry-initial-backoff-ms 50 --retry-max-backoff-ms 30000 "
        "--retry-backoff-multiplier 1.5 --retry-jitter-factor 0.2 "
        "--cb-failure-threshold 10 --cb-success-threshold 3 --cb-timeout-duration-secs 60 "
        "--cb-window-duration-secs 120 "
        "--health-check-endpoint /health "
        "--health-check-interval-secs 2 --health-check-timeout-secs 5 --health-failure-threshold 3 "
        "--health-success-threshold 1 --worker-startup-check-interval 2 --log-level debug "
        "--worker-urls http://10.0.0.11:30000 http://10.0.0.12:30000"
    )
    assert "smg==1.13.0" in plan.unit_text and "TimeoutStopSec=75" in plan.unit_text
    # The same inventory in another order renders the same unit: no spurious restart.
    assert router_plan("r1", list(reversed(hosts))).unit_text == plan.unit_text
    assert plan.gate("/opt/sglang-deploy/node").count("--worker ") == 2


def test_a_serving_groups_followers_are_no_router_workers():
    # A follower's /health answers 200 whatever the group does: the router must only know rank 0.
    hosts = [
        ("n1", node_data()),
        ("g0", node_data(ssh_hostname="10.0.0.21", serving_group="big")),
        ("g1", node_data(ssh_hostname="10.0.0.22", serving_group="big")),
        ("r1", router_data()),
    ]
    assert router_plan("r1", hosts).worker_urls == ["http://10.0.0.11:30000", "http://10.0.0.21:30000"]


def test_render_router_unit_without_workers():
    text = render_router_unit(router_host("r1", router_data()), [])
    assert "--worker-urls" not in text and "0 worker(s)" in text


def test_rotation_command_wraps_the_cycle():
    hosts = [("n1", node_data()), ("r1", router_data())]
    rotation = rotation_for("n1", hosts[0][1], hosts, 30001)
    assert rotation.worker_url == "http://10.0.0.11:30001"
    assert rotation.router_urls == ["http://10.0.0.5:30000"]
    command = rotation.wrap("/opt/d/node", "python3 cycle.py --x", "python3 lastgood.py restore")
    assert command.startswith("python3 /opt/d/node/rotation.py --worker-url http://10.0.0.11:30001")
    assert "--router http://10.0.0.5:30000" in command and "--allow-unreachable-routers" not in command
    allowed = rotation_for("n1", {**hosts[0][1], "rolling_without_routers": True}, hosts, 30001)
    assert "--allow-unreachable-routers" in allowed.wrap("/d", "c", "r")


def test_rotation_halves_for_a_restart_driven_elsewhere():
    hosts = [("n1", node_data()), ("r1", router_data())]
    rotation = rotation_for("n1", hosts[0][1], hosts, 30001)
    for half in ("out", "back"):
        argv = shlex.split(getattr(rotation, half)("/opt/d/node"))
        assert argv[:2] == ["python3", "/opt/d/node/rotation.py"] and argv[-2:] == ["--only", half]
        assert "--cycle" not in argv and argv[argv.index("--router") + 1] == "http://10.0.0.5:30000"


def test_a_server_bound_to_one_address_is_reached_there():
    """service.host names one address: the routers (and Prometheus) reach the server there, the
    node's own probes ask it there; a server on every interface keeps its cluster address for
    the routers and loopback for the node."""
    bound = node_data(ssh_hostname="127.0.0.11", profile_overrides={"service": {"host": "127.0.0.2"}})
    hosts = [("n1", bound), ("n2", node_data(ssh_hostname="127.0.0.12")), ("r1", router_data())]
    assert router_plan("r1", hosts).worker_urls == ["http://127.0.0.12:30000", "http://127.0.0.2:30000"]
    engines = {t.labels["host"]: t.address for t in scrape_targets(hosts)[0] if t.job == "sglang"}
    assert engines == {"n1": "127.0.0.2:30000", "n2": "127.0.0.12:30000"}
    for name, data, worker, probed in (
        ("n1", bound, "http://127.0.0.2:30000", "127.0.0.2"),
        ("n2", hosts[1][1], "http://127.0.0.12:30000", "127.0.0.1"),
    ):
        rotation = rotation_for(name, data, hosts, 30000)
        argv = shlex.split(rotation.out("/opt/d/node"))
        assert rotation.worker_url == argv[argv.index("--worker-url") + 1] == worker
        assert rotation.local_host == argv[argv.index("--host") + 1] == probed
    v6 = node_data(ssh_hostname="127.0.0.13", profile_overrides={"service": {"host": "::1"}})
    assert rotation_for("n3", v6, [*hosts, ("n3", v6)], 30000).worker_url == "http://[::1]:30000"


def test_is_router():
    assert is_router({"role": "router"}) and not is_router({"profile": "x"})


def test_parse_workers():
    answer = json.dumps(
        {
            "workers": [
                {
                    "id": "u1",
                    "url": "http://127.0.0.1:30001/",
                    "is_healthy": True,
                    "load": 2,
                    "status": "ready",
                },
                {
                    "id": "u2",
                    "url": "http://127.0.0.1:30002",
                    "is_healthy": False,
                    "load": 0,
                    "status": "not_ready",
                },
            ],
            "total": 2,
        }
    )
    found = parse_workers(answer)
    assert sorted(found) == ["http://127.0.0.1:30001", "http://127.0.0.1:30002"]
    assert [(w["id"], w["healthy"], w["load"], w["routable"]) for w in found.values()] == [
        ("u1", True, 2, True),
        ("u2", False, 0, False),
    ]
    for bad in ('{"total": 0}', '{"workers": [{"id": "x"}]}'):
        with pytest.raises(ValueError):
            parse_workers(bad)


def test_in_flight_from_get_load():
    assert in_flight([{"num_reqs": 2, "num_waiting_reqs": 1}, {"num_reqs": 1}]) == 4
    assert in_flight({"num_reqs": 0, "num_waiting_reqs": 0}) == 0


def test_outcome_lines_say_what_each_node_serves():
    lines = with_rollout_notes(
        [Outcome("n1", "failed", "at 'Restart'"), Outcome("n2", "deployed")],
        notes={"n1": "rolled back: serves sandbox"},
    )
    assert lines[0].line() == "sglang-deploy: n1: failed (at 'Restart'; rolled back: serves sandbox)"
    assert lines[1].line() == "sglang-deploy: n2: deployed"


def test_hosts_file_routers_and_fleet_settings(tmp_path):
    path = tmp_path / "hosts.yml"
    path.write_text(
        "defaults: {ssh_user: root, profile: sandbox}\n"
        "hosts: {gpu1: {ssh_hostname: 10.0.0.11}}\n"
        "routers: {rt1: {ssh_hostname: 10.0.0.5, router_policy: cache_aware}}\n"
        "fleet: {rolling_batch: 2}\n"
    )
    assert gpu_hosts(path) == [
        ("gpu1", {"ssh_user": "root", "profile": "sandbox", "ssh_hostname": "10.0.0.11", "rolling_batch": 2})
    ]
    assert gpu_routers(path) == [
        (
            "rt1",
            {
                "ssh_user": "root",
                "ssh_hostname": "10.0.0.5",
                "router_policy": "cache_aware",
                "rolling_batch": 2,
                "role": "router",
            },
        )
    ]
    path.write_text("hosts: {gpu1: {}}\nfleet: {profile: x}\n")
    with pytest.raises(DeployError, match="fleet.profile: only rolling_"):
        gpu_hosts(path)


def test_sandbox_router_nodes_form_the_routers_group(tmp_path):
    state = tmp_path / "state.json"
    node = {"ssh_host": "127.0.0.1", "ssh_user": "root"}
    state.write_text(
        json.dumps(
            {
                "key": "/k",
                "nodes": [
                    dict(node, name="node1", ssh_port=2201, server_port=30001, role="node"),
                    dict(node, name="node2", ssh_port=2202, server_port=30002, role="router"),
                ],
            }
        )
    )
    assert [name for name, _ in sandbox_hosts(state)] == ["node1"]
    ((name, data),) = sandbox_routers(state)
    assert name == "node2" and data["role"] == "router" and data["router_port"] == 30002
    # Installed from its lock's wheels (the settings' default): no directory of its own.
    assert "router_find_links" not in data and router_host(name, data).locked.remote_wheelhouse
