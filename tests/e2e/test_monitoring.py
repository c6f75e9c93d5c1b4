"""A monitoring node over the fleet: Prometheus from Debian's pinned package, scraping every
serving node's engine, the router's exporter and a node exporter on every host.

python3 sandbox/sandbox.py up --nodes 3 --routers 1 --monitoring 1 && python3 -m pytest -m fleet tests/e2e
"""

import json
import shlex
import subprocess
import time

import pytest
import requests
import yaml

from sglang_deploy.cli import EXIT_UNREACHABLE

from .sandbox import (  # noqa: F401 (a fixture)
    REPO_ROOT,
    deploy,
    host_tests_argv,
    nodes,
    profile_dir,
    ssh,
    start_deploy,
    unit_start,
    wait_for_output,
    write_profile,
)

pytestmark = [pytest.mark.e2e, pytest.mark.fleet]
SCRAPE_S = 15  # prometheus_scrape_interval_s's default
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"  # Debian's node exporter's textfile directory


def fleet():
    """(serving node names, router name, monitoring node name, Prometheus' URL)."""
    _, found = nodes()
    roles = {name: node.get("role", "node") for name, node in found.items()}
    serving = sorted(n for n in found if roles[n] == "node")
    routers = [n for n in found if roles[n] == "router"]
    monitors = [n for n in found if roles[n] == "monitoring"]
    if not routers or not monitors or len(serving) < 2:
        pytest.skip("needs 2 nodes, a router and a monitoring node: sandbox.py up --routers 1 --monitoring 1")
    return serving, routers[0], monitors[0], f"http://127.0.0.1:{found[monitors[0]]['server_port']}"


def fleet_deploy(names, router, monitor, **kwargs):
    return deploy({**{name: "sandbox" for name in names}, router: "sandbox", monitor: "sandbox"}, **kwargs)


def targets(prometheus):
    """{scrape URL: (health, labels)} as Prometheus lists its active targets."""
    found = requests.get(f"{prometheus}/api/v1/targets", params={"state": "active"}, timeout=5).json()
    return {t["scrapeUrl"]: (t["health"], t["labels"]) for t in found["data"]["activeTargets"]}


def wait_for(prometheus, done, timeout=3 * SCRAPE_S + 10):
    """Prometheus' targets once ``done(targets)`` holds (the last ones read otherwise)."""
    deadline = time.monotonic() + timeout
    while True:
        seen = targets(prometheus)
        if done(seen) or time.monotonic() > deadline:
            return seen
        time.sleep(2)


def samples(prometheus, metric):
    """{host: value} of ``metric`` as Prometheus holds it now (the targets' host label)."""
    found = requests.get(f"{prometheus}/api/v1/query", params={"query": metric}, timeout=5).json()
    return {r["metric"]["host"]: float(r["value"][1]) for r in found["data"]["result"]}


def wait_for_samples(prometheus, metric, done, timeout=3 * SCRAPE_S + 10):
    """``metric``'s samples once ``done(samples)`` holds (the last ones read otherwise)."""
    deadline = time.monotonic() + timeout
    while True:
        seen = samples(prometheus, metric)
        if done(seen) or time.monotonic() > deadline:
            return seen
        time.sleep(2)


def node_sample(node, owner):
    """The node's own sample as its textfile holds it (lib/textfile.py): the value, or None."""
    text = ssh(node, f"cat {TEXTFILE_DIR}/sglang-deploy-sglang@{owner}.prom 2>/dev/null || true")
    values = [line.split()[-1] for line in text.splitlines() if line and not line.startswith("#")]
    return float(values[0]) if values else None


def verify_node(node, *args):
    """`make verify`'s host tests on one serving node."""
    return subprocess.run(
        host_tests_argv(node, "-q", *args), cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )


def verify_monitor(monitor):
    """`make verify`'s host tests on the monitoring node alone."""
    return subprocess.run(
        host_tests_argv(monitor, "-q"), cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def deployed():
    names, router, monitor, prometheus = fleet()
    run = fleet_deploy(names, router, monitor)
    assert run.returncode == 0, run.output[-5000:]
    return names, router, monitor, prometheus


def test_every_target_of_the_inventory_is_up(deployed):
    names, router, monitor, prometheus = deployed
    seen = wait_for(prometheus, lambda s: s and all(health == "up" for health, _ in s.values()))
    assert all(health == "up" for health, _ in seen.values()), seen
    hosts = {labels["host"] for _, labels in seen.values()}
    assert hosts == {*names, router, monitor}
    jobs = sorted(labels["job"] for _, labels in seen.values())
    # An engine per serving node, the router's exporter, a node exporter per host, Prometheus.
    assert jobs == sorted(
        ["sglang"] * len(names) + ["sglang-router"] + ["node"] * (len(names) + 2) + ["prometheus"]
    )
    engine = next(labels for health, labels in seen.values() if labels["job"] == "sglang")
    assert engine["profile"] == "sandbox" and engine["role"] == "node"
    checked = verify_monitor(monitor)
    assert checked.returncode == 0, checked.stdout[-3000:]


def test_a_rerun_with_nothing_changed_changes_nothing(deployed):
    names, router, monitor, _ = deployed
    before = unit_start(monitor, "prometheus.service")
    run = fleet_deploy(names, router, monitor)
    assert run.returncode == 0 and run.changed == 0, run.output[-5000:]
    assert unit_start(monitor, "prometheus.service") == before


GRAFANA_PROVISIONING = "/etc/grafana/provisioning"  # grafana_provisioning_dir's default
GRAFANA_DASHBOARDS = "/var/lib/grafana/dashboards/sglang-deploy"  # grafana_dashboards_dir's default


def test_grafana_where_the_monitoring_node_has_it_is_provisioned_once(deployed):
    """No Grafana on the sandbox (nor in Debian's archive): its provisioning directory made by
    hand stands for one. The files land there, readable, and a re-run changes nothing; without
    the directory the step changed nothing (test_a_rerun_with_nothing_changed_changes_nothing)."""
    names, router, monitor, prometheus = deployed
    ssh(monitor, f"test ! -e /etc/grafana && test ! -e /var/lib/grafana && mkdir -p {GRAFANA_PROVISIONING}")
    try:
        run = fleet_deploy(names, router, monitor)
        assert run.returncode == 0 and run.changed > 0, run.output[-5000:]
        found = ssh(
            monitor,
            f"cd / && stat -c '%a %U %n' {GRAFANA_PROVISIONING}/*/sglang-deploy.yaml {GRAFANA_DASHBOARDS}/*.json",
        ).split()
        ours = f"{GRAFANA_DASHBOARDS}/sglang-deploy.json"
        assert found[2::3][:2] == [
            f"{GRAFANA_PROVISIONING}/dashboards/sglang-deploy.yaml",
            f"{GRAFANA_PROVISIONING}/datasources/sglang-deploy.yaml",
        ]
        assert ours in found and set(found[0::3]) == {"644"} and set(found[1::3]) == {"root"}
        assert ssh(monitor, f"cat {ours}") == (REPO_ROOT / "templates/grafana/sglang-deploy.json").read_text()
        datasource = yaml.safe_load(
            ssh(monitor, f"cat {GRAFANA_PROVISIONING}/datasources/sglang-deploy.yaml")
        )
        url = datasource["datasources"][0]["url"]
        assert url.rsplit(":", 1)[1] == prometheus.rsplit(":", 1)[1]  # the monitoring node's Prometheus
        ready = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).status)"
        assert (
            ssh(monitor, f"python3 -c {shlex.quote(ready)} {shlex.quote(url + '/-/ready')}").strip() == "200"
        )
        again = fleet_deploy(names, router, monitor)
        assert again.returncode == 0 and again.changed == 0, again.output[-5000:]
    finally:
        ssh(monitor, "rm -rf /etc/grafana /var/lib/grafana", check=False)  # made by this test alone


def test_a_stopped_node_shows_as_down_and_fails_verify(deployed):
    names, router, monitor, prometheus = deployed
    stopped = names[0]
    ssh(stopped, "systemctl stop sglang.service")
    try:
        seen = wait_for(
            prometheus,
            lambda s: any(
                h == "down" and l["host"] == stopped and l["job"] == "sglang" for h, l in s.values()
            ),
        )
        mine = {url: health for url, (health, labels) in seen.items() if labels["host"] == stopped}
        # Still listed (targets come from the inventory), and down; its node exporter still up.
        assert sorted(mine.values()) == ["down", "up"], seen
        checked = verify_monitor(monitor)
        assert checked.returncode != 0
        down = next(url for url, health in mine.items() if health == "down")
        assert f"{down} down" in checked.stdout, checked.stdout[-3000:]
    finally:
        ssh(stopped, "systemctl start sglang.service")
    wait_for(prometheus, lambda s: all(health == "up" for health, _ in s.values()))


def test_a_node_restarted_behind_the_router_says_out_then_in(deployed, profile_dir):  # noqa: F811
    names, router, monitor, prometheus = deployed
    restarted = names[0]
    changed = write_profile(
        profile_dir, "rotated", "extends: {profiles}/sandbox.yml\nenv:\n  NCCL_NTHREADS: 128\n"
    )
    profiles = {
        **{name: "sandbox" for name in names},
        restarted: changed,
        router: "sandbox",
        monitor: "sandbox",
    }
    run = start_deploy(profiles)
    try:
        # Its gate waits for the new server: the node is out of the router, and its sample says so.
        wait_for_output(run, "phase: loading weights", timeout=300)
        assert node_sample(restarted, "rotation") == 0.0
        output = run.communicate(timeout=600)[0]
        assert run.returncode == 0, output[-5000:]
        assert node_sample(restarted, "rotation") == 1.0
        seen = wait_for_samples(prometheus, "sglang_deploy_in_rotation", lambda s: s.get(restarted) == 1.0)
        assert seen.get(restarted) == 1.0, seen
    finally:
        if run.poll() is None:
            run.kill()
        back = fleet_deploy(names, router, monitor)  # the later tests' fleet: every node on sandbox
        assert back.returncode == 0, back.output[-5000:]
    assert node_sample(restarted, "rotation") == 1.0


def test_drift_that_verify_finds_alerts_until_a_check_finds_it_gone(deployed):
    names, _, _, prometheus = deployed
    node = names[-1]
    site = "/opt/sglang/venv/lib/python3.11/site-packages"
    patched = f"{site}/sglang/srt/managers/scheduler.py"
    ssh(node, f"cp -p {patched} /root/scheduler.py.before && echo '# a hand edit' >> {patched}")
    try:
        assert verify_node(node, "-k", "drift").returncode != 0
        assert node_sample(node, "drift") == 1.0
        seen = wait_for_samples(prometheus, "sglang_deploy_drift_detected", lambda s: s.get(node) == 1.0)
        assert seen.get(node) == 1.0, seen
        alerts = wait_for_samples(
            prometheus,
            'ALERTS{alertname="SGLangDriftDetected",alertstate="firing"}',
            lambda s: node in s,
        )
        assert node in alerts, alerts
    finally:
        ssh(node, f"cp -p /root/scheduler.py.before {patched} && rm /root/scheduler.py.before")
    checked = verify_node(node, "-k", "drift")
    assert checked.returncode == 0, checked.stdout[-3000:]
    assert node_sample(node, "drift") == 0.0
    seen = wait_for_samples(prometheus, "sglang_deploy_drift_detected", lambda s: s.get(node) == 0.0)
    assert seen.get(node) == 0.0, seen


def test_a_rule_that_does_not_parse_stops_before_prometheus_reloads(deployed, tmp_path):
    names, router, monitor, prometheus = deployed
    bad = tmp_path / "bad.rules.yml"
    bad.write_text("groups:\n- name: x\n  rules:\n  - alert: Bad\n    expr: rate(up[5m] > 1\n")
    config_before = requests.get(f"{prometheus}/api/v1/status/config", timeout=5).json()["data"]["yaml"]
    rules = "cd /etc/prometheus/rules 2>/dev/null && sha256sum * 2>/dev/null || true"
    rules_before = ssh(monitor, rules)
    started = unit_start(monitor, "prometheus.service")
    run = fleet_deploy(
        names, router, monitor, args=("--data", f"prometheus_rule_files={json.dumps([str(bad)])}")
    )
    assert run.returncode != 0
    assert "promtool refused the configuration or its rules" in run.output, run.output[-5000:]
    assert "unclosed left parenthesis" in run.output
    assert f"sglang-deploy: {monitor}: failed" in run.output
    for name in names:  # the serving nodes' deploys went on
        assert f"sglang-deploy: {name}: unchanged" in run.output, run.output[-3000:]
    # Nothing replaced, nothing reloaded: the running Prometheus keeps its configuration.
    assert ssh(monitor, rules) == rules_before  # the shipped rules, as they were
    assert (
        requests.get(f"{prometheus}/api/v1/status/config", timeout=5).json()["data"]["yaml"] == config_before
    )
    assert unit_start(monitor, "prometheus.service") == started


def test_an_unreachable_monitoring_node_does_not_block_the_serving_nodes(deployed):
    names, router, monitor, _ = deployed
    # sshd comes back by itself: later tests (and the teardown) need the node.
    ssh(
        monitor,
        "systemd-run --on-active=60s systemctl start ssh.service >/dev/null 2>&1; systemctl stop ssh.service",
        check=False,
    )
    try:
        run = fleet_deploy(names, router, monitor)
        assert run.returncode == EXIT_UNREACHABLE, run.output[-5000:]
        assert f"sglang-deploy: {monitor}: unreachable (" in run.output
        for name in [*names, router]:
            assert f"sglang-deploy: {name}: unchanged" in run.output, run.output[-3000:]
    finally:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                ssh(monitor, "true")
                break
            except AssertionError:
                time.sleep(3)
