"""What Prometheus scrapes, from the inventory alone (plan/monitoring.py): every serving node's
engine, every router's exporter, a node exporter on every host; the configuration promtool
checks with its rule files; the settings that pin the packages; what a monitoring host's Grafana
is given (datasource, provider, dashboards bound to that datasource)."""

import json
import shutil
import subprocess

import pytest
import yaml

from sglang_deploy.errors import DeployError
from sglang_deploy.plan.fleet_hosts import workers
from sglang_deploy.plan.grafana import GRAFANA_DATASOURCE_UID, GRAFANA_RESCAN_S
from sglang_deploy.plan.hosts import REPO_ROOT
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
    # Sandbox nodes share one address (each its own SSH port): each needs a port of its own.
    hosts = [
        (
            "node1",
            {
                "ssh_hostname": "127.0.0.1",
                "ssh_port": 2201,
                "profile": "sandbox",
                "profile_overrides": {"service": {"port": 30001}},
            },
        ),
        (
            "node2",
            {
                "ssh_hostname": "127.0.0.1",
                "ssh_port": 2202,
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


def test_two_services_of_one_node_share_its_one_node_exporter_target():
    # One SSH target, two services (plan/shared_nodes.py): one node exporter, scraped once.
    service_b = {"service": {"name": "sglang-b", "port": 30101}}
    hosts = [
        ("node1-a", {"ssh_hostname": "10.0.0.11", "profile": "sandbox"}),
        ("node1-b", {"ssh_hostname": "10.0.0.11", "profile": "sandbox", "profile_overrides": service_b}),
    ]
    targets, _ = scrape_targets(hosts)
    assert [(t.job, t.address, t.labels["host"]) for t in targets if t.job == "node"] == [
        ("node", "10.0.0.11:9100", "node1-a")
    ]
    assert sorted(t.address for t in targets if t.job == "sglang") == ["10.0.0.11:30000", "10.0.0.11:30101"]


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


# A dashboard as Grafana exports one (SGLang's is such a file): its queries name the exporting
# Grafana's datasource uid, its panels the default datasource, its annotations Grafana's own.
EXPORTED = {
    "annotations": {"list": [{"datasource": {"type": "grafana", "uid": "-- Grafana --"}}]},
    "panels": [
        {
            "datasource": {"default": True, "type": "prometheus"},
            "targets": [
                {"datasource": {"type": "prometheus", "uid": "x1y2z3"}, "expr": "sglang:gen_throughput"}
            ],
        },
        {"datasource": {"type": "prometheus", "uid": "${datasource}"}, "targets": [{"expr": "up"}]},
    ],
    "templating": {"list": [{"datasource": {"type": "prometheus"}, "query": "label_values(instance)"}]},
    "title": "Exported",
}


def grafana_fleet(tmp_path, *dashboards):
    hosts = fleet()
    hosts[-1][1]["grafana_dashboard_files"] = list(dashboards)
    return monitoring_plan("mon", hosts, root=tmp_path).grafana


def test_grafana_gets_the_monitoring_hosts_prometheus_as_a_datasource_and_a_provider(tmp_path):
    grafana = grafana_fleet(tmp_path)
    datasource = yaml.safe_load(grafana.datasource_text)
    assert datasource == {
        "apiVersion": 1,
        "datasources": [
            {
                "name": "sglang-deploy Prometheus",
                "uid": GRAFANA_DATASOURCE_UID,
                "type": "prometheus",
                "access": "proxy",
                "url": "http://10.0.0.6:9091",  # the monitoring host's address, its prometheus_port
                "editable": False,
            }
        ],
    }
    (provider,) = yaml.safe_load(grafana.provider_text)["providers"]
    assert provider["type"] == "file" and provider["options"] == {
        "path": "/var/lib/grafana/dashboards/sglang-deploy"
    }
    assert provider["allowUiUpdates"] is False and provider["updateIntervalSeconds"] == GRAFANA_RESCAN_S
    assert grafana.datasource_path == "/etc/grafana/provisioning/datasources/sglang-deploy.yaml"
    assert grafana.provider_path == "/etc/grafana/provisioning/dashboards/sglang-deploy.yaml"
    assert grafana.read_at_start == (grafana.datasource_path, grafana.provider_path)
    assert grafana.unit == "grafana-server.service"


def test_grafana_settings_move_every_path():
    hosts = fleet()
    hosts[-1][1].update(grafana_provisioning_dir="/srv/grafana/prov", grafana_dashboards_dir="/srv/dash")
    grafana = monitoring_plan("mon", hosts).grafana
    assert grafana.provisioning_dir == "/srv/grafana/prov"
    assert list(grafana.files) == [
        "/srv/dash/sglang-deploy.json",  # the dashboards first, the provider that reads them last
        "/srv/grafana/prov/datasources/sglang-deploy.yaml",
        "/srv/grafana/prov/dashboards/sglang-deploy.yaml",
    ]
    assert "path: /srv/dash\n" in grafana.provider_text


def test_our_dashboard_is_provisioned_as_it_is_and_a_missing_one_is_said():
    grafana = monitoring_plan("mon", fleet()).grafana  # the defaults, from the repository
    ours = REPO_ROOT / "templates" / "grafana" / "sglang-deploy.json"
    assert (
        grafana.dashboards["/var/lib/grafana/dashboards/sglang-deploy/sglang-deploy.json"] == ours.read_text()
    )
    if not (REPO_ROOT / "build" / "grafana" / "sglang-dashboard.json").exists():
        assert grafana.warnings == (
            "grafana_dashboard_files: build/grafana/sglang-dashboard.json does not exist: not installed",
        )


def test_an_exported_dashboard_is_bound_to_our_datasource_and_says_so(tmp_path):
    (tmp_path / "exported.json").write_text(json.dumps(EXPORTED))
    grafana = grafana_fleet(tmp_path, "exported.json")
    doc = json.loads(grafana.dashboards["/var/lib/grafana/dashboards/sglang-deploy/exported.json"])
    ours = {"type": "prometheus", "uid": GRAFANA_DATASOURCE_UID}
    assert doc["panels"][0]["datasource"] == ours
    assert doc["panels"][0]["targets"][0]["datasource"] == ours
    assert doc["templating"]["list"][0]["datasource"] == ours
    # A template variable and Grafana's own annotations stay as they are.
    assert doc["panels"][1]["datasource"]["uid"] == "${datasource}"
    assert doc["annotations"] == EXPORTED["annotations"]
    assert doc["description"] == (
        "Provisioned by sglang-deploy from exported.json, its Prometheus queries bound to datasource "
        f"{GRAFANA_DATASOURCE_UID}."
    )
    assert {k: v for k, v in doc.items() if k not in ("panels", "templating", "description")} == {
        k: v for k, v in EXPORTED.items() if k not in ("panels", "templating")
    }
    again = grafana_fleet(tmp_path, "exported.json")
    assert again.files == grafana.files  # the same file is the same text: a re-run changes nothing


@pytest.mark.parametrize(
    "text, message",
    [
        ("{not json", "exported.json is not JSON"),
        ('{"title": "x"}', "exported.json is not a Grafana dashboard"),
    ],
)
def test_a_dashboard_file_that_is_none_stops_the_plan(tmp_path, text, message):
    (tmp_path / "exported.json").write_text(text)
    with pytest.raises(DeployError, match=f"grafana_dashboard_files: {message}"):
        grafana_fleet(tmp_path, "exported.json")
