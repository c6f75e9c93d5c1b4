"""Monitoring's operations case by case (operations/monitoring.py): what each yields for a given
host state (facts faked), and host.noop when there is nothing to do, so a re-run changes
nothing."""

import hashlib

import pytest
from pyinfra.api import FunctionCommand
from pyinfra.api.command import FileUploadCommand
from pyinfra.context import ctx_host
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.files import Directory

from sglang_deploy.facts.monitoring import PrometheusGate
from sglang_deploy.facts.serving import FileDigests, UnitState
from sglang_deploy.node.lib import status
from sglang_deploy.operations import files as files_ops
from sglang_deploy.operations import monitoring as ops
from sglang_deploy.plan.monitoring import CONFIG_PATH, RULES_DIR

CONFIG = "# rendered\nglobal: {}\n"
RULES = "groups: []\n"
FILES = {f"{RULES_DIR}/ours.rules.yml": RULES, CONFIG_PATH: CONFIG}


def digests(**texts):
    """FileDigests' answer: ``texts`` {path: text} present, every other path absent."""
    return lambda paths: {
        path: {"mode": "644", "user": "root", "sha256": hashlib.sha256(texts[path].encode()).hexdigest()}
        for path in paths
        if path in texts
    }


class FakeHost:
    name = "mon"

    def __init__(self, facts):
        self.facts, self.noops = facts, []

    def get_fact(self, fact, **kwargs):
        answer = self.facts.get(fact)
        return answer(**kwargs) if callable(answer) else answer

    def noop(self, text):
        self.noops.append(text)

    def get_temp_filename(self, *args, **kwargs):
        return "/tmp/upload"

    def log(self, *args, **kwargs):
        pass


@pytest.fixture
def run(monkeypatch):
    def run(op, facts, *args, **kwargs):
        fake = FakeHost(facts)
        monkeypatch.setattr(files_ops, "_diff_wanted", lambda: False)
        with ctx_host.use(fake):
            commands = list(op._inner(*args, **kwargs))
        return [str(c) if isinstance(c, str) else c for c in commands], fake.noops

    return run


def test_configuration_as_installed_is_a_noop(run):
    commands, noops = run(
        ops.checked_configuration,
        {FileDigests: digests(**{p: t for p, t in FILES.items()})},
        FILES,
        CONFIG_PATH,
        "/run/s",
    )
    assert commands == [] and noops == [f"{CONFIG_PATH} and 1 rule file(s) are up to date"]


def test_a_changed_rule_is_checked_with_the_whole_set_before_anything_is_replaced(run):
    installed = digests(**{CONFIG_PATH: CONFIG, f"{RULES_DIR}/ours.rules.yml": "groups: [old]\n"})
    commands, _ = run(ops.checked_configuration, {FileDigests: installed}, FILES, CONFIG_PATH, "/run/s")
    uploads = [c.dest for c in commands if isinstance(c, FileUploadCommand)]
    assert uploads == ["/run/s/rules/ours.rules.yml", "/run/s/prometheus.yml"]  # as under /etc/prometheus
    text = [str(c) for c in commands]
    check = next(i for i, c in enumerate(text) if c.startswith("promtool check config /run/s/prometheus.yml"))
    renames = [i for i, c in enumerate(text) if " mv -f " in c]
    # Only the changed file is replaced, after the check; promtool's refusal exits first.
    assert len(renames) == 1 and renames[0] > check
    assert text[renames[0]].endswith(
        f"mv -f {RULES_DIR}/.ours.rules.yml.sglang-deploy-new {RULES_DIR}/ours.rules.yml"
    )
    assert "exit 1" in text[check]
    assert text[-1] == "rm -rf /run/s"


def test_a_first_install_writes_the_configuration_after_the_rules(run):
    commands, _ = run(ops.checked_configuration, {FileDigests: digests()}, FILES, CONFIG_PATH, "/run/s")
    renames = [str(c).rsplit(" ", 1)[1] for c in commands if " mv -f " in str(c)]
    assert renames == [f"{RULES_DIR}/ours.rules.yml", CONFIG_PATH]


def test_pinned_packages_at_their_version_are_a_noop(run):
    installed = {"prometheus": ["2.42.0+ds-5+deb12u1"]}
    commands, noops = run(ops.pinned_packages, {DebPackages: installed}, ["prometheus=2.42.0+ds-5+deb12u1"])
    assert commands == [] and noops == ["installed: prometheus=2.42.0+ds-5+deb12u1"]


def test_a_package_at_another_version_is_installed_at_the_pin_refreshing_the_lists_only_if_needed(run):
    installed = {"prometheus": ["2.45.0"]}
    (command,), _ = run(ops.pinned_packages, {DebPackages: installed}, ["prometheus=2.42.0+ds-5+deb12u1"])
    install = (
        'DEBIAN_FRONTEND=noninteractive apt-get -y -o Dpkg::Options::="--force-confdef" '
        '-o Dpkg::Options::="--force-confold" '
        "install --no-install-recommends --allow-downgrades prometheus=2.42.0+ds-5+deb12u1"
    )
    # confold: a conffile changed since (our prometheus.yml) survives an upgrade to a new pin.
    assert command == f"{install} || {{ apt-get update && {install}; }}"


def test_a_drop_in_is_written_then_systemd_reloaded_only_when_it_differs(run):
    path = "/etc/systemd/system/prometheus.service.d/sglang-deploy.conf"
    commands, noops = run(ops.drop_in, {FileDigests: digests(**{path: "x"})}, path, "x")
    assert commands == [] and noops == [f"{path} is up to date"]
    commands, _ = run(ops.drop_in, {FileDigests: digests()}, path, "x")
    assert commands[0] == "mkdir -p /etc/systemd/system/prometheus.service.d"
    assert commands[-1] == "systemctl daemon-reload"


def test_a_running_ready_service_is_a_noop_and_a_stopped_one_started_and_gated(run):
    ready = {
        UnitState: {"UnitFileState": "enabled", "ActiveState": "active"},
        PrometheusGate: {"status": status.READY},
    }
    commands, noops = run(ops.serving, ready, "prometheus.service", "gate", "gate --timeout 0")
    assert commands == [] and noops == ["prometheus.service: active, ready"]
    stopped = {UnitState: {"UnitFileState": "disabled", "ActiveState": "inactive"}}
    commands, _ = run(ops.serving, stopped, "prometheus.service", "gate", "gate --timeout 0")
    assert commands[:2] == ["systemctl enable prometheus.service", "systemctl start prometheus.service"]
    assert isinstance(commands[2], FunctionCommand)
    not_ready = {**ready, PrometheusGate: {"status": status.TIMEOUT}}
    commands, _ = run(ops.serving, not_ready, "prometheus.service", "gate", "gate --timeout 0")
    assert len(commands) == 1 and isinstance(commands[0], FunctionCommand)


PROVISIONING = "/etc/grafana/provisioning"
DATASOURCE = f"{PROVISIONING}/datasources/sglang-deploy.yaml"
PROVIDER = f"{PROVISIONING}/dashboards/sglang-deploy.yaml"
DASHBOARD = "/var/lib/grafana/dashboards/sglang-deploy/sglang-deploy.json"
GRAFANA_FILES = {DASHBOARD: '{"panels": []}\n', DATASOURCE: "datasources: []\n", PROVIDER: "providers: []\n"}
GRAFANA_THERE = {"user": "root", "group": "grafana", "mode": 755}
RUNNING = {"LoadState": "loaded", "ActiveState": "active"}


def provisioned(run, facts, warnings=()):
    return run(
        ops.grafana_provisioned,
        {Directory: GRAFANA_THERE, UnitState: RUNNING, **facts},
        PROVISIONING,
        GRAFANA_FILES,
        [DATASOURCE, PROVIDER],
        "grafana-server.service",
        warnings,
    )


def written(commands):
    return [c.rsplit(" ", 1)[1] for c in commands if isinstance(c, str) and " mv -f " in c]


def test_where_grafana_is_not_there_the_step_says_so_and_changes_nothing(run):
    commands, noops = provisioned(run, {Directory: None, FileDigests: digests()}, ["a dashboard is missing"])
    assert commands == []
    assert noops == [
        "Grafana is not installed here (/etc/grafana/provisioning does not exist): nothing provisioned"
    ]


def test_provisioning_as_installed_is_a_noop(run):
    commands, noops = provisioned(run, {FileDigests: digests(**GRAFANA_FILES)})
    assert commands == []
    assert noops == ["Grafana's datasource, dashboard provider and 1 dashboard(s) are up to date"]


def test_a_first_provisioning_writes_every_file_readable_then_restarts_a_running_grafana(run):
    commands, _ = provisioned(run, {FileDigests: digests()})
    assert written(commands) == [DASHBOARD, DATASOURCE, PROVIDER]
    assert "mkdir -p /var/lib/grafana/dashboards/sglang-deploy" in commands
    assert all("chown root:root" in c and "chmod 0644" in c for c in commands if " mv -f " in str(c))
    assert commands[-1] == "systemctl try-restart grafana-server.service"  # a stopped one stays stopped


def test_a_changed_dashboard_alone_is_written_and_grafana_not_restarted(run):
    # The provider reads the dashboards again by itself (updateIntervalSeconds).
    installed = digests(**{**GRAFANA_FILES, DASHBOARD: '{"panels": [1]}\n'})
    commands, noops = provisioned(run, {FileDigests: installed})
    assert written(commands) == [DASHBOARD] and noops == []
    assert not any("systemctl" in str(c) for c in commands)


def test_a_changed_datasource_restarts_grafana_only_where_its_unit_is_installed(run):
    installed = digests(**{**GRAFANA_FILES, DATASOURCE: "datasources: [old]\n"})
    commands, _ = provisioned(run, {FileDigests: installed})
    assert written(commands) == [DATASOURCE]
    assert commands[-1] == "systemctl try-restart grafana-server.service"
    commands, _ = provisioned(run, {FileDigests: installed, UnitState: {"LoadState": "not-found"}})
    assert written(commands) == [DATASOURCE] and not any("systemctl" in str(c) for c in commands)


def test_a_file_grafana_could_not_read_is_written_again(run):
    unreadable = digests(**GRAFANA_FILES)
    facts = {
        FileDigests: lambda paths: {
            p: {**v, "mode": "600"} if p == PROVIDER else v for p, v in unreadable(paths).items()
        }
    }
    commands, _ = provisioned(run, facts)
    assert written(commands) == [PROVIDER]
