"""Shared fixtures for the unit tests."""

import json
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def in_repo(monkeypatch):
    """Run from the repository root, so error messages name files as `profiles/x.yml`."""
    monkeypatch.chdir(REPO_ROOT)
    return REPO_ROOT


class FakeRun:
    """pyinfra's state as far as the run state needs it: somewhere to live, and the stage."""

    is_executing = False


@pytest.fixture(autouse=True)
def fresh_run():
    """Every test is a pyinfra run of its own: a fresh run state (sglang_deploy/run_state.py)
    on a fresh stand-in for pyinfra's state, unless the test sets pyinfra's state itself."""
    from pyinfra.context import ctx_state

    from sglang_deploy import run_state

    with ctx_state.use(FakeRun()):
        yield run_state.of()


@pytest.fixture(autouse=True)
def last_good_record(tmp_path, monkeypatch):
    """Where lastgood.save remembers its directories: a test's own file, never the repo's."""
    from sglang_deploy.node.lib import last_good_record

    record = tmp_path / "last-good-dirs.json"
    monkeypatch.setattr(last_good_record, "SAVED_DIRS", str(record))
    return record


# One unit for on-node scripts that call systemctl (restart.py, follower.py): its properties are
# unit.json beside the script (`show -p` reads them; stop, kill and start change them as systemd
# would), and every call is appended to `calls`. "ProcessGroup", when set, stands for the unit's
# cgroup: stop sends it SIGTERM, kill SIGKILL.
FAKE_SYSTEMCTL = r"""
import json, os, signal, sys
here = os.path.dirname(os.path.abspath(__file__))
path = os.path.join(here, "unit.json")
state = json.load(open(path))
args = sys.argv[1:]
with open(os.path.join(here, "calls"), "a") as f:
    f.write(" ".join(args) + "\n")
if args[0] == "show":
    for i, arg in enumerate(args):
        if arg == "-p":
            print("%s=%s" % (args[i + 1], state.get(args[i + 1], "")))
    sys.exit(0)
if args[0] in ("stop", "kill") and state.get("ProcessGroup"):
    try:
        os.killpg(state["ProcessGroup"], signal.SIGTERM if args[0] == "stop" else signal.SIGKILL)
    except ProcessLookupError:
        pass
if args[0] == "stop":
    state.update(ActiveState="inactive", SubState="dead", MainPID=0, ProcessGroup=0)
elif args[0] == "kill":
    state.update(ActiveState="failed", SubState="dead")
elif args[0] == "start":
    if state.get("fail_start"):
        sys.stderr.write("Job for sglang.service failed because the control process exited with error code.\n")
        state.update(ActiveState="failed", SubState="failed", ExecMainCode=1, ExecMainStatus=203)
        json.dump(state, open(path, "w"))
        sys.exit(1)
    state.update(ActiveState="active", SubState="running", MainPID=4242, InvocationID="newinv")
json.dump(state, open(path, "w"))
"""


class FakeSystemctl:
    def __init__(self, directory):
        self.dir = directory
        self.path = directory / "systemctl"
        self.path.write_text(f"#!{sys.executable}\n{FAKE_SYSTEMCTL}")
        self.path.chmod(0o755)

    def unit(self, **state):
        """The unit's properties, all of them."""
        (self.dir / "unit.json").write_text(json.dumps(state))

    def calls(self):
        """The verb of every call so far."""
        return [line.split()[0] for line in (self.dir / "calls").read_text().splitlines()]


@pytest.fixture
def fake_systemctl(tmp_path):
    """A fake systemctl in the test's directory (FakeSystemctl.path), for --systemctl."""
    return FakeSystemctl(tmp_path)


# systemd as far as detached restart cycles (node/detach.py) need it: `systemd-run --unit=U
# ... -- CMD` runs CMD in the background, in a session of its own (it outlives its caller, as a
# transient unit outlives the SSH session), with the --setenv variables; `systemctl is-active U`
# answers from units/U, "active" until CMD ended ("inactive", as a collected unit).
FAKE_SYSTEMD_RUN = r"""
import os, subprocess, sys
here = os.path.dirname(os.path.abspath(__file__))
args = sys.argv[1:]
with open(os.path.join(here, "systemd-run.calls"), "a") as f:
    f.write(" ".join(args) + "\n")
unit = next(a.split("=", 1)[1] for a in args if a.startswith("--unit="))
env = dict(os.environ)
env.update(a[len("--setenv="):].split("=", 1) for a in args if a.startswith("--setenv="))
command = args[args.index("--") + 1:]
state = os.path.join(here, "units", unit)
os.makedirs(os.path.dirname(state), exist_ok=True)
open(state, "w").write("active")
supervise = "import subprocess, sys; subprocess.call(sys.argv[2:]); open(sys.argv[1], 'w').write('inactive')"
subprocess.Popen([sys.executable, "-c", supervise, state] + command, env=env, start_new_session=True,
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
"""

FAKE_IS_ACTIVE = r"""
import os, sys
here = os.path.dirname(os.path.abspath(__file__))
try:
    print(open(os.path.join(here, "units", sys.argv[2])).read())
except OSError:
    print("inactive")
"""


class FakeSystemd:
    def __init__(self, directory):
        self.dir = directory
        self.booted = directory / "systemd-booted"
        self.booted.mkdir()
        for name, text in (("systemd-run", FAKE_SYSTEMD_RUN), ("systemctl", FAKE_IS_ACTIVE)):
            path = directory / name
            path.write_text(f"#!{sys.executable}\n{text}")
            path.chmod(0o755)
        self.systemd_run, self.systemctl = str(directory / "systemd-run"), str(directory / "systemctl")

    def state(self, unit):
        path = self.dir / "units" / unit
        return path.read_text() if path.exists() else "inactive"

    def set_state(self, unit, state):
        (self.dir / "units").mkdir(exist_ok=True)
        (self.dir / "units" / unit).write_text(state)

    def calls(self):
        path = self.dir / "systemd-run.calls"
        return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def fake_systemd(tmp_path):
    """A fake systemd-run and systemctl (is-active) in bin/ of the test's directory."""
    (tmp_path / "bin").mkdir()
    return FakeSystemd(tmp_path / "bin")


@pytest.fixture
def cycle_in_session(monkeypatch):
    """Restart cycles run as on a node without systemd, in the SSH session: for tests of the
    decisions around a cycle, whose stand-in hosts answer its command (test_node_detach.py
    covers the detached run, which ends with the same output)."""
    from sglang_deploy.operations import service
    from sglang_deploy.operations.streamed import run_streamed

    monkeypatch.setattr(service, "run_detached", lambda host, scripts, command: run_streamed(host, command))


@pytest.fixture(scope="session")
def sandbox_wheelhouse():
    """The sandbox lock's wheelhouse (build/wheelhouse/<lock>/: the stand-in, its closure, uv)
    as `make wheelhouse-sandbox` fills it: from the wheel cache, downloading only what it
    lacks (the first run on a machine). A stale lock fails here, naming `make lock`."""
    import io

    from sglang_deploy.plan import wheelhouse
    from sglang_deploy.profile.schema import load_profile

    profile = load_profile("sandbox")
    wheelhouse.build(profile, out=io.StringIO())
    directory = wheelhouse.lock_wheels_dir(profile.engine)
    wheelhouse.uv_wheel(directory, profile.engine.platform)
    return directory
