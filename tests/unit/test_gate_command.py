"""The controller's gate command line and the gate's CLI agree: every timing the gate needs comes
from the profile (the gate has no second default), and the deploy's runtime directory is one
host-data key."""

import shlex
import subprocess
import sys

import pytest
from test_node_gate import NODE

from sglang_deploy.node import gate
from sglang_deploy.node.lib import status
from sglang_deploy.plan.commands import gate_timings
from sglang_deploy.plan.host_plan import plan_for
from sglang_deploy.plan.hosts import deploy_defaults
from sglang_deploy.profile.schema import Readiness

REPO_ROOT = NODE.parents[1]
HOST_DATA = {
    "profile": "sandbox",
    "profile_overrides": {"engine": {"find_links": []}},
    "sglang_deploy_dir": "/opt/sd",
    "env_dir": "/etc/sglang",
    "unit_dir": "/etc/systemd/system",
    "state_dir": "/var/lib/sd",
    "run_dir": "/run/sd-test",
    "deploy_lock_wait_s": 1,
    "rollback": True,
    "repair": False,
}
TIMINGS = {
    "timeout_s": 7,
    "poll_interval_s": 0.5,
    "progress_every_s": 3.0,
    "hang_after_s": 42.0,
    "fired_up_grace_s": 9.0,
}


def test_the_controllers_command_line_gives_the_gate_every_timing_of_the_profile():
    plan = plan_for({**HOST_DATA, "profile_overrides": {"engine": {"find_links": []}, "readiness": TIMINGS}})
    argv = shlex.split(plan.scripts.gate())
    assert argv[:2] == ["python3", "/opt/sd/node/gate.py"]
    args = gate.parser().parse_args(argv[2:])
    assert (args.unit, args.port, args.served_name) == (
        "sglang.service",
        plan.profile.service.port,
        plan.profile.model.served_name,
    )
    assert (args.timeout, args.interval, args.progress_every, args.hang_after, args.fired_up_grace) == (
        7,
        0.5,
        3.0,
        42.0,
        9.0,
    )


@pytest.mark.parametrize("left_out", ["--interval", "--progress-every", "--hang-after", "--fired-up-grace"])
def test_the_gate_has_no_default_of_its_own_for_a_timing(left_out):
    argv = [str(arg) for arg in gate_timings(Readiness())]
    at = argv.index(left_out)
    del argv[at : at + 2]
    proc = subprocess.run(
        [sys.executable, str(NODE / "gate.py"), "--unit", "u", "--port", "1", "--served-name", "x"] + argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.returncode == status.USAGE
    assert "the following arguments are required: %s" % left_out in proc.stderr


def test_the_fired_up_grace_is_documented_in_the_profile_schema():
    schema = (REPO_ROOT / "schema" / "profile.schema.json").read_text()
    assert '"fired_up_grace_s"' in schema
    assert Readiness().fired_up_grace_s == 15.0


def test_runtime_files_go_under_the_run_dir_of_the_host_data():
    plan = plan_for(HOST_DATA)
    assert plan.settings.run_dir == "/run/sd-test"
    assert plan.lock_path == "/run/sd-test/sglang.lock"
    assert plan.scripts.gate().endswith("--json /run/sd-test/sglang.service.gate.json")
    assert plan.scripts.gate_report == "/run/sd-test/sglang.service.gate.json"


def test_the_run_dir_default_is_the_deploy_defaults_one():
    assert deploy_defaults()["run_dir"] == "/run/sglang-deploy"
    # the deploy-level paths of the code are host data, not literals of their own
    for path in (
        "sglang_deploy/plan/host_plan.py",
        *(
            f"sglang_deploy/plan/commands/{path.name}"
            for path in (REPO_ROOT / "sglang_deploy/plan/commands").glob("*.py")
        ),
        "sglang_deploy/operations/files.py",
        "bench/common.py",
    ):
        assert "/run/sglang-deploy" not in (REPO_ROOT / path).read_text(), path
