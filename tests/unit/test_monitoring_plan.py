"""What Prometheus scrapes, from the inventory alone (plan/monitoring.py): every serving node's
engine, every router's exporter, a node exporter on every host; the configuration promtool
checks with its rule files; the settings that pin the packages."""

import shutil
import subprocess

import pytest

from sglang_deploy.errors import DeployError
from sglang_deploy.plan.fleet_hosts import workers
from sglang_deploy.plan.monitoring import (
    CONFIG_PATH,
    RULES_DIR,
    monitoring_plan,
    node_exporter_plan,
    scrape_targets,
    unmet_pins,
)
from sglang_deploy.plan.settings import validate

NO_METRICS = {"server_args": {"enable-metrics": False}}


def fleet(*extra):
    """Two single nodes, a two-node serving group, a router and a monitoring host; node2's
    address is one nothing answers on (TEST-NET-1): targets never depend on what answers."""
    group = {"serving_group": "g1", "profile": "sandbox", "profile_overrides": {"server_args": {"nnodes": 2}}}
    return [
        ("node1", {"ssh_hostname": "10.0.0.11", "profile": "sandbox"}),
        ("node2", {"ssh_hostname": "192.0.2.1", "profile": "sandbox", "profile_overrides": NO_METRICS}),
        ("g1a", {"ssh_hostname": "10.0.0.21", **group}),
        ("g1b", {"ssh_hostname": "10.0.0.22", **group}),
        ("router1", {"ssh_hostname": "10.0.0.5", "role": "router", "router_prometheus_port": 29001}),
        ("mon", {"ssh_hostname": "10.0.0.6", "role": "monitoring", "prometheus_port": 9091}),
        *extra,
    ]


def by_job(targets):
    found = {}
    for t in targets:
        found.setdefault(t.job, []).append((t.address, t.labels))
    return found


def test_targets_are_every_engine_router_exporter_and_node_exporter_of_the_inventory():
    targets, warnings = scrape_targets(fleet())
    jobs = by_job(targets)
    # The group's rank 0 alone serves the API; node2 has no --enable-metrics.
    assert jobs["sglang"] == [
        ("10.0.0.11:30000", {"host": "node1", "role": "node", "profile": "sandbox"}),
        ("10.0.0.21:30000", {"host": "g1a", "role": "node", "profile": "sandbox", "serving_group": "g1"}),
    ]
    assert jobs["sglang-router"] == [("10.0.0.5:29001", {"host": "router1", "role": "router"})]
    assert [address for address, _ in jobs["node"]] == [
        "10.0.0.11:9100",
        "192.0.2.1:9100",
        "10.0.0.21:9100",
        "10.0.0.22:9100",
        "10.0.0.5:9100",
        "10.0.0.6:9100",
    ]
    assert dict(jobs["node"])["10.0.0.22:9100"] == {
        "host": "g1b",
        "role": "node",
        "profile": "sandbox",
        "serving_group": "g1",
    }
    assert jobs["prometheus"] == [("10.0.0.6:9091", {"host": "mon", "role": "monitoring"})]
    assert [t.url for t in targets][0] == "http://10.0.0.11:30000/metrics"
    # node2 is not dropped silently: the run says why its engine is not scraped.
    assert warnings == [
        "node2 serves sandbox without enable-metrics: its engine is not scraped "
        "(set server_args.enable-metrics: true)"
    ]


def test_a_monitoring_host_serves_nothing_so_no_router_sends_it_requests():
    assert [name for name, _, _ in workers(fleet())] == ["node1", "node2", "g1a"]


def test_a_host_without_node_exporter_is_said_and_not_scraped():
    hosts = fleet(("node3", {"ssh_hostname": "10.0.0.13", "profile": "sandbox", "node_exporter": False}))
    targets, warnings = scrape_targets(hosts)
    assert "10.0.0.13:9100" not in [t.address for t in targets]
    assert "10.0.0.13:30000" in [t.address for t in targets]
    assert "node3: node_exporter is false: no node exporter scraped there" in warnings


def test_two_targets_on_one_address_and_port_stop_the_plan():
    # Sandbox nodes share one address: each needs a port of its own.
    hosts = [
        (
            "node1",
            {
                "ssh_hostname": "127.0.0.1",
                "profile": "sandbox",
                "profile_overrides": {"service": {"port": 30001}},
            },
        ),
        (
            "node2",
            {
                "ssh_hostname": "127.0.0.1",
                "profile": "sandbox",
                "profile_overrides": {"service": {"port": 30002}},
            },
        ),
    ]
    with pytest.raises(
        DeployError, match="node1's node target and node2's node target are both 127.0.0.1:9100"
    ):
        scrape_targets(hosts)
    hosts[1][1]["node_exporter_port"] = 9101
    assert len(scrape_targets(hosts)[0]) == 4


def test_the_configuration_is_rendered_the_same_way_every_time(tmp_path):
    # The same inventory is the same file: a re-run changes nothing, so nothing reloads.
    first = monitoring_plan("mon", fleet(), root=tmp_path)
    again = monitoring_plan("mon", fleet(), root=tmp_path)
    assert first.config_text == again.config_text
    assert first.files == {CONFIG_PATH: first.config_text}
    assert "rule_files" not in first.config_text


def test_rule_files_are_installed_under_the_rules_directory_and_a_missing_one_is_said(tmp_path):
    (tmp_path / "ours.rules.yml").write_text(GOOD_RULES)
    hosts = fleet()
    hosts[-1][1]["prometheus_rule_files"] = ["ours.rules.yml", "templates/prometheus/absent.rules.yml"]
    plan = monitoring_plan("mon", hosts, root=tmp_path)
    assert plan.rules == {f"{RULES_DIR}/ours.rules.yml": GOOD_RULES}
    assert "rule_files:\n- rules/ours.rules.yml\n" in plan.config_text
    assert list(plan.files) == [f"{RULES_DIR}/ours.rules.yml", CONFIG_PATH]  # the configuration last
    assert (
        "prometheus_rule_files: templates/prometheus/absent.rules.yml does not exist: not installed"
        in plan.warnings
    )
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "ours.rules.yml").write_text(GOOD_RULES)
    hosts[-1][1]["prometheus_rule_files"] = ["ours.rules.yml", "other/ours.rules.yml"]
    with pytest.raises(DeployError, match="two files are named ours.rules.yml"):
        monitoring_plan("mon", hosts, root=tmp_path)


GOOD_RULES = """groups:
- name: sglang
  rules:
  - alert: EngineDown
    expr: up{job="sglang"} == 0
    for: 5m
"""
BAD_RULES = GOOD_RULES.replace('up{job="sglang"} == 0', 'rate(up{job="sglang"}[5m] > 1')


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian's prometheus) not installed")
@pytest.mark.parametrize("rules, ok", [(GOOD_RULES, True), (BAD_RULES, False)])
def test_promtool_checks_the_staged_configuration_with_its_staged_rules(tmp_path, rules, ok):
    """The deploy stages every file as it lies under /etc/prometheus and checks the staged
    configuration: its relative rule_files make promtool read the staged rules, so a rule that
    does not parse fails the check (before anything is replaced)."""
    (tmp_path / "ctl").mkdir()
    (tmp_path / "ctl" / "ours.rules.yml").write_text(rules)
    hosts = fleet()
    hosts[-1][1]["prometheus_rule_files"] = ["ours.rules.yml"]
    plan = monitoring_plan("mon", hosts, root=tmp_path / "ctl")
    stage = tmp_path / "stage"
    for path, text in plan.files.items():
        staged = stage / path.removeprefix("/etc/prometheus/")
        staged.parent.mkdir(parents=True, exist_ok=True)
        staged.write_text(text)
    done = subprocess.run(
        ["promtool", "check", "config", str(stage / "prometheus.yml")], capture_output=True, text=True
    )
    assert (done.returncode == 0) is ok, done.stdout + done.stderr
    if not ok:
        assert "unclosed left parenthesis" in done.stdout + done.stderr


def test_node_exporter_listens_where_the_inventory_says():
    exporter = node_exporter_plan({"node_exporter_port": 28001, "unit_dir": "/etc/systemd/system"})
    assert (
        exporter.drop_in_path == "/etc/systemd/system/prometheus-node-exporter.service.d/sglang-deploy.conf"
    )
    assert "ExecStart=\nExecStart=/usr/bin/prometheus-node-exporter --web.listen-address=:28001 $ARGS\n" in (
        exporter.drop_in_text
    )
    assert exporter.packages == ("prometheus-node-exporter=1.5.0-1+b6",)
    assert "--path /metrics" in exporter.gate("/opt/sd/node", timeout=0)


def test_prometheus_runs_the_rendered_configuration_on_its_port():
    plan = monitoring_plan("mon", fleet())
    assert plan.packages == ("prometheus=2.42.0+ds-5+deb12u1",)
    assert (
        "ExecStart=/usr/bin/prometheus --web.listen-address=:9091 --config.file=/etc/prometheus/prometheus.yml $ARGS"
        in plan.drop_in_text
    )
    assert plan.gate("/d", reload=True).endswith("--timeout 60.0 --reload")
    check = plan.targets_check("/d")
    assert "--expect http://192.0.2.1:9100/metrics" in check  # the unreachable host is a target too


def test_pins_are_met_only_at_their_version():
    installed = {"prometheus": ["2.42.0+ds-5"], "prometheus-node-exporter": ["1.5.0-1+b6"]}
    pins = ["prometheus=2.42.0+ds-5+deb12u1", "prometheus-node-exporter=1.5.0-1+b6", "absent=1.0"]
    assert unmet_pins(pins, installed) == ["prometheus=2.42.0+ds-5+deb12u1", "absent=1.0"]


@pytest.mark.parametrize(
    "pin", ["prometheus", "prometheus==2.42.0", "Prometheus=2.42.0", "prometheus=latest"]
)
def test_a_package_that_is_not_pinned_as_apt_takes_it_is_refused(pin):
    with pytest.raises(DeployError, match="pinned as name=version"):
        validate({"prometheus_packages": [pin]})
