"""operations/metrics_textfile.py: the node's textfile of the deploy's figures is written only
when metrics_textfile.py --check says a figure changed (a re-run reports no change), with the
node's hardware passport; a check that cannot run is a warning, not a failed deploy. Behind no
router it says so; the node's own samples (rotation, drift) are asked of the scripts that change
them (NodeScripts.textfile_flags), on a node with a node exporter only."""

import json
import shlex

import pytest
from pyinfra.context import ctx_host

from sglang_deploy.facts.metrics_textfile import MetricsTextfileCheck
from sglang_deploy.node.lib import status
from sglang_deploy.operations import metrics_textfile as ops
from sglang_deploy.plan.fleet_hosts import rotation_for
from sglang_deploy.plan.host_plan import plan_for
from sglang_deploy.plan.hosts import deploy_defaults
from tests.unit.test_checks import HOST_DATA

PATH = "/var/lib/prometheus/node-exporter/sglang-deploy-sglang.prom"


class FakeHost:
    name = "node"

    def __init__(self, answer):
        self.answer, self.asked, self.noops, self.logs = answer, [], [], []

    def get_fact(self, fact, **kwargs):
        self.asked.append((fact, kwargs))
        return self.answer

    def noop(self, text):
        self.noops.append(text)

    def log(self, text, *args, **kwargs):
        self.logs.append(text)


@pytest.fixture
def scripts():
    found = plan_for({**HOST_DATA, "profile": "sandbox"}).scripts
    expected = found.profile.throughput.model_copy(update={"max_regression_pct": 10.0})
    found.profile = found.profile.model_copy(update={"throughput": expected})
    return found


def _run(scripts, answer, **kwargs):
    fake = FakeHost(answer)
    with ctx_host.use(fake):
        commands = list(ops.metrics_textfile_written._inner(scripts, **kwargs))
    return commands, fake


def test_nothing_changed_is_a_noop(scripts):
    commands, fake = _run(scripts, {"status": status.READY, "path": PATH, "changed": False})
    assert commands == [] and fake.noops == [f"{PATH} is up to date"]
    # The check is the script's --check with the node's passport, guarded by the script's presence.
    fact, kwargs = fake.asked[0]
    assert fact is MetricsTextfileCheck
    argv = shlex.split(kwargs["command"])
    assert argv[-1] == "--check" and argv[argv.index("--passport") + 1] == scripts.passport_path
    assert scripts.passport_path and kwargs["scripts_dir"] == scripts.directory


@pytest.mark.parametrize("answer", [{"status": status.READY, "path": PATH, "changed": True}, None])
def test_a_changed_figure_or_a_first_run_writes_the_file_with_the_passport(scripts, answer):
    commands, fake = _run(scripts, answer)
    assert fake.noops == [] and len(commands) == 1
    argv = shlex.split(commands[0])
    assert argv[1].endswith("/metrics_textfile.py") and "--check" not in argv
    assert argv[argv.index("--passport") + 1] == scripts.passport_path
    assert argv[argv.index("--max-regression-pct") + 1] == "10.0"
    assert argv[argv.index("--history") + 1] == scripts.throughput_history


def test_a_check_that_fails_is_a_warning_and_no_write(scripts):
    answer = {"status": status.USAGE, "cause": "--passport: Expecting value"}
    commands, fake = _run(scripts, answer)
    assert commands == [] and fake.noops == ["metrics textfile not written"]
    assert fake.logs == ["metrics textfile not written: --passport: Expecting value"]


def test_the_fact_is_guarded_by_the_script_and_never_fails():
    command = MetricsTextfileCheck().command("/opt/d/node", "python3 /opt/d/node/metrics_textfile.py --check")
    assert command.startswith("! test -f /opt/d/node/metrics_textfile.py || ") and command.endswith("|| true")


def test_behind_no_router_the_check_and_the_write_say_so(scripts):
    answer = {"status": status.READY, "path": PATH, "changed": True}
    commands, fake = _run(scripts, answer, routers=False)
    assert "--no-routers" in shlex.split(fake.asked[0][1]["command"])
    assert "--no-routers" in shlex.split(commands[0])
    commands, fake = _run(scripts, answer)  # behind routers the rotation file is rotation.py's
    assert "--no-routers" not in fake.asked[0][1]["command"] + commands[0]


def _node(**data):
    return {**deploy_defaults(), "profile": "sandbox", "ssh_hostname": "10.0.0.11", **data}


def _flag(argv, name):
    return argv[argv.index(name) + 1]


@pytest.mark.parametrize("exporter", [True, False])
def test_the_scripts_that_change_rotation_or_drift_write_their_samples_where_a_node_exporter_runs(
    exporter,
):
    data = _node(node_exporter=exporter, profile_overrides={"engine": {"find_links": []}})
    scripts = plan_for(data, operator_env={}).scripts
    port = str(scripts.profile.service.port)
    router = {**deploy_defaults(), "role": "router", "ssh_hostname": "10.0.0.5", "ssh_port": 22}
    hosts = [("n1", data), ("r1", router)]
    rotation = rotation_for("n1", data, hosts, port, textfile=scripts.textfile_flags())
    steps = json.loads(shlex.split(scripts.cycle({}))[-1])
    commands = {
        "verify's drift check": scripts.drift(),
        "the deploy's preflight": scripts.preflight(f"{scripts.venv}/bin/python"),
        "the cycle's preflight": steps["preflight"],
        "the rotation": rotation.wrap(scripts.directory, "CYCLE", "RESTORE"),
        "rotation out": rotation.out(scripts.directory),
        "rotation back": rotation.back(scripts.directory),
    }
    for what, command in commands.items():
        argv = shlex.split(command)
        if exporter:
            assert _flag(argv, "--textfile-service") == "sglang", what
            assert _flag(argv, "--textfile-port") == port, what
            assert "--textfile-dir" not in argv, what  # Debian's, the node exporter's own
        else:
            assert "--textfile-service" not in argv, what
    # Before the engine is installed preflight checks no drift, so asks for no sample.
    assert "--textfile-service" not in scripts.preflight(argv_check=False)
