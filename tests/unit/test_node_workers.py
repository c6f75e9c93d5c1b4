"""workers.py on a real process tree titled as SGLang titles it, with the real `setproctitle`
(which blanks /proc/<pid>/environ) and the start-up hook as the deploy renders it, installed in
a venv: launcher -> schedulers, detokenizer, resource_tracker, one worker without the hook."""

import json
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from sglang_deploy.node import workers
from sglang_deploy.node.lib import env_records, procs, result, status
from sglang_deploy.plan.render import HOOK_MODULE, render_hook_module, render_hook_pth
from sglang_deploy.profile.schema import load_profile

EXPECT = {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_P2P_LEVEL": "SYS"}

# A child titles itself as SGLang does (setproctitle, the C extension), then waits.
CHILD = "import sys, time; from setproctitle import setproctitle; setproctitle(sys.argv[1]); time.sleep(60)"
# The launcher (the venv's interpreter: the hook ran in it) spawns its children, each through
# the venv's interpreter (the hook runs in each) except TP2, started by an interpreter without
# the hook; TP1 gets NCCL_PROTO from its caller (the hook leaves a set variable alone).
LAUNCHER = r"""
import json, os, subprocess, sys, time
venv_python, plain_python, child = sys.argv[1:4]
tp1 = dict(os.environ, NCCL_PROTO="Simple")
no_hook = {k: v for k, v in os.environ.items() if k not in ("NCCL_PROTO", "NCCL_ALGO", "NCCL_P2P_LEVEL")}
children = [
    subprocess.Popen([venv_python, "-c", child, "sglang::scheduler_TP0"]),
    subprocess.Popen([venv_python, "-c", child, "sglang::scheduler_TP1"], env=tp1),
    subprocess.Popen([plain_python, "-S", "-c", "import sys; sys.path[:0] = %r; " % sys.path + child,
                      "sglang::scheduler_TP2"], env=no_hook),
    subprocess.Popen([venv_python, "-c", child, "sglang::detokenizer"]),
    subprocess.Popen([venv_python, "-c", "from multiprocessing.resource_tracker import main; import time; time.sleep(60)"]),
]
print(json.dumps([c.pid for c in children]), flush=True)
time.sleep(60)
"""


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A venv (seeing this interpreter's packages: setproctitle) with the profile's start-up
    hook where the interpreter loads it."""
    root = tmp_path_factory.mktemp("venv")
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(root)], check=True
    )
    python = str(root / "bin" / "python")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    profile = load_profile("sandbox", overrides={"env": EXPECT})
    (Path(site) / f"{HOOK_MODULE}.py").write_text(render_hook_module(profile))
    (Path(site) / f"{HOOK_MODULE}.pth").write_text(render_hook_pth(profile))
    return python


def _titled(pid, deadline):
    while time.monotonic() < deadline:
        if procs.title(pid).startswith("sglang::"):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def tree(venv, tmp_path):
    records = tmp_path / "records"
    records.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if k not in EXPECT and not k.startswith("PYTHON")}
    env[env_records.RECORDS_VAR] = str(records)
    plain = sysconfig.get_config_var("BINDIR") + "/python3"
    launcher = subprocess.Popen(
        [venv, "-c", LAUNCHER, venv, plain if os.path.exists(plain) else sys.executable, CHILD],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    pids = json.loads(launcher.stdout.readline())
    deadline = time.monotonic() + 20
    assert all(_titled(pid, deadline) for pid in pids[:4])
    yield launcher.pid, pids, str(records)
    for pid in pids:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    launcher.kill()
    launcher.wait()


def _run(args, capsys):
    rc = workers.main(args)
    return rc, capsys.readouterr().out.splitlines()


def test_proc_environ_of_a_titled_worker_is_blank(tree):
    """Why /proc/<pid>/environ is no witness: the real setproctitle reuses its memory, so a check
    reading it finds every variable missing although the worker holds them."""
    _, (tp0, *_), records = tree
    assert "NCCL_PROTO" not in procs.read_environ(tp0)
    assert env_records.read(records, tp0).items() >= EXPECT.items()


def test_report_lines_and_status(tree, capsys):
    main_pid, (tp0, tp1, tp2, detok, tracker), records = tree
    rc, printed = _run(
        ["--pid", str(main_pid), "--records", records, "--expect-json", json.dumps(EXPECT)], capsys
    )
    out = result.progress(printed)
    assert rc == status.WORKER_ENV_MISMATCH
    assert (
        result.parse(printed)["cause"]
        == f"pid {tp1} sglang::scheduler_TP1: NCCL_PROTO is 'Simple', expected 'LL'"
    )
    assert out == [
        f"pid {tp0} sglang::scheduler_TP0: 3/3 variables ok",
        f"pid {tp1} sglang::scheduler_TP1: 2/3 variables ok",
        f"pid {tp1} sglang::scheduler_TP1: NCCL_PROTO is 'Simple', expected 'LL'",
        f"pid {tp2} sglang::scheduler_TP2: {workers.NO_RECORD}",
        f"pid {detok} sglang::detokenizer: 3/3 variables ok",
    ]


def test_json_report_and_a_passing_check(tree, capsys):
    main_pid, (tp0, tp1, tp2, detok, _), records = tree
    args = ["--pid", str(main_pid), "--records", records, "--json", "--match", "sglang::scheduler_TP0"]
    rc, printed = _run([*args, "--match", "sglang::detokenizer", "--expect-json", json.dumps(EXPECT)], capsys)
    report = json.loads(printed[0])
    assert rc == status.READY and report["status_name"] == "READY"
    assert [w["pid"] for w in report["workers"]] == [tp0, detok]
    assert report["records"] == records
    assert all(w["ok"] and w["checked"] == 3 for w in report["workers"])
    assert [workers.is_scheduler(w) for w in report["workers"]] == [True, False]


def test_a_record_of_another_process_with_the_same_pid_is_no_record(tree, capsys):
    main_pid, (tp0, *_), records = tree
    path = Path(records) / f"{tp0}.json"
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "starttime": record["starttime"] - 1}))
    assert env_records.read(records, tp0) is None
    rc, printed = _run(
        [
            "--pid",
            str(main_pid),
            "--records",
            records,
            "--match",
            "sglang::scheduler_TP0",
            "--expect-json",
            "{}",
        ],
        capsys,
    )
    assert rc == status.WORKER_ENV_MISMATCH and printed[0].endswith(workers.NO_RECORD)


def test_a_variable_the_worker_lacks_is_missing(tree, capsys):
    main_pid, (tp0, *_), records = tree
    rc, printed = _run(
        [
            "--pid",
            str(main_pid),
            "--records",
            records,
            "--match",
            "sglang::scheduler_TP0",
            "--expect-json",
            json.dumps({**EXPECT, "NCCL_IB_DISABLE": "1"}),
        ],
        capsys,
    )
    assert rc == status.WORKER_ENV_MISMATCH
    assert printed[1] == f"pid {tp0} sglang::scheduler_TP0: NCCL_IB_DISABLE is missing"


def test_no_workers(tree, capsys):
    main_pid, _, records = tree
    rc, printed = _run(
        ["--pid", str(main_pid), "--records", records, "--match", "vllm::", "--expect-json", "{}"], capsys
    )
    assert rc == status.NO_WORKERS and "no process under main pid" in printed[0]


def test_main_pid_from_systemctl_and_records_from_the_unit(tree, tmp_path, capsys):
    main_pid, _, _ = tree
    fake = tmp_path / "systemctl"
    pid_file = tmp_path / "pid"
    fake.write_text("#!%s\nprint('MainPID=' + open(%r).read())\n" % (sys.executable, str(pid_file)))
    fake.chmod(0o755)
    pid_file.write_text(str(main_pid))
    argv = [
        "--unit",
        "sglang-b.service",
        "--systemctl",
        str(fake),
        "--json",
        "--expect-json",
        json.dumps(EXPECT),
    ]
    rc, printed = _run(argv, capsys)
    report = json.loads(printed[0])
    assert rc == status.WORKER_ENV_MISMATCH  # the unit's runtime directory holds no record here
    assert report["records"] == "/run/sglang-env/sglang-b" == env_records.records_dir("sglang-b")
    pid_file.write_text("0")
    rc, printed = _run(argv, capsys)
    assert rc == status.NO_WORKERS and "has no main process" in json.loads(printed[0])["message"]


def test_runs_as_a_script(tree):
    main_pid, _, records = tree
    script = os.path.join(os.path.dirname(workers.__file__), "workers.py")
    proc = subprocess.run(
        [
            sys.executable,
            script,
            "--pid",
            str(main_pid),
            "--records",
            records,
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
