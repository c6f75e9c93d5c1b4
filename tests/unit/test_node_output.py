"""lib/output.py: a node script whose stdout is the controller's SSH channel survives the channel
closing (a controller that died): it finishes its work and writes its result file. Each script
runs for real, here, with its stdout a pipe whose reader closes after the first line."""

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from sglang_deploy.node import cycle
from sglang_deploy.node.lib import result, status

NODE = Path(cycle.__file__).parent


def _run_reader_closes_early(argv, result_file, env=None):
    """Run ``argv`` with stdout a pipe whose reader reads one line, then goes away; its exit
    status and its stderr."""
    env = dict(os.environ, **(env or {}), **{result.RESULT_FILE_VAR: str(result_file)})
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    proc.stdout.readline()
    proc.stdout.close()  # the SSH channel closed
    code = proc.wait(timeout=60)
    return code, proc.stderr.read().decode()


def test_restart_survives_a_closed_stdout_between_stop_and_start(tmp_path, fake_systemctl):
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        fake_systemctl.unit(
            LoadState="loaded",
            ActiveState="active",
            SubState="running",
            MainPID=server.pid,
            ProcessGroup=server.pid,
            ControlGroup="",
            InvocationID="oldinv",
        )
        argv = [sys.executable, str(NODE / "restart.py"), "--unit", "sglang.service", "--port", "1"]
        argv += ["--stop-timeout", "30", "--systemctl", str(fake_systemctl.path)]
        argv += ["--nvidia-smi", str(tmp_path / "no-nvidia-smi")]
        code, stderr = _run_reader_closes_early(argv, tmp_path / "result.json")
    finally:
        server.kill()
        server.wait()
    assert "BrokenPipeError" not in stderr
    assert code == status.READY, stderr
    assert fake_systemctl.calls().count("start") == 1  # started again after the stop
    found = result.parse((tmp_path / "result.json").read_text().splitlines())
    assert found["status"] == status.READY


def _step(lines, code=0):
    """A step's command line: prints ``lines`` progress lines (slowly), then its result line."""
    text = (
        f"import sys, time; sys.path.insert(0, {str(NODE)!r}); from lib import result\n"
        f"for i in range({lines}):\n    print('progress %d' % i, flush=True); time.sleep(0.01)\n"
        f"sys.exit(result.emit({code}, None))"
    )
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(text)}"


def test_cycle_survives_a_closed_stdout_and_writes_its_result(tmp_path):
    steps = {name: _step(20) for name in cycle.STEPS}
    argv = [sys.executable, str(NODE / "cycle.py"), "--steps-json", json.dumps(steps)]
    started = time.monotonic()
    code, stderr = _run_reader_closes_early(argv, tmp_path / "result.json")
    assert "BrokenPipeError" not in stderr and "Traceback" not in stderr, stderr
    assert code == status.READY
    found = result.parse((tmp_path / "result.json").read_text().splitlines())
    assert found["outcome"] == "served"
    assert [s["step"] for s in found["steps"]][-1] == "recording last known good"
    assert time.monotonic() - started < 60


def test_say_survives_a_closed_stdout_without_a_guard(tmp_path):
    """output.say in a process whose streams nobody guarded (imported as a package)."""
    text = (
        f"import sys; sys.path.insert(0, {str(NODE.parent.parent)!r})\n"
        "from sglang_deploy.node.lib import output\n"
        "for i in range(20000): output.say('line %d' % i)\n"
        "open(sys.argv[1], 'w').write('done')\n"
    )
    marker = tmp_path / "done"
    code, stderr = _run_reader_closes_early([sys.executable, "-c", text, str(marker)], tmp_path / "r.json")
    assert code == 0 and "Traceback" not in stderr, stderr
    assert marker.read_text() == "done"
