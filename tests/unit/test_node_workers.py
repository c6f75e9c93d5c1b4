"""workers.py on a real process tree titled like SGLang's (launcher -> schedulers, detokenizer,
resource_tracker), with environments that differ per worker."""

import json
import os
import subprocess
import sys
import time

import pytest

from sglang_deploy.node import workers
from sglang_deploy.node.lib import result, status

EXPECT = {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_P2P_LEVEL": "SYS"}

# The launcher spawns its children with argv[0] set to SGLang's process titles, each with
# its own environment, prints their pids and waits.
LAUNCHER = r"""
import json, os, subprocess, sys, time
good = dict(os.environ, NCCL_PROTO="LL", NCCL_ALGO="Ring", NCCL_P2P_LEVEL="SYS")
tp1 = dict(good, NCCL_PROTO="Simple"); del tp1["NCCL_ALGO"]
sleep = ["-c", "import time; time.sleep(60)"]
children = [
    subprocess.Popen(["sglang::scheduler_TP0"] + sleep, executable=sys.executable, env=good),
    subprocess.Popen(["sglang::scheduler_TP1"] + sleep, executable=sys.executable, env=tp1),
    subprocess.Popen(["sglang::detokenizer"] + sleep, executable=sys.executable, env={}),
    subprocess.Popen([sys.executable, "-c", "from multiprocessing.resource_tracker import main; import time; time.sleep(60)"]),
]
print(json.dumps([c.pid for c in children]), flush=True)
time.sleep(60)
"""


@pytest.fixture
def tree():
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER], stdout=subprocess.PIPE, universal_newlines=True
    )
    pids = json.loads(launcher.stdout.readline())
    time.sleep(0.2)  # let the children exec
    yield launcher.pid, pids
    for pid in pids:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    launcher.kill()
    launcher.wait()


def test_report_lines_and_status(tree, capsys):
    main_pid, (tp0, tp1, detok, tracker) = tree
    rc = workers.main(
        ["--unit", "sglang.service", "--pid", str(main_pid), "--expect-json", json.dumps(EXPECT)]
    )
    printed = capsys.readouterr().out.splitlines()
    out = result.progress(printed)
    assert rc == status.WORKER_ENV_MISMATCH
    assert result.parse(printed)["cause"].endswith("NCCL_ALGO is missing")
    assert out[0] == "pid %d sglang::scheduler_TP0 -c import time; time.sleep(60): 3/3 variables ok" % tp0
    head = "pid %d sglang::scheduler_TP1 -c import time; time.sleep(60):" % tp1
    assert out[1:] == [
        head + " 1/3 variables ok",
        head + " NCCL_ALGO is missing",
        head + " NCCL_PROTO is 'Simple', expected 'LL'",
    ]


def test_json_report(tree, capsys):
    main_pid, (tp0, tp1, detok, tracker) = tree
    rc = workers.main(
        [
            "--unit",
            "sglang.service",
            "--pid",
            str(main_pid),
            "--json",
            "--expect-json",
            json.dumps({"NCCL_P2P_LEVEL": "SYS"}),
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert rc == status.READY and report["status_name"] == "READY"
    assert [w["pid"] for w in report["workers"]] == [tp0, tp1]
    assert all(w["ok"] and w["checked"] == 1 for w in report["workers"])


def test_other_match_prefix_and_no_workers(tree, capsys):
    main_pid, (_, _, detok, _) = tree
    assert (
        workers.main(
            ["--unit", "u", "--pid", str(main_pid), "--match", "sglang::detokenizer", "--expect-json", "{}"]
        )
        == status.READY
    )
    assert capsys.readouterr().out.startswith("pid %d sglang::detokenizer" % detok)
    assert (
        workers.main(["--unit", "u", "--pid", str(main_pid), "--match", "vllm::", "--expect-json", "{}"])
        == status.NO_WORKERS
    )
    assert "no process under main pid" in capsys.readouterr().out


def test_main_pid_from_systemctl_and_unit_not_running(tree, tmp_path, capsys):
    main_pid, _ = tree
    fake = tmp_path / "systemctl"
    pid_file = tmp_path / "pid"
    fake.write_text("#!%s\nprint('MainPID=' + open(%r).read())\n" % (sys.executable, str(pid_file)))
    fake.chmod(0o755)
    pid_file.write_text(str(main_pid))
    argv = ["--unit", "sglang.service", "--systemctl", str(fake), "--expect-json", json.dumps(EXPECT)]
    assert workers.main(argv) == status.WORKER_ENV_MISMATCH
    capsys.readouterr()
    pid_file.write_text("0")
    assert workers.main(argv) == status.NO_WORKERS
    assert "has no main process" in capsys.readouterr().out


def test_runs_as_a_script(tree):
    main_pid, _ = tree
    script = os.path.join(os.path.dirname(workers.__file__), "workers.py")
    proc = subprocess.run(
        [
            sys.executable,
            script,
            "--unit",
            "u",
            "--pid",
            str(main_pid),
            "--json",
            "--expect-json",
            json.dumps(EXPECT),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.returncode == status.WORKER_ENV_MISMATCH
    assert json.loads(proc.stdout)["status_name"] == "WORKER_ENV_MISMATCH"


def test_bad_expect_json_is_usage_error():
    with pytest.raises(SystemExit) as exc:
        workers.main(["--unit", "u", "--expect-json", "[1, 2]"])
    assert exc.value.code == status.USAGE
