"""Command lines of our node scripts come from one builder (plan/commands/builder.py), and the
controller reads `systemctl show` through one fact (facts/serving.py UnitState, whose parser is
node/lib/systemd.py's): nothing else builds or parses them by hand."""

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_deploy.facts.gpu import acs_unit_text
from sglang_deploy.facts.serving import UnitState
from sglang_deploy.plan import commands
from sglang_deploy.plan.host_plan import plan_for

REPO_ROOT = Path(__file__).resolve().parents[2]
NODE_DIR = REPO_ROOT / "sglang_deploy" / "node"
ODD = "/opt/my dir/$(touch x)"  # a directory a shell must not split or expand


def _sources():
    """The controller's Python: the package but its node scripts, the recipe, the benches."""
    for path in [*sorted((REPO_ROOT / "sglang_deploy").rglob("*.py")), REPO_ROOT / "deploy.py"]:
        if NODE_DIR not in path.parents:
            yield path
    yield from sorted((REPO_ROOT / "bench").glob("*.py"))


def _hits(pattern, allowed=()):
    found = []
    for path in _sources():
        if path.relative_to(REPO_ROOT).as_posix() in allowed:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.lstrip().startswith("#") and re.search(pattern, line):
                found.append(f"{path.relative_to(REPO_ROOT)}:{number}: {line.strip()}")
    return found


def test_no_node_script_command_line_is_built_outside_the_builder():
    # python3 on a formatted path, or a formatted path to one of our scripts followed by arguments.
    hand_built = _hits(
        r"python3? \{|\}/(?:lib/)?\w+\.py\s|/node/\w+\.py",
        allowed={"sglang_deploy/plan/commands/builder.py"},
    )
    assert not hand_built, "\n".join(hand_built)


def test_systemctl_show_is_read_through_one_fact():
    by_hand = _hits(r"systemctl show|split\(\"=\", 1\)", allowed={"sglang_deploy/facts/serving.py"})
    assert not by_hand, "\n".join(by_hand)


def test_unit_state_reads_what_systemctl_show_prints():
    fact = UnitState()
    assert shlex.split(fact.command("my unit.service", ("MainPID", "InvocationID"))) == [
        "systemctl",
        "show",
        "-p",
        "MainPID,InvocationID",
        "--",
        "my unit.service",
    ]
    # A value may hold "=" (ExecStart's, an environment's): only the first one separates.
    assert fact.process(["MainPID=42", "Environment=A=1 B=2", "not a property"]) == {
        "MainPID": "42",
        "Environment": "A=1 B=2",
    }


@pytest.mark.parametrize(
    "command, argv",
    [
        (
            commands.venvs_list_command(ODD, "/v d", "/l", "/g"),
            ["python3", f"{ODD}/venvs.py", "list", "--dir", "/v d", "--link", "/l", "--last-good-dir", "/g"],
        ),
        (
            commands.venvs_mark_command(ODD, "/v d"),
            ["python3", f"{ODD}/venvs.py", "mark", "--venv", "/v d"],
        ),
        (
            commands.dist_reach_command(ODD, "10.0.0.1:5000", 1, 2.0, 5001),
            [
                "python3",
                f"{ODD}/dist_reach.py",
                "--addr",
                "10.0.0.1:5000",
                "--node-rank",
                "1",
                "--timeout",
                "2",
                "--listening-port",
                "5001",
            ],
        ),
        (
            commands.router_gate_command(ODD, "http://r", 60, ["http://a", "http://b"]),
            ["python3", f"{ODD}/router_gate.py", "--url", "http://r", "--timeout", "60"]
            + ["--worker", "http://a", "--worker", "http://b"],
        ),
        (
            commands.lock_command("/run/l", 5, "alice's laptop", directory=ODD),
            ["python3", f"{ODD}/lock.py", "--path", "/run/l", "--wait", "5.0", "--holder", "alice's laptop"],
        ),
        (
            commands.lock_command("/run/l", 5, "me", source="print('$(x)')"),
            ["python3", "-c", "print('$(x)')", "--path", "/run/l", "--wait", "5.0", "--holder", "me"],
        ),
        (
            commands.last_good_show_command(ODD, "/g d"),
            ["python3", f"{ODD}/lastgood.py", "show", "--dir", "/g d"],
        ),
        (commands.acs_command(ODD), ["/usr/bin/python3", f"{ODD}/acs.py", "disable"]),
    ],
)
def test_every_argument_reaches_the_script_literally(command, argv):
    assert shlex.split(command) == argv


def test_node_scripts_of_a_serving_group_member():
    plan = plan_for(
        {
            "profile": "baseline",
            "sglang_deploy_dir": "/opt/d",
            "env_dir": "/etc/s",
            "unit_dir": "/etc/systemd/system",
            "state_dir": "/var/lib/d",
            "deploy_lock_wait_s": 1,
            "rollback": True,
            "repair": False,
        },
        operator_env={},
    )
    scripts = plan.scripts
    assert shlex.split(scripts.follower_stop(20.0)) == [
        "python3",
        "/opt/d/node/follower.py",
        "stop",
        "--unit",
        plan.unit,
        "--wait",
        "20",
    ]
    assert shlex.split(scripts.follower_cause())[1:] == [
        "/opt/d/node/follower.py",
        "cause",
        "--unit",
        plan.unit,
    ]
    assert shlex.split(scripts.journal())[1:] == [
        "/opt/d/node/lib/systemd.py",
        "journal",
        plan.unit,
        "--json",
    ]
    assert shlex.split(scripts.stop()) == shlex.split(scripts.restart()) + ["--no-start"]


def _bound_to(host):
    """The plan of a node whose profile binds its server to ``host`` (service.host)."""
    data = {
        "profile": "baseline",
        "profile_overrides": {"service": {"host": host}},
        "sglang_deploy_dir": "/opt/d",
        "env_dir": "/etc/s",
        "unit_dir": "/etc/systemd/system",
        "state_dir": "/var/lib/d",
        "deploy_lock_wait_s": 1,
        "rollback": True,
        "repair": False,
    }
    return plan_for(data, operator_env={})


def _after(command, flag):
    argv = shlex.split(command)
    return argv[argv.index(flag) + 1]


@pytest.mark.parametrize(
    "host, probed, url",
    [
        ("127.0.0.2", "127.0.0.2", "http://127.0.0.2:30000"),
        ("0.0.0.0", "127.0.0.1", "http://127.0.0.1:30000"),
        ("::", "::1", "http://[::1]:30000"),
    ],
)
def test_every_probe_of_the_server_is_given_the_address_it_listens_on(host, probed, url):
    """A server bound to one address answers there only: the gate, the decode check and `make
    status` are given it (--host); one on every interface is asked at loopback."""
    plan = _bound_to(host)
    service, scripts = plan.profile.service, plan.scripts
    assert (service.probe_host, service.probe_url) == (probed, url)
    assert commands.gate_args(plan.profile)[:2] == ["--host", probed]
    for command in (scripts.gate(), scripts.decode_check(), scripts.node_status("/v", "/p")):
        assert _after(command, "--host") == probed, command
    cycle = json.loads(_after(scripts.cycle({}), "--steps-json"))
    assert _after(cycle["gate"], "--host") == _after(cycle["decode"], "--host") == probed


def test_the_acs_unit_runs_the_builders_command_line():
    text = acs_unit_text("/opt/sglang-deploy/node", "sglang.service")
    assert "ExecStart=/usr/bin/python3 /opt/sglang-deploy/node/acs.py disable\n" in text


def _fake(tmp_path, name, body):
    path = tmp_path / name
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(0o755)
    return str(path)


def test_the_journal_of_a_start_comes_back_in_a_result_line(tmp_path):
    """lib/systemd.py run as a script (as the controller runs it on a member): its lines in the
    result line, even one that looks like the human output's cursor line."""
    systemctl = _fake(
        tmp_path, "systemctl", "print('InvocationID=abc')\nprint('ExecMainStartTimestampMonotonic=0')"
    )
    entries = [
        {"__CURSOR": "s=1", "MESSAGE": "Init parallel begin."},
        {"__CURSOR": "s=2", "MESSAGE": "-- cursor: what a server printed"},
    ]
    journalctl = _fake(tmp_path, "journalctl", f"print({chr(10).join(json.dumps(e) for e in entries)!r})")
    done = subprocess.run(
        [
            sys.executable,
            str(NODE_DIR / "lib" / "systemd.py"),
            "--systemctl",
            systemctl,
            "--journalctl",
            journalctl,
            "journal",
            "sglang.service",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["lines"] == ["Init parallel begin.", "-- cursor: what a server printed"]
    assert (found["cursor"], found["status"], len(done.stdout.strip().splitlines())) == ("s=2", 0, 1)


def test_the_decode_check_is_given_the_rules_speculation_must_pay():
    from sglang_deploy.plan.commands.unit import NodeScripts
    from sglang_deploy.profile.schema import load_profile

    profile = load_profile(
        "eagle3-2step",
        overrides={
            "throughput": {"min_speedup_over": "baseline", "min_speedup_pct": 5, "min_accept_length": 1.5}
        },
    )
    scripts = NodeScripts(
        "/opt/d", "sglang.service", profile, {"env": "/etc/s/sglang.env"}, "/var/lib/d/lg", "", ""
    )
    command = scripts.decode_check()
    assert _after(command, "--min-speedup-over") == "baseline"
    assert _after(command, "--min-speedup-pct") == "5.0" and _after(command, "--min-accept-length") == "1.5"
    assert "--min-speedup-over" not in _bound_to("127.0.0.2").scripts.decode_check()


def test_the_textfile_carries_the_expectations_the_alerts_compare_with():
    from sglang_deploy.profile.schema import load_profile

    plain = load_profile("baseline").throughput
    assert "min_speedup_pct" not in plain.alerted
    paying = load_profile("eagle3-2step", overrides={"throughput": {"min_accept_length": 1.5}}).throughput
    assert paying.alerted["min_speedup_pct"] == 0.0 and paying.alerted["min_accept_length"] == 1.5
