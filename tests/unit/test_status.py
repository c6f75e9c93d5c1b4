"""`make status` on the controller (sglang_deploy/status/): what it runs on each host, what it
makes of the answers (ssh's failures, the routers' views, verify's recorded drift), the table,
the blocks and the JSON, and its exit status. The SSH round trip is replaced by running the
host's command here, on state written by the node's own scripts (test_node_node_status.Node)."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from test_node_node_status import NEW, Node
from test_node_routers import FakeRouter, router  # noqa: F401 (fixture)

from sglang_deploy.cli import EXIT_UNREACHABLE
from sglang_deploy.node import node_status
from sglang_deploy.plan.hosts import deploy_defaults
from sglang_deploy.status import __main__ as status_cli
from sglang_deploy.status import drift, probe, render, rows, targets
from sglang_deploy.status.targets import Target
from sglang_deploy.verify.redact import Redactor
from sglang_deploy.verify.verdict import FAILED, OK, Check

NODE_DIR = Path(node_status.__file__).resolve().parent
REFUSED = "ssh: connect to host 10.0.0.12 port 22: Connection refused"
TOKEN = "hf_live_token_value_123"


def _node_data(root, address, **over):
    return {
        **deploy_defaults(),
        "profile": "sandbox",
        "ssh_hostname": address,
        "sglang_deploy_dir": str(root / "deploy"),
        "state_dir": str(root / "state"),
        "venvs_dir": str(root / "venvs"),
        "profile_overrides": {"engine": {"venv": str(root / "venv")}, "service": {"port": 30000}},
        **over,
    }


def _router_data(root, url):
    port = int(url.rsplit(":", 1)[1])
    return {
        **deploy_defaults(),
        "role": "router",
        "ssh_hostname": "10.0.0.5",
        "router_port": port,
        "router_prometheus_port": port + 1 if port < 65535 else port - 1,
        "sglang_deploy_dir": str(root / "deploy"),
    }


class LocalRunner:
    """Runs a host's remote command here (our scripts' directory is linked into the node's
    deploy directory); a host named in ``down`` fails as ssh does when it cannot connect."""

    def __init__(self, node, down=()):
        self.node, self.down, self.argvs = node, set(down), []
        (node.root / "deploy").mkdir(exist_ok=True)
        if not (node.root / "deploy" / "node").exists():
            (node.root / "deploy" / "node").symlink_to(NODE_DIR)

    def __call__(self, argv, timeout):
        self.argvs.append(argv)
        if any(f"{host}" == argv[-2] for host in self.down):
            return probe.answer_of(255, "", REFUSED + "\n", 0.01)
        env = {**os.environ, "PATH": f"{self.node.systemctl.dir}{os.pathsep}{os.environ['PATH']}"}
        command = argv[-1].replace("python3", sys.executable, 1)
        done = subprocess.run(command, shell=True, capture_output=True, text=True, env=env, timeout=timeout)
        return probe.answer_of(done.returncode, done.stdout, done.stderr, 0.05)


@pytest.fixture
def fleet(tmp_path, fake_systemctl, router):  # noqa: F811
    """node1 deployed and in its router; node2 down; the router at ``router``."""
    node = Node(tmp_path, fake_systemctl)
    node.venv(NEW)
    node.switch_to(NEW)
    node.save_last_good("sandbox")
    fake_systemctl.unit(LoadState="loaded", ActiveState="active", SubState="running", MainPID=0)
    FakeRouter.workers = {"http://10.0.0.11:30000": {"id": "a", "is_healthy": True}}
    hosts = [
        ("node1", _node_data(tmp_path, "10.0.0.11")),
        ("node2", _node_data(tmp_path, "10.0.0.12")),
        ("router1", _router_data(tmp_path, router)),
    ]
    return hosts, LocalRunner(node, down={"10.0.0.12"})


def _verify_json(path, host, check):
    path.write_text(json.dumps([{"host": host, "profile": "sandbox", "checks": [check.as_json()]}]))
    return path


def test_one_command_per_host_and_what_they_answered(fleet, tmp_path):
    hosts, runner = fleet
    report = _verify_json(
        tmp_path / "verify.json", "node1", Check("drift", OK, "3 distributions, 812 files match")
    )
    nodes, routers, _ = status_cli.collect(hosts, runner=runner, drift_file=report)
    assert len(runner.argvs) == 3  # one round trip per host
    first, down = nodes
    assert first["answered"] and first["unit"]["active"] == "active" and first["engine"]["link"] == NEW
    assert first["last_good"]["profile"] == "sandbox" and first["profile"] == "sandbox"
    assert first["rotation"] == {"state": "in", "healthy_in": 1, "routers": {"router1": "healthy"}}
    assert first["drift"]["state"] == OK and first["drift"]["source"] == "make verify"
    assert first["passport"] is None and first["decode"] is None
    assert not down["answered"] and down["error"] == f"unreachable: {REFUSED}"
    assert down["drift"] == {"state": "not recorded", "source": "make verify", "age_s": None}
    assert routers[0]["answered"] and routers[0]["workers"] == 1 and routers[0]["healthy"] == 1
    assert rows.unanswered(nodes, routers) == [("node2", f"unreachable: {REFUSED}")]


def test_the_unreachable_host_is_a_row_saying_why_and_the_exit_status_says_so(
    fleet, tmp_path, monkeypatch, capsys
):
    hosts, runner = fleet
    inventory = tmp_path / "inventory.py"
    inventory.write_text(f"hosts = {[(name, {k: v for k, v in data.items()}) for name, data in hosts]!r}\n")
    monkeypatch.setattr(probe, "ask", runner)
    monkeypatch.setattr(drift, "VERIFY_REPORT", tmp_path / "none.json")
    monkeypatch.setenv("COLUMNS", "400")
    assert status_cli.main([str(inventory)]) == EXIT_UNREACHABLE
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["host", "unit", "profile"]
    assert out[1].startswith("node1 ") and " active " in out[1] and NEW in out[1] and "in (1/1)" in out[1]
    assert out[2].split(None, 1) == ["node2", f"unreachable: {REFUSED}"]
    assert "router router1 (http://10.0.0.5:" in out[3] and "1/1 workers healthy" in out[3]
    assert out[-1] == "1 of 3 host(s) gave no status"

    assert status_cli.main([str(inventory), "--json"]) == EXIT_UNREACHABLE
    body = json.loads(capsys.readouterr().out)
    assert [n["host"] for n in body["nodes"]] == ["node1", "node2"] and body["took_s"] >= 0
    assert body["nodes"][1]["error"] == f"unreachable: {REFUSED}" and body["routers"][0]["host"] == "router1"


def test_every_host_answering_is_exit_status_0(fleet, monkeypatch, capsys, tmp_path):
    hosts, runner = fleet
    runner.down = set()
    inventory = tmp_path / "inventory.py"
    inventory.write_text(f"hosts = {hosts[:1] + hosts[2:]!r}\n")
    monkeypatch.setattr(probe, "ask", runner)
    assert status_cli.main([str(inventory), "--json"]) == 0


# -- What ssh and the script answered --------------------------------------------------------


@pytest.mark.parametrize(
    "code, stdout, stderr, says",
    [
        (255, "", f"{REFUSED}\n", f"unreachable: {REFUSED}"),
        (255, "", "", "unreachable: ssh failed"),
        (
            2,
            "",
            "python3: can't open file '/opt/sglang-deploy/node/node_status.py': [Errno 2] No such file or directory\n",
            "no node_status.py on the host (a deploy of this version uploads it)",
        ),
        (1, "", "sudo: a password is required\n", "sudo refused: sudo: a password is required"),
        (1, "Traceback\n", "KeyError: 'x'\n", "no result line (exit 1): KeyError: 'x'"),
        (
            1,
            '{"status": 1, "result": "UNEXPECTED", "cause": "router http://127.0.0.1:30000: unreachable (refused)"}\n',
            "",
            "UNEXPECTED: router http://127.0.0.1:30000: unreachable (refused)",
        ),
    ],
)
def test_why_a_host_gave_no_status(code, stdout, stderr, says):
    answer = probe.answer_of(code, stdout, stderr)
    assert not answer.answered and answer.error == says


def test_a_host_that_does_not_answer_in_time_is_unreachable():
    answer = probe.ask([sys.executable, "-c", "import time; time.sleep(5)"], timeout=0.3)
    assert answer.error == "unreachable: no answer within 0.3s"
    assert probe.ask(["/nonexistent/ssh"], timeout=1).error.startswith("unreachable: /nonexistent/ssh: ")


def test_every_host_is_asked_at_once():
    import threading

    barrier = threading.Barrier(8, timeout=5)

    def runner(argv, timeout):
        barrier.wait()  # fails unless all eight are in flight together
        return probe.answer_of(0, '{"status": 0}\n', "")

    found = [Target(f"n{i}", "node", argv=("ssh", f"n{i}", "x")) for i in range(8)]
    found.append(Target("bad", "node", error="not planned: profile: no profile 'nope'"))
    asked, answers = probe.ask_all(iter(found), 1.0, runner)
    assert asked == found
    assert all(answers[f"n{i}"].answered for i in range(8))
    assert answers["bad"].error == "not planned: profile: no profile 'nope'"


# -- What is asked of each host ---------------------------------------------------------------


def test_what_each_host_is_asked(tmp_path):
    hosts = [
        ("g0", _node_data(tmp_path, "10.0.0.21", serving_group="g", node_rank=0)),
        ("g1", _node_data(tmp_path, "10.0.0.22", serving_group="g", node_rank=1, sudo=True, _sudo=True)),
        ("bad", _node_data(tmp_path, "10.0.0.23", profile="no-such-profile")),
        ("r1", {**deploy_defaults(), "role": "router", "ssh_hostname": "10.0.0.5"}),
    ]
    for _, data in hosts[:2]:
        data["profile_overrides"] = {**data["profile_overrides"], "server_args": {"nnodes": 2}}
    found = {t.name: t for t in targets.targets(hosts)}
    lead, follower = found["g0"], found["g1"]
    assert lead.worker_url == "http://10.0.0.21:30000" and lead.group == "g rank 0 of 2"
    assert follower.worker_url is None and follower.group == "g rank 1 of 2"
    assert lead.argv[-2] == "10.0.0.21" and "ConnectTimeout=5" in lead.argv
    assert lead.argv[-1].startswith(f"python3 {tmp_path}/deploy/node/node_status.py --json node ")
    assert f"--passport {tmp_path}/state/passport.json" in lead.argv[-1]
    assert follower.argv[-1].startswith("sudo -n -H -- python3 ")  # root's files, as the deploy reads them
    assert not found["bad"].argv and found["bad"].error.startswith("not planned: ")
    assert found["r1"].argv[-1].endswith("node_status.py --json router --url http://127.0.0.1:30000")
    assert found["r1"].url == "http://10.0.0.5:30000"
    assert list(found) == ["r1", "g0", "g1", "bad"]  # routers first, then the nodes in inventory order
    assert [t.name for t in targets.targets(hosts, limit={"g1"})] == ["r1", "g1"]


def test_a_node_bound_to_one_address_is_asked_and_listed_there(tmp_path):
    """service.host 127.0.0.2: node_status.py asks the server there, and the node's row looks it
    up in the routers' lists at that address (as the routers' units list it)."""
    data = _node_data(tmp_path, "127.0.0.11")
    data["profile_overrides"]["service"]["host"] = "127.0.0.2"
    (found,) = targets.targets([("n1", data)])
    command = shlex.split(found.argv[-1])
    assert command[command.index("--host") + 1] == "127.0.0.2"
    assert found.worker_url == "http://127.0.0.2:30000"


# -- In rotation -------------------------------------------------------------------------------


def _answer(workers):
    return probe.Answer({"status": 0, "router": {"workers": workers}})


@pytest.mark.parametrize(
    "views, state",
    [
        ({"r1": {"http://a:1": "healthy"}, "r2": {"http://a:1": "healthy"}}, "in"),
        ({"r1": {"http://a:1": "healthy"}, "r2": {}}, "partly"),
        ({"r1": {"http://a:1": "unhealthy"}, "r2": {}}, "out"),
        ({"r1": None, "r2": None}, "unknown"),
        ({"r1": None, "r2": {"http://a:1": "healthy"}}, "partly"),
        ({}, "no routers"),
    ],
)
def test_in_rotation_means_healthy_in_every_router(views, state):
    assert rows.rotation(Target("n", "node", worker_url="http://a:1/"), views)["state"] == state


def test_a_routers_view_reads_its_workers():
    view = rows.router_view(_answer({"http://a:1/": {"healthy": True}, "http://b:1": {"healthy": False}}))
    assert view == {"http://a:1": "healthy", "http://b:1": "unhealthy"}
    assert rows.router_view(probe.Answer(None, "unreachable: x")) is None
    follower = Target("f", "node", worker_url=None)
    assert rows.rotation(follower, {"r1": view})["state"] == "follower"


# -- Drift as verify recorded it ---------------------------------------------------------------


def test_drift_is_what_verify_last_recorded_with_its_age(tmp_path):
    report = _verify_json(tmp_path / "verify.json", "node1", Check("drift", FAILED, "sglang: 1 modified"))
    os.utime(report, (1000.0, 1000.0))
    assert drift.recorded(report, now=4600.0) == {
        "node1": {"state": FAILED, "detail": "sglang: 1 modified", "source": "make verify", "age_s": 3600.0}
    }
    assert drift.recorded(tmp_path / "missing.json") == {}
    (tmp_path / "torn.json").write_text("[{")
    assert drift.recorded(tmp_path / "torn.json") == {}


# -- The screen and the JSON -------------------------------------------------------------------


def _rows(error_text="HTTP 503"):
    served = {
        "status": 0,
        "unit": {"load": "loaded", "active": "active", "sub": "running", "main_pid": 7, "since_s": 60.0},
        "ping": True,
        "engine": {"link": NEW, "pending": None, "running": NEW, "built_at": 1.0},
        "last_good": {
            "profile": "sandbox",
            "saved_at": "2026-12-01 10:00:00 UTC",
            "age_s": 7200.0,
            "venv": NEW,
        },
        "decode": {
            "profile": "sandbox",
            "decode_tok_s": 82.04,
            "change_pct": 1.0,
            "age_s": 7200.0,
            "baseline": {"profile": "sandbox", "decode_tok_s": 81.2, "time": "t"},
            "error": None,
        },
        "passport": {"age_s": 86400.0 * 2, "passport": {"gpus": [{}] * 8}},
    }
    failed = dict(
        served,
        unit={"load": "loaded", "active": "failed", "sub": "failed", "main_pid": 0},
        decode={"profile": "sandbox", "decode_tok_s": None, "error": error_text, "age_s": 30.0},
        passport=None,
        last_good=None,
        ping=False,
    )
    answers = {
        "node1": probe.Answer(served),
        "node2": probe.Answer(failed),
        "node3": probe.Answer(None, f"unreachable: {REFUSED}"),
        "r1": _answer({"http://10.0.0.11:30000": {"healthy": True}}),
    }
    found = [
        Target("node1", "node", argv=("x",), profile="sandbox", worker_url="http://10.0.0.11:30000"),
        Target(
            "node2",
            "node",
            argv=("x",),
            profile="sandbox",
            worker_url="http://10.0.0.12:30000",
            group="g rank 0 of 2",
        ),
        Target("node3", "node", argv=("x",), profile="sandbox", worker_url="http://10.0.0.13:30000"),
        Target("r1", "router", argv=("x",), url="http://10.0.0.5:30000"),
    ]
    recorded = {
        "node1": {"state": "ok", "detail": "812 files match", "source": "make verify", "age_s": 600.0}
    }
    return rows.rows(found, answers, recorded)


def test_the_table_when_it_fits():
    nodes, routers = _rows()
    lines = render.screen(nodes, routers, 400, Redactor())
    header, one, two, three = lines[:4]
    assert header.split() == [
        "host",
        "unit",
        "profile",
        "engine",
        "last",
        "good",
        "rotation",
        "decode",
        "group",
        "drift",
        "passport",
    ]
    for cell in (
        "active",
        NEW,
        "sandbox, 2h ago",
        "in (1/1)",
        "82.0 tok/s, 2h ago",
        "ok (10m ago)",
        "present, 2d ago, 8 GPU(s)",
    ):
        assert cell in one
    for cell in (
        "failed",
        "none",
        "out (0/1)",
        "not measured, 30s ago",
        "g rank 0 of 2",
        "not recorded",
    ):
        assert cell in two
    assert two.rstrip().endswith("-")  # no passport
    assert three.split(None, 1) == ["node3", f"unreachable: {REFUSED}"]
    assert one.index("present") == header.index("passport")  # the columns line up
    assert lines[4] == "router r1 (http://10.0.0.5:30000): /health not 200, 1/1 workers healthy"
    assert lines[-2] == render.DRIFT_NOTE and lines[-1] == "1 of 4 host(s) gave no status"


def test_blocks_where_the_table_does_not_fit():
    nodes, routers = _rows()
    lines = render.screen(nodes, routers, 80, Redactor())
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    assert lines[0] == "node1  active  (profile sandbox)"
    assert "  engine     " + NEW in lines
    assert "  rotation   in: r1 healthy" in lines
    assert any(
        line.startswith("  decode     82.0 tok/s (+1% vs baseline 81.2), sandbox, 2h ago") for line in lines
    )
    assert any(line.startswith("  drift      ok (10m ago): 812 files match") for line in lines)
    assert any(line.startswith("  last good  sandbox, 2h ago (2026-12-01 10:00:00 UTC)") for line in lines)
    assert f"node3  unreachable: {REFUSED}" in lines
    assert lines[lines.index("node2  failed  (profile sandbox)") - 1] == ""  # a blank line between blocks


def test_a_part_the_node_could_not_read_says_so():
    nodes, routers = _rows()
    nodes[0].update(
        engine={"unreadable": "PermissionError: x"}, last_good={"unreadable": "JSONDecodeError: y"}
    )
    nodes[0]["unit"] = {"unreadable": "SystemdError: Failed to connect to bus"}
    one = render.screen(nodes, routers, 400, Redactor())[1]
    assert one.split()[:5] == ["node1", "unknown", "sandbox", "unreadable", "unreadable"]


def test_wide_is_the_table_with_every_detail_whatever_the_width():
    nodes, routers = _rows()
    lines = render.screen(nodes, routers, 80, Redactor(), wide=True)
    assert (
        lines[0].startswith("host ")
        and "in: r1 healthy" in lines[1]
        and "ok (10m ago): 812 files match" in lines[1]
    )


def test_the_json_is_the_rows_and_no_secret_reaches_either():
    nodes, routers = _rows(error_text=f"HTTP 401: bad token {TOKEN}")
    secrets = Redactor(names=["HF_TOKEN"], values=[TOKEN])
    body = render.as_json(nodes, routers, secrets, took_s=0.4)
    assert TOKEN not in body and "***" in body
    found = json.loads(body)
    assert found["took_s"] == 0.4 and [n["host"] for n in found["nodes"]] == ["node1", "node2", "node3"]
    assert (
        found["nodes"][0]["engine"]["running"] == NEW
        and found["routers"][0]["url"] == "http://10.0.0.5:30000"
    )
    for width, wide in ((400, False), (80, False), (80, True)):
        screen = "\n".join(render.screen(nodes, routers, width, secrets, wide))
        assert TOKEN not in screen


@pytest.mark.parametrize(
    "seconds, says", [(None, "?"), (5, "5s"), (300, "5m"), (7200, "2h"), (3 * 86400, "3d")]
)
def test_ages(seconds, says):
    assert render.age(seconds) == says


def test_a_speculating_nodes_accept_length_is_in_its_decode_cell():
    nodes, routers = _rows()
    nodes[0]["decode"] = dict(
        nodes[0]["decode"],
        speculation={"algorithm": "EAGLE3", "steps": 2, "accept_length": 1.9, "accept_rate": 0.45},
    )
    table = render.screen(nodes, routers, 400, Redactor())
    assert any("82.0 tok/s, accept length 1.90, 2h ago" in line for line in table)
    blocks = render.screen(nodes, routers, 80, Redactor())
    said = " ".join(
        " ".join(line.split()) for line in blocks[blocks.index("  rotation   in: r1 healthy") + 1 :][:2]
    )
    assert said.startswith("decode 82.0 tok/s (+1% vs baseline 81.2), EAGLE3 accept length 1.90 (rate 0.45)")
