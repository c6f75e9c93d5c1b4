"""node/ab.py, the A/B of serving profiles on a node, against local stand-in servers: each
trial's files installed, restarted, gated and benchmarked; the node's own profile back and in
rotation at the end, after a trial that fails its gate, after SIGTERM, and when the controller
following it dies. Its restart, gate and rotation are small scripts here (the unit a stand-in's
argv, the router a state file); its restore is lastgood.py's own. And lib/ab_bench.py's figures,
verdict and table."""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from test_standin_server import STANDIN, TINY_CONFIG, free_port

from sglang_deploy.node.lib import ab_bench, result, status
from sglang_deploy.node.lib import last_good_record as record

NODE = Path(__file__).resolve().parents[2] / "sglang_deploy" / "node"
RATE = "200"

# The unit file is the stand-in's extra argv (JSON), the env file its variables; the server's
# process group is in pid. Kills the old one, starts the new one.
RESTART = r"""
import json, os, signal, socket, subprocess, sys, time
d, port, model = sys.argv[1], sys.argv[2], sys.argv[3]
env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_STANDIN_")}
for line in open(os.path.join(d, "env")):
    key, _, value = line.strip().partition("=")
    if key:
        env[key] = value
env["PYTHONPATH"] = sys.argv[4]
try:
    os.killpg(int(open(os.path.join(d, "pid")).read()), signal.SIGKILL)
except (OSError, ValueError):
    pass
for _ in range(100):
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", int(port))) != 0:
            break
    time.sleep(0.05)
argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", model, "--served-model-name",
        "tiny-standin", "--port", port, "--tp-size", "1"] + json.load(open(os.path.join(d, "unit")))
with open(os.path.join(d, "server.log"), "ab") as log:
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
open(os.path.join(d, "pid"), "w").write(str(proc.pid))
print(json.dumps({"status": 0, "cause": None}))
"""

GATE = r"""
import json, os, sys, time, urllib.request
d, port = sys.argv[1], sys.argv[2]
pid = int(open(os.path.join(d, "pid")).read())
deadline = time.time() + 30
while time.time() < deadline:
    try:
        dead = open("/proc/%d/stat" % pid).read().rsplit(") ", 1)[1].startswith("Z")
    except OSError:
        dead = True
    if dead:
        last = open(os.path.join(d, "server.log")).read().strip().splitlines()[-1:]
        print(json.dumps({"status": 3, "cause": "failed: the server exited: %s" % (last[0] if last else "?")}))
        sys.exit(3)
    try:
        if urllib.request.urlopen("http://127.0.0.1:%s/ping" % port, timeout=1).status == 200:
            print(json.dumps({"status": 0, "cause": None}))
            sys.exit(0)
    except OSError:
        pass
    time.sleep(0.05)
print(json.dumps({"status": 4, "cause": "timeout"}))
sys.exit(4)
"""

ROTATION = r"""
import json, os, sys
d, half = sys.argv[1], sys.argv[2]
open(os.path.join(d, "rotation"), "w").write(half)
with open(os.path.join(d, "rotation.log"), "a") as f:
    f.write(half + "\n")
print(json.dumps({"status": 0, "cause": None, "outcome": half, "rotation": {"routers": ["r1"]}}))
"""


class Node:
    """A node's files as ab.py sees them: the installed unit and env file, their last known
    good record, the server, the rotation state; and every profile's staged files."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.dir = tmp_path / "node"
        self.dir.mkdir()
        self.port = str(free_port())
        self.model = tmp_path / "tiny-standin"
        self.model.mkdir()
        (self.model / "config.json").write_text(json.dumps(TINY_CONFIG))
        self.bin = tmp_path / "fakebin"
        self.bin.mkdir()
        (self.bin / "systemctl").write_text("#!/bin/sh\nexit 0\n")
        (self.bin / "systemctl").chmod(0o755)
        for name, text in (("restart.py", RESTART), ("gate.py", GATE), ("rotation.py", ROTATION)):
            (tmp_path / name).write_text(text)
        self.venv = tmp_path / "venv"
        (self.venv / "bin").mkdir(parents=True)
        (self.venv / "bin" / "python").symlink_to(sys.executable)
        self.last_good = tmp_path / "last-good"
        self.stage = tmp_path / "stage"
        self.stage.mkdir()
        self.env = dict(os.environ, PATH="%s:%s" % (self.bin, os.environ["PATH"]))
        self.env.pop(result.RESULT_FILE_VAR, None)

    def files(self, name, args, rate=RATE, env=()):
        """A profile's staged unit and env file."""
        folder = self.stage / name
        folder.mkdir()
        (folder / "unit").write_text(json.dumps(args))
        lines = ["SGLANG_STANDIN_TOKENS_PER_SECOND=%s" % rate, "SGLANG_STANDIN_LOAD_SECONDS=0.2"]
        lines += ["SGLANG_STANDIN_WARMUP_SECONDS=0.1", *env]
        (folder / "env").write_text("\n".join(lines) + "\n")
        return {"unit": str(folder / "unit"), "env": str(folder / "env")}

    def deploy(self, name, args=()):
        """The node's own profile installed, recorded as its last known good, serving."""
        staged = self.files(name + "-installed", list(args))
        entries = {}
        self.last_good.mkdir()
        for role, path in staged.items():
            target = self.dir / role
            target.write_bytes(Path(path).read_bytes())
            target.chmod(0o600)
            (self.last_good / role).write_bytes(target.read_bytes())
            entries[role] = {"path": str(target), "mode": 0o600, "sha256": record.sha256(str(target))}
        manifest = {
            "profile": name,
            "saved_at": "now",
            "venv": str(self.venv),
            "venv_target": str(self.venv),
            "files": entries,
            "wheels_dir": None,
            "engine": {},
            "models": {},
        }
        (self.last_good / record.MANIFEST).write_text(json.dumps(manifest))
        ok, _, cause = self.run_script(self.restart())
        assert ok, cause
        assert self.run_script(self.gate())[0], self.log()

    def restart(self):
        return "%s %s %s %s %s %s" % (
            sys.executable,
            self.tmp / "restart.py",
            self.dir,
            self.port,
            self.model,
            STANDIN,
        )

    def gate(self):
        return "%s %s %s %s" % (sys.executable, self.tmp / "gate.py", self.dir, self.port)

    def run_script(self, command):
        done = subprocess.run(command, shell=True, capture_output=True, text=True, env=self.env)
        return done.returncode == 0, result.parse(done.stdout.splitlines()), done.stderr

    def entry(self, name, files):
        return {
            "profile": name,
            "files": files,
            "restart": self.restart(),
            "gate": self.gate(),
            "base": "http://127.0.0.1:%s" % self.port,
            "served_name": "tiny-standin",
        }

    def plan(self, own, trials, repeats=3):
        plan = {
            "own": own,
            "stage": str(self.stage),
            "last_good_dir": str(self.last_good),
            "history": str(self.tmp / "throughput.jsonl"),
            "result_json": str(self.tmp / "state" / "ab" / "result.json"),
            "lock": {"path": str(self.tmp / "sglang.lock"), "wait": 5, "holder": "test"},
            "out": "%s %s %s out" % (sys.executable, self.tmp / "rotation.py", self.dir),
            "back": "%s %s %s in" % (sys.executable, self.tmp / "rotation.py", self.dir),
            "restore": "%s %s restore --dir %s" % (sys.executable, NODE / "lastgood.py", self.last_good),
            "reload": "systemctl daemon-reload",
            "bench": {
                "prompts": ["Go.", "Say more."],
                "max_tokens": [12, 24],
                "repeats": repeats,
                "warmup": 1,
                "timeout": 30,
            },
            "trials": trials,
            "home": self.entry(own, {}),
        }
        path = self.stage / "plan.json"
        path.write_text(json.dumps(plan))
        return path

    def ab_argv(self, plan):
        return [sys.executable, str(NODE / "ab.py"), "run", "--plan-json", str(plan)]

    def pid(self):
        return int((self.dir / "pid").read_text())

    def log(self):
        path = self.dir / "server.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def serving(self):
        try:
            return urllib.request.urlopen("http://127.0.0.1:%s/ping" % self.port, timeout=2).status == 200
        except OSError:
            return False

    def home(self, own_args=()):
        """The installed files are the record's, the server runs them and is in rotation."""
        manifest = record.load(str(self.last_good))
        for entry in manifest["files"].values():
            assert record.sha256(entry["path"]) == entry["sha256"], entry["path"]
        assert self.serving(), self.log()
        argv = Path("/proc/%d/cmdline" % self.pid()).read_bytes().split(b"\0")
        assert b"--speculative-algorithm" not in argv
        assert (self.dir / "rotation").read_text() == "in"

    def stop(self):
        try:
            os.killpg(self.pid(), signal.SIGKILL)
        except (OSError, ValueError):
            pass


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path)
    yield n
    n.stop()


def eagle3(node, steps=2):
    return [
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        str(node.model),
        "--speculative-num-steps",
        str(steps),
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        str(steps + 1),
    ]


def run_ab(node, plan):
    done = subprocess.run(node.ab_argv(plan), capture_output=True, text=True, env=node.env, timeout=240)
    found = result.parse(done.stdout.splitlines())
    assert found is not None, done.stdout[-3000:] + done.stderr[-3000:]
    return found, done.stdout


def test_ab_ranks_the_baseline_first_and_the_node_ends_on_its_own_profile(node):
    node.deploy("sandbox")
    plan = node.plan(
        "sandbox",
        [
            node.entry("sandbox", node.files("sandbox", [])),
            node.entry("sandbox-eagle3", node.files("sandbox-eagle3", eagle3(node))),
        ],
    )
    found, out = run_ab(node, plan)
    assert found["status"] == status.READY, out[-3000:]
    rows = {row["profile"]: row for row in found["trials"]}
    assert [row["profile"] for row in found["trials"]] == ["sandbox", "sandbox-eagle3"]  # as asked
    assert rows["sandbox"]["bench"]["decode_tok_s"] > rows["sandbox-eagle3"]["bench"]["decode_tok_s"]
    assert rows["sandbox-eagle3"]["speculation"]["algorithm"] == "EAGLE3"
    assert rows["sandbox-eagle3"]["speculation"]["accept_length"] > 1
    assert rows["sandbox"]["speculation"] is None
    assert rows["sandbox"]["bench"]["requests"] == 3 * 2 * 2
    assert found["verdict"]["winner"] == "sandbox" and found["verdict"]["beyond"], found["verdict"]
    # The own profile ran last: its server stays, no restart to go home.
    assert found["home"]["serving"] and not found["home"]["restarted"] and found["home"]["in_rotation"]
    assert "verdict: sandbox leads sandbox-eagle3" in out
    node.home()
    kept = json.loads((node.tmp / "state" / "ab" / "result.json").read_text())
    assert kept["verdict"] == found["verdict"] and kept["status"] == status.READY
    assert not node.stage.exists()  # the staged files (the env file's secrets) are gone
    assert (node.dir / "rotation.log").read_text().split() == ["out", "in"]


def test_a_trial_that_fails_its_gate_is_named_and_the_own_profile_serves_again(node):
    node.deploy("sandbox")
    plan = node.plan("sandbox", [node.entry("broken", node.files("broken", ["--no-such-flag"]))], repeats=1)
    found, out = run_ab(node, plan)
    assert found["status"] == status.FAILED_START
    assert found["cause"].startswith("broken: readiness gate: failed: the server exited"), found["cause"]
    assert found["trials"][0]["cause"].startswith("readiness gate:")
    assert found["verdict"] is None
    # Home through the last known good: restored, restarted, gated, measured once.
    assert found["home"]["restarted"] and found["home"]["serving"] and found["home"]["in_rotation"]
    assert found["home"]["decode_tok_s"] > 0
    assert "restored sandbox" in out
    node.home()


def test_sigterm_midway_puts_the_own_profile_back_in_rotation(node):
    node.deploy("sandbox")
    plan = node.plan(
        "sandbox",
        [
            node.entry("sandbox-eagle3", node.files("sandbox-eagle3", eagle3(node))),
            node.entry("sandbox", node.files("sandbox", [])),
        ],
        repeats=20,
    )
    proc = subprocess.Popen(node.ab_argv(plan), stdout=subprocess.PIPE, text=True, env=node.env)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "sandbox-eagle3: benchmark" in line:
            break
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=120)
    found = result.parse((("".join(lines)) + rest).splitlines())
    assert found["status"] == status.UNEXPECTED and found["cause"].startswith("stopped"), found
    (interrupted,) = found["trials"]  # the profile it was benchmarking, named
    assert interrupted["profile"] == "sandbox-eagle3" and interrupted["cause"].startswith(
        "interrupted: stopped"
    )
    assert found["home"]["restarted"] and found["home"]["in_rotation"]
    node.home()


def test_a_controller_that_dies_mid_ab_leaves_the_node_home_and_in_rotation(node, fake_systemd):
    """ab.py runs detached (detach.py start, as the restart cycle): the controller's follower
    SIGKILLed midway stops nothing; the A/B ends with the node home and in rotation."""
    node.deploy("sandbox")
    plan = node.plan(
        "sandbox",
        [
            node.entry("sandbox", node.files("sandbox", [])),
            node.entry("sandbox-eagle3", node.files("sandbox-eagle3", eagle3(node))),
        ],
        repeats=2,
    )
    cycles = node.tmp / "cycles"
    common = ["--dir", str(cycles), "--systemctl", fake_systemd.systemctl]
    command = " ".join(node.ab_argv(plan))
    start = [sys.executable, str(NODE / "detach.py"), "start", *common, "--service", "sglang", "--id", "ab1"]
    start += [
        "--command",
        command,
        "--systemd-run",
        fake_systemd.systemd_run,
        "--booted",
        str(fake_systemd.booted),
    ]
    started = subprocess.run(start, capture_output=True, text=True, env=node.env)
    assert result.parse(started.stdout.splitlines())["status"] == status.READY, started.stdout
    follow = [sys.executable, str(NODE / "detach.py"), "follow", *common, "--id", "ab1", "--for", "300"]
    follower = subprocess.Popen(follow, stdout=subprocess.PIPE, text=True, env=node.env)
    for line in follower.stdout:
        if "benchmark" in line:
            break
    follower.kill()  # the controller's side, gone mid-A/B
    follower.wait()
    deadline = time.monotonic() + 180
    while fake_systemd.state("sglang-deploy-cycle-sglang-ab1.service").strip() == "active":
        assert time.monotonic() < deadline
        time.sleep(0.5)
    read = subprocess.run([*follow[:-2], "--for", "1"], capture_output=True, text=True, env=node.env)
    ended = result.parse(read.stdout.splitlines())
    assert ended["state"] == "ended" and ended["cycle"]["status"] == status.READY, ended
    assert ended["cycle"]["verdict"]["leader"] == "sandbox"
    node.home()


def test_a_node_that_does_not_serve_its_last_known_good_is_refused_untouched(node):
    node.deploy("sandbox")
    (node.dir / "env").write_text("SGLANG_STANDIN_TOKENS_PER_SECOND=1\n")
    pid = node.pid()
    plan = node.plan("sandbox", [node.entry("sandbox", node.files("sandbox", []))])
    found, _ = run_ab(node, plan)
    assert found["status"] == status.PREFLIGHT_FAILED and found["outcome"] == "refused"
    assert "the installed env differ" in found["cause"]
    assert node.pid() == pid and not (node.dir / "rotation").exists()
    assert not node.stage.exists()  # the staged files (the profiles' secrets) gone, refused or not


def records(rates_by_round, ttft=10.0):
    return [
        {"round": r, "prompt": i, "max_tokens": 8, "tokens": 8, "tok_s": rate, "ttft_ms": ttft + i}
        for r, rates in enumerate(rates_by_round)
        for i, rate in enumerate(rates)
    ]


def test_summary_is_the_median_of_the_rounds_and_half_their_range():
    got = ab_bench.summary(records([[80, 82, 90], [81, 83, 70], [79, 84, 85]]))
    assert got["rounds"] == [82, 81, 84]
    assert got["decode_tok_s"] == 82 and got["spread"] == 1.5
    assert got["ttft_p50_ms"] == 11 and got["ttft_p95_ms"] == 12
    assert got["requests"] == 9 and got["tokens"] == 72


def test_percentile_is_nearest_rank():
    values = list(range(1, 21))
    assert ab_bench.percentile(values, 50) == 10
    assert ab_bench.percentile(values, 95) == 19
    assert ab_bench.percentile([5], 95) == 5


def trial(name, figure, spread, **more):
    return {"profile": name, "bench": {"decode_tok_s": figure, "spread": spread}, "cause": None, **more}


def test_verdict_lead_beyond_or_within_the_spread():
    beyond = ab_bench.verdict([trial("sandbox-eagle3", 60.4, 0.3), trial("baseline", 82.4, 0.5)])
    assert beyond["winner"] == "baseline" and beyond["lead"] == 22.0 and beyond["lead_pct"] == 36
    assert beyond["text"] == "baseline leads sandbox-eagle3 by 22.0 tok/s (36 %), beyond the spread (±0.8)"
    within = ab_bench.verdict([trial("a", 80.0, 1.0), trial("b", 80.5, 0.2)])
    assert within["winner"] is None and within["leader"] == "b" and not within["beyond"]
    assert "within the spread (±1.2): no winner" in within["text"]
    failed = {"profile": "c", "cause": "readiness gate: failed"}
    assert ab_bench.verdict([trial("a", 80.0, 1.0), failed]) is None


def test_table_names_each_profile_the_failed_one_the_verdict_and_the_node():
    b = {"decode_tok_s": 82.4, "spread": 0.5, "ttft_p50_ms": 40.0, "ttft_p95_ms": 55.0}
    e = {"decode_tok_s": 60.4, "spread": 0.3, "ttft_p50_ms": 41.0, "ttft_p95_ms": 60.0}
    trials = [
        {
            "profile": "baseline",
            "bench": b,
            "speculation": None,
            "restart_s": 9.1,
            "bench_s": 30.0,
            "cause": None,
        },
        {"profile": "eagle3", "bench": e, "speculation": {"accept_length": 1.96}, "cause": None},
        {"profile": "broken", "cause": "readiness gate: failed: cuda-oom"},
    ]
    home = {"serving": True, "decode_tok_s": 82.1, "reference": 82.4, "tolerance": 4.1, "in_rotation": True}
    home["reference_of"] = "its trial"
    result_ = {"own": "baseline", "trials": trials, "home": home}
    result_["verdict"] = ab_bench.verdict(trials)
    lines = ab_bench.table(result_)
    assert lines[0].split() == ["profile", "tok/s", "spread", "TTFT", "p50", "TTFT", "p95", "accept"] + [
        "restart+gate",
        "bench",
    ]
    assert lines[1].split()[:6] == ["baseline", "(own)", "82.4", "±0.5", "40", "ms"]
    assert "1.96" in lines[2]
    assert lines[3].split()[:2] == ["broken", "failed:"]
    assert lines[4].startswith("verdict: baseline leads eagle3 by 22.0 tok/s")
    assert lines[5] == "node: serving baseline again (82.1 tok/s, its trial 82.4 ±4.1), back in rotation"


def test_as_before_has_a_floor_of_five_percent():
    assert ab_bench.as_before(79.0, 82.0, 0.5) == (True, 4.1)
    assert ab_bench.as_before(77.0, 82.0, 0.5) == (False, 4.1)
    assert ab_bench.as_before(70.0, 82.0, 13.0) == (True, 13.0)
