"""`make ab`'s controller (report/ab_runner.py): each profile rendered as a deploy of it would
be and staged with node/ab.py's plan (plan/commands/ab.py), a profile of another engine refused
naming it, the A/B started detached and followed to its end, the table, the timing and
reports/ab/<host>-<stamp>.json; and `make report`'s A/B section (report/ab_report.py)."""

import io
import json
import tarfile

import pytest

from sglang_deploy.errors import DeployError
from sglang_deploy.node.lib import status
from sglang_deploy.plan.hosts import deploy_defaults
from sglang_deploy.report import ab_report, ab_runner

DEFAULTS = deploy_defaults()
NODE = {**DEFAULTS, "ssh_hostname": "10.0.0.11", "profile": "sandbox"}
ROUTER = {**DEFAULTS, "ssh_hostname": "10.0.0.5", "ssh_port": 22, "role": "router"}


@pytest.fixture
def inventory(tmp_path):
    path = tmp_path / "inventory.py"
    path.write_text(f"nodes = [('node1', {NODE!r})]\nrouters = [('r1', {ROUTER!r})]\n")
    return str(path)


def args_for(inventory, tmp_path, profiles="sandbox-eagle3", **more):
    argv = [inventory, "--host", "node1", "--profiles", profiles, "--reports", str(tmp_path / "reports")]
    for key, value in more.items():
        argv += ["--" + key.replace("_", "-"), str(value)]
    return argv


def test_the_own_profile_is_measured_last_and_another_engine_is_refused_naming_it():
    own, trials = ab_runner.plans("node1", NODE, ["sandbox-eagle3"])
    assert own.profile.name == "sandbox"
    assert [p.profile.name for p in trials] == ["sandbox-eagle3", "sandbox"]
    with pytest.raises(
        DeployError,
        match="baseline: its engine pins, Python differ from the node.s own profile sandbox.s \\(engine pins sglang==0.5.23 vs sglang==0.5.23\\+sandbox; Python 3.12 vs 3.11\\)",
    ):
        ab_runner.plans("node1", NODE, ["sandbox-eagle3", "baseline"])
    with pytest.raises(DeployError, match="serving group"):
        ab_runner.plans("node1", {**NODE, "serving_group": "g"}, ["sandbox"])


class FakeNode:
    """ab_runner.remote's stand-in: staging untars, detach.py start and follow answer as a
    node that ran the A/B to its end."""

    def __init__(self, cycle):
        self.cycle = cycle
        self.calls, self.staged = [], {}

    def __call__(self, name, data, command, stdin=None, show=None):
        self.calls.append(command)
        if stdin is not None:
            with tarfile.open(fileobj=io.BytesIO(stdin)) as tar:
                for member in tar.getmembers():
                    self.staged[member.name] = (tar.extractfile(member).read().decode(), member.mode)
            return 0, []
        if " start " in command:
            return 0, [json.dumps({"status": 0, "cause": None, "unit": "u", "offset": 0})]
        if " follow " in command:
            if show:
                show("ab: sandbox-eagle3: benchmark")
            end = {"status": 0, "cause": None, "state": "ended", "offset": 10, "cycle": self.cycle}
            return 0, ["ab: sandbox-eagle3: benchmark", json.dumps(end)]
        return 0, [json.dumps({"status": 0, "cause": None})]


def bench(figure, spread):
    return {"decode_tok_s": figure, "spread": spread, "ttft_p50_ms": 40.0, "ttft_p95_ms": 52.0}


CYCLE = {
    "status": 0,
    "result": "ready",
    "cause": None,
    "outcome": "ab",
    "own": "sandbox",
    "trials": [
        {"profile": "sandbox-eagle3", "bench": bench(59.1, 0.4), "speculation": {"accept_length": 1.96}}
        | {"restart_s": 6.0, "bench_s": 14.0, "cause": None},
        {"profile": "sandbox", "bench": bench(80.2, 0.3), "speculation": None}
        | {"restart_s": 6.2, "bench_s": 13.0, "cause": None},
    ],
    "home": {"serving": True, "restarted": False, "in_rotation": True, "decode_tok_s": 80.2},
    "wall_s": 41.0,
}
CYCLE["verdict"] = ab_runner.ab_bench.verdict(CYCLE["trials"])


def test_make_ab_stages_each_profile_starts_it_detached_and_reports(inventory, tmp_path, monkeypatch, capsys):
    fake = FakeNode(CYCLE)
    monkeypatch.setattr(ab_runner, "remote", fake)
    code = ab_runner.main(args_for(inventory, tmp_path, repeats=5, max_tokens="16,64"))
    assert code == status.READY
    plan_text, mode = fake.staged["plan.json"]
    plan = json.loads(plan_text)
    assert mode == 0o600
    assert [t["profile"] for t in plan["trials"]] == ["sandbox-eagle3", "sandbox"]
    for profile in ("sandbox", "sandbox-eagle3"):
        for role in ("unit", "env", "hook", "hook_pth"):
            assert f"{profile}/{role}" in fake.staged
            assert plan["trials"][0]["files"]["unit"].endswith("/sandbox-eagle3/unit")
    assert "--speculative-algorithm EAGLE3" in fake.staged["sandbox-eagle3/unit"][0]
    assert "--speculative-algorithm" not in fake.staged["sandbox/unit"][0]
    assert plan["bench"]["repeats"] == 5 and plan["bench"]["max_tokens"] == [16, 64]
    assert plan["out"].endswith("--only out") and "--router http://10.0.0.5:30000" in plan["out"]
    assert plan["back"].endswith("--only back")
    assert plan["restore"].startswith("python3 /opt/sglang-deploy/node/lastgood.py restore")
    assert plan["lock"]["path"] == "/run/sglang-deploy/sglang.lock"
    assert plan["trials"][0]["gate"].startswith(
        "python3 /opt/sglang-deploy/node/gate.py --unit sglang.service"
    )
    assert plan["home"]["profile"] == "sandbox" and plan["home"]["base"] == "http://127.0.0.1:30000"
    staged_at = plan["stage"]
    assert staged_at.startswith("/run/sglang-deploy/sglang/ab-ab-")
    assert fake.calls[0].startswith(f"umask 077 && mkdir -p {staged_at} && tar -x -C {staged_at}")
    assert (
        "detach.py start" in fake.calls[1] and f"ab.py run --plan-json {staged_at}/plan.json" in fake.calls[1]
    )
    assert "detach.py follow" in fake.calls[2] and "detach.py ack" in fake.calls[3]
    out = capsys.readouterr().out
    assert "verdict: sandbox leads sandbox-eagle3 by 21.1 tok/s (36 %), beyond the spread (±0.7)" in out
    assert "node1: ab: sandbox-eagle3: benchmark" in out
    assert "one restart + its benchmark: 19.6 s" in out
    (report,) = (tmp_path / "reports").glob("node1-*.json")
    kept = json.loads(report.read_text())
    assert kept["host"] == "node1" and kept["verdict"]["winner"] == "sandbox"
    assert kept["timing"]["profiles"] == 2 and kept["timing"]["restart_and_bench_s"] == 19.6


def test_timing_is_the_wall_per_profile_against_one_restart_and_its_benchmark():
    found = ab_runner.timing(CYCLE, 47.0)
    assert found == {
        "profiles": 2,
        "controller_s": 47.0,
        "node_s": 41.0,
        "per_profile_s": 23.5,
        "restart_and_bench_s": 19.6,
        "ratio": 1.2,
    }
    assert ab_runner.timing_line(found).endswith("19.6 s (the trials' median): 1.20x")


def test_a_node_that_cannot_be_followed_is_said_and_fails(inventory, tmp_path, monkeypatch, capsys):
    fake = FakeNode(CYCLE)

    def lost(name, data, command, stdin=None, show=None):
        if " follow " in command:
            return 255, ["ssh: connect to host 10.0.0.11 port 22: Connection refused"]
        return fake(name, data, command, stdin, show)

    monkeypatch.setattr(ab_runner, "remote", lost)
    monkeypatch.setattr(ab_runner.time, "sleep", lambda s: None)
    assert ab_runner.main(args_for(inventory, tmp_path)) == status.UNEXPECTED
    assert "lost the A/B" in capsys.readouterr().out


def test_the_report_shows_each_ab_with_its_table_and_a_plot(tmp_path):
    folder = tmp_path / "ab"
    folder.mkdir()
    (folder / "node1-2026-12-05T040000Z.json").write_text(
        json.dumps(dict(CYCLE, host="node1", stamp="2026-12-05T040000Z"))
    )
    text = ab_report.section(tmp_path)
    assert "<h2>A/B of profiles</h2>" in text
    assert "node1 · 2026-12-05T040000Z" in text
    assert "sandbox leads sandbox-eagle3 by 21.1 tok/s" in text
    assert '<img src="ab/node1-2026-12-05T040000Z.svg"' in text
    plot = (folder / "node1-2026-12-05T040000Z.svg").read_text()
    assert plot.startswith("<svg") and "sandbox-eagle3" in plot and "80.2" in plot
    assert ab_report.section(tmp_path / "none") == ""


def test_a_node_home_and_in_rotation_but_slower_than_before_fails_the_ab():
    from sglang_deploy.node import ab

    said = {"serving": True, "in_rotation": True, "decode_tok_s": 70.0, "reference": 82.0}
    said.update(tolerance=4.1, reference_of="its trial", as_before=False)
    code, cause = ab.first_failure([{"profile": "sandbox"}], said)
    assert code == status.THROUGHPUT_REGRESSION
    assert cause == "home: its own profile serves at 70.0 tok/s, not as before (82.0 ±4.1, its trial)"
    assert ab.first_failure([{"profile": "sandbox"}], dict(said, as_before=True)) == (status.READY, None)


def test_a_stop_of_the_ab_leaves_it_time_to_go_home():
    from sglang_deploy.plan.commands.service import detach_start_command
    from sglang_deploy.profile.schema import load_profile

    profile = load_profile("baseline")
    home = ab_runner.home_s(profile)
    assert home >= profile.service.timeout_stop_sec + profile.readiness.timeout_s
    command = detach_start_command("/opt/d/node", "/run/c", "sglang", "ab-1", "baseline", "true", home)
    assert command.endswith(f"--stop-timeout {home}")
    assert "--stop-timeout" not in detach_start_command("/opt/d/node", "/run/c", "sglang", "1", "p", "true")
