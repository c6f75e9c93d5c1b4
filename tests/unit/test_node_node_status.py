"""node/node_status.py on its own, on state directories its writers wrote: the engine venvs
(venvs.py mark and point), the last known good (lastgood.py save), the decode checks
(decode_check.py against a streaming server), a unit behind a fake systemctl, a /proc whose
process runs one of the venvs, and a router answering like smg (test_node_routers.FakeRouter)."""

import json
import os
import shlex
import subprocess
import sys
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from test_decode_check import _Streamer
from test_node_routers import FakeRouter, router  # noqa: F401 (fixture)

from sglang_deploy.node import decode_check, lastgood, node_status, venvs
from sglang_deploy.node.lib import result, status
from sglang_deploy.plan.commands import node_status_command, router_status_command
from sglang_deploy.plan.commands.unit import NodeScripts
from sglang_deploy.profile.schema import load_profile

NODE_DIR = Path(node_status.__file__).resolve().parent
OLD, NEW = "sglang-0.5.23+sandbox-21ee92086ccf", "sglang-0.5.24+sandbox-0b1c2d3e4f5a"


@pytest.fixture
def server():
    """A server answering /ping (any GET: 200) and streaming chat completions at 100 tok/s."""
    handler = type("Handler", (_Streamer,), {"seen": [], "rate": 100.0, "version": "0.5.23+sandbox"})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


class Node:
    """A node's state under ``root``, written by the deploy's own scripts."""

    def __init__(self, root, systemctl):
        self.root, self.systemctl = root, systemctl
        self.venvs = root / "venvs"
        self.link = root / "venv"
        self.last_good = root / "state" / "sglang" / "last-good"
        self.history = root / "state" / "sglang" / "throughput.jsonl"
        self.passport = root / "state" / node_status.PASSPORT
        self.proc = root / "proc"
        self.env_file = root / "sglang.env"

    def venv(self, name):
        path = self.venvs / name
        (path / "bin").mkdir(parents=True)
        (path / "bin" / "python").symlink_to(sys.executable)  # lastgood.save asks it its versions
        venvs.mark(str(path))
        return path

    def switch_to(self, name):
        venvs.point(str(self.link), str(self.venvs / name))

    def save_last_good(self, profile):
        self.env_file.write_text("HF_TOKEN=hf_secret_value\n")
        code = lastgood.save(
            str(self.last_good), profile, str(self.link), {"env": str(self.env_file)}, ["pip"], None
        )
        assert code == status.READY

    def decode_check(self, port, profile):
        argv = ["--port", str(port), "--served-name", "m", "--profile", profile]
        argv += ["--history", str(self.history), "--last-good-dir", str(self.last_good)]
        argv += ["--requests", "2", "--warmup", "0", "--max-tokens", "11", "--timeout", "10"]
        assert decode_check.main(argv) == status.READY

    def runs(self, pid, name):
        (self.proc / str(pid)).mkdir(parents=True)
        (self.proc / str(pid) / "exe").symlink_to(self.venvs / name / "bin" / "python3.11")

    def args(self, port, *extra):
        return [
            "--json",
            "node",
            "--unit",
            "sglang.service",
            "--port",
            str(port),
            "--venv-link",
            str(self.link),
            "--venvs-dir",
            str(self.venvs),
            "--last-good-dir",
            str(self.last_good),
            "--history",
            str(self.history),
            "--passport",
            str(self.passport),
            "--systemctl",
            str(self.systemctl.path),
            "--proc",
            str(self.proc),
            *extra,
        ]


def _status(argv, capsys):
    code = node_status.main(argv)
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1, out  # --json: the result line only
    found = result.parse(out)
    assert found["status"] == code
    return found


@pytest.fixture
def node(tmp_path, fake_systemctl):
    return Node(tmp_path, fake_systemctl)


def _served(node, server, capsys):
    """A node that serves: deployed old, then new (staged again), checked, its server on new."""
    node.venv(OLD), node.venv(NEW)
    node.switch_to(NEW)
    node.save_last_good("sandbox")
    node.decode_check(server, "sandbox")
    os.symlink(str(node.venvs / OLD), str(node.link) + venvs.PENDING)
    node.runs(4242, NEW)
    node.systemctl.unit(
        LoadState="loaded",
        ActiveState="active",
        SubState="running",
        MainPID=4242,
        ActiveEnterTimestampMonotonic=1,
    )
    capsys.readouterr()


def test_a_serving_node_in_one_answer(node, server, capsys):
    _served(node, server, capsys)
    node.passport.write_text(json.dumps({"gpus": [{"name": "NVIDIA H200"}] * 8}))
    found = _status(node.args(server), capsys)
    assert found["unit"]["active"] == "active" and found["unit"]["main_pid"] == 4242
    assert found["unit"]["since_s"] > 0 and found["ping"] is True
    assert found["engine"]["link"] == NEW and found["engine"]["running"] == NEW
    assert found["engine"]["pending"] == OLD and found["engine"]["built_at"] > 0
    good = found["last_good"]
    assert good["profile"] == "sandbox" and good["venv"] == NEW and 0 <= good["age_s"] < 60
    assert good["saved_at"]
    decode = found["decode"]
    assert decode["profile"] == "sandbox" and decode["accepted"] and 30 < decode["decode_tok_s"] < 200
    assert decode["error"] is None and 0 <= decode["age_s"] < 60
    assert found["passport"]["passport"]["gpus"][0]["name"] == "NVIDIA H200"
    assert "hf_secret_value" not in json.dumps(found)  # the env file is never read


def test_a_server_bound_to_one_address_is_asked_there(node, capsys):
    """service.host 127.0.0.2 (127.0.0.1 refuses): `make status`'s command line as the controller
    builds it (NodeScripts.node_status, given service.probe_host) finds it answering /ping."""
    httpd = ThreadingHTTPServer(("127.0.0.2", 0), type("Handler", (_Streamer,), {"seen": []}))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    port = httpd.server_address[1]
    node.systemctl.unit(LoadState="loaded", ActiveState="active", SubState="running", MainPID=0)
    overrides = {"service": {"host": "127.0.0.2", "port": port}, "engine": {"venv": str(node.link)}}
    scripts = NodeScripts(
        str(NODE_DIR),
        "sglang.service",
        load_profile("sandbox", overrides=overrides),
        {},
        str(node.last_good),
        "",
        "",
    )
    argv = shlex.split(scripts.node_status(str(node.venvs), str(node.passport)))[2:]
    try:
        found = _status(argv + ["--systemctl", str(node.systemctl.path), "--proc", str(node.proc)], capsys)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert found["ping"] is True and found["unit"]["active"] == "active"


def test_a_node_never_deployed_answers_with_nothing_found(node, capsys):
    node.systemctl.unit(LoadState="not-found", ActiveState="inactive", SubState="dead", MainPID=0)
    found = _status(node.args(9), capsys)
    assert found["status"] == status.READY
    assert found["unit"] == {
        "load": "not-found",
        "active": "inactive",
        "sub": "dead",
        "main_pid": 0,
        "since_s": None,
    }
    assert found["ping"] is False
    assert found["engine"] == {"link": None, "pending": None, "running": None, "built_at": None}
    assert found["last_good"] is None and found["decode"] is None and found["passport"] is None


def test_what_cannot_be_read_says_why_and_the_rest_still_comes(node, server, capsys):
    _served(node, server, capsys)
    node.passport.write_text("{not json")
    (node.last_good / "manifest.json").write_text("{torn")
    node.systemctl.path.write_text("#!/bin/sh\necho 'Failed to connect to bus' >&2\nexit 1\n")
    found = _status(node.args(server), capsys)
    assert "Failed to connect to bus" in found["unit"]["unreadable"]
    assert found["passport"]["unreadable"].startswith("JSONDecodeError")
    assert found["last_good"]["unreadable"].startswith("JSONDecodeError")
    assert found["decode"]["profile"] == "sandbox" and found["engine"]["link"] == NEW
    assert found["engine"]["running"] is None  # no main PID known: nothing claimed


def test_a_torn_last_decode_line_is_skipped_and_a_long_history_is_read_from_its_tail(node, capsys):
    node.systemctl.unit(LoadState="loaded", ActiveState="failed", SubState="failed", MainPID=0)
    node.history.parent.mkdir(parents=True)
    old = {"time": "2026-11-01T00:00:00Z", "profile": "old", "decode_tok_s": 1.0, "accepted": True}
    last = {"time": "2026-12-01T10:00:00Z", "profile": "sandbox", "decode_tok_s": None, "error": "HTTP 503"}
    lines = [json.dumps(old)] * 3000 + [json.dumps(last), '{"time": "2026-12-01T11:0']
    node.history.write_text("\n".join(lines))
    assert node.history.stat().st_size > node_status.HISTORY_TAIL
    found = node_status.last_decode(str(node.history), now=1796119200.0 + 90)  # 2026-12-01 10:01:30 UTC
    assert found["profile"] == "sandbox" and found["error"] == "HTTP 503" and found["age_s"] == 90.0
    assert found["decode_tok_s"] is None


def test_a_last_good_left_between_its_renames_is_still_found(node, server, capsys):
    _served(node, server, capsys)
    os.rename(node.last_good, str(node.last_good) + ".old")  # a save killed between its renames
    assert node_status.last_good(str(node.last_good), now=0.0)["profile"] == "sandbox"


def test_the_router_and_its_workers(router, capsys):  # noqa: F811
    found = _status(["--json", "router", "--url", router], capsys)
    assert found["router"]["health"] is True
    workers = found["router"]["workers"]
    seen = {url: {key: w[key] for key in ("id", "healthy", "load", "state")} for url, w in workers.items()}
    assert seen == {
        "http://10.0.0.11:30000": {"id": "a", "healthy": True, "load": 0, "state": "ready"},
        "http://10.0.0.12:30000": {"id": "b", "healthy": False, "load": 0, "state": "not_ready"},
    }


def test_a_router_that_does_not_answer_is_named(capsys):
    found = _status(["--json", "router", "--url", "http://127.0.0.1:9"], capsys)
    assert found["status"] == status.UNEXPECTED
    assert found["cause"].startswith("router http://127.0.0.1:9: unreachable")


def test_the_command_lines_run_the_script_as_a_node_does(node, router, tmp_path):  # noqa: F811
    """The builder's command lines, run with the node's interpreter from our scripts' directory."""
    node.systemctl.unit(LoadState="loaded", ActiveState="active", SubState="running", MainPID=0)
    env = {**os.environ, "PATH": f"{node.systemctl.dir}{os.pathsep}{os.environ['PATH']}"}
    command = node_status_command(
        str(NODE_DIR),
        "sglang.service",
        9,
        str(node.link),
        str(node.venvs),
        str(node.last_good),
        str(node.history),
        str(node.passport),
    )
    for line in (command, router_status_command(str(NODE_DIR), router)):
        done = subprocess.run(
            line.replace("python3", sys.executable, 1), shell=True, capture_output=True, text=True, env=env
        )
        assert done.returncode == 0, done.stderr
        assert len(done.stdout.splitlines()) == 1 and result.parse(done.stdout.splitlines())["status"] == 0
