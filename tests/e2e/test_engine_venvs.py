"""Engine upgrades that cannot half-happen, on a sandbox node: one venv per pin set, built beside
the live one, switched at the restart and only there, kept for an instant rollback.

Versions: 0.5.23+sandbox (build/wheels), 0.5.24+sandbox (build/wheels-next, `make wheels`) and
0.5.25+sandbox (built here), all from engine-standin/, each installed from its lock (the next
versions' locked here) and wheelhouse."""

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from sglang_deploy.plan.wheelhouse import lock_wheels_dir
from sglang_deploy.profile.schema import load_profile

from .sandbox import (  # noqa: F401 (a fixture)
    REPO_ROOT,
    deploy,
    host_tests_argv,
    lock_offline,
    nodes,
    profile_dir,
    ssh,
    start_deploy,
    unit_start,
    wait_for_output,
    wipe,
    write_profile,
)

pytestmark = pytest.mark.e2e

NODE = "node1"
VENVS = "/opt/sglang/venvs"
LINK = "/opt/sglang/venv"
WHEELS = "/opt/sglang-deploy/wheels"
WHEELHOUSE = "/opt/sglang-deploy/wheelhouse"  # a locked engine's wheels on the node
GATE_REPORT = "/run/sglang-deploy/sglang.service.gate.json"


def url(path):
    return f"http://127.0.0.1:{nodes()[1][NODE]['server_port']}{path}"


def served_version():
    """The version the server on the node answers with (/server_info), or None."""
    try:
        with urllib.request.urlopen(url("/server_info"), timeout=3) as answer:
            return json.loads(answer.read())["version"]
    except OSError:
        return None


def live():
    """(the venv the unit's link points at, the venv the running server's interpreter is in)."""
    pid = ssh(NODE, "systemctl show -p MainPID --value sglang.service").strip()
    exe = ssh(NODE, f"readlink /proc/{pid}/exe", check=False).strip()
    return ssh(NODE, f"readlink -f {LINK}").strip(), exe.rsplit("/bin/", 1)[0]


def venvs():
    return sorted(ssh(NODE, f"ls {VENVS}").split())


class Load(threading.Thread):
    """Requests one after another against the node: (wall clock, version served or None)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.answers, self.stopped = [], threading.Event()

    def run(self):
        body = json.dumps({"text": "hello", "sampling_params": {"max_new_tokens": 4}}).encode()
        while not self.stopped.is_set():
            try:
                request = urllib.request.Request(url("/generate"), body, {"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=10) as answer:
                    ok = answer.status == 200
            except OSError:
                ok = False
            self.answers.append((time.time(), served_version() if ok else None))
            time.sleep(0.05)


@pytest.fixture(scope="module")
def versions(profile_dir):
    """Profiles per version; 0.5.25's wheel is built here, into the module's directory. The
    next versions are locked here, offline: their closure is the sandbox lock's (their wheels:
    the next stand-in wheel and the sandbox lock's wheelhouse, `make wheelhouse-sandbox`)."""
    next_wheels = profile_dir / "wheels-0.5.25"
    subprocess.run(
        [
            sys.executable,
            "sandbox/standin_wheel.py",
            "--version",
            "0.5.25+sandbox",
            "--out",
            str(next_wheels),
        ],
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
    )
    sandbox_wheels = lock_wheels_dir(load_profile("sandbox").engine)
    profiles = {
        "0.5.23": "sandbox",
        "0.5.24": write_profile(
            profile_dir,
            "next",
            f"""
            extends: {{profiles}}/sandbox.yml
            engine:
              packages: [sglang==0.5.24+sandbox]
              find_links: [{REPO_ROOT}/build/wheels-next, {sandbox_wheels}]
        """,
        ),
        # A release that dies while loading, on every start.
        "0.5.25-crashing": write_profile(
            profile_dir,
            "crashing",
            f"""
            extends: {{profiles}}/sandbox.yml
            engine:
              packages: [sglang==0.5.25+sandbox]
              find_links: [{next_wheels}, {sandbox_wheels}]
            env:
              SGLANG_STANDIN_FAIL: crash-load
              SGLANG_STANDIN_FAIL_AFTER_SECONDS: 2
        """,
        ),
    }
    written = [lock_offline(profiles[v]) for v in ("0.5.24", "0.5.25-crashing")]
    yield profiles
    for path in written:
        path.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def first(versions):
    wipe(NODE)
    run = deploy({NODE: versions["0.5.23"]}, limit=NODE)
    assert run.returncode == 0, run.output[-5000:]
    return live()


def mtime(path, follow=False):
    """A path's modification time on the node (the link itself unless ``follow``)."""
    return float(ssh(NODE, f"stat {'-L ' if follow else ''}-c %.9Y {path}").strip())


def server_started():
    """When the unit's running server process started, wall clock, to the second."""
    return float(
        ssh(NODE, 'date -d "$(systemctl show -p ExecMainStartTimestamp --value sglang.service)" +%s').strip()
    )


def test_an_upgrade_under_load_serves_the_old_venv_until_the_restart_then_the_new(versions, first):
    old_link, old_exe = first
    assert old_exe == old_link and old_link.startswith(f"{VENVS}/sglang-0.5.23+sandbox-")
    load = Load()
    load.start()
    started = time.monotonic()
    upgrade = start_deploy({NODE: versions["0.5.24"]}, limit=NODE)
    try:
        # The engine step is done: the new venv is there beside the old, finished.
        seen = wait_for_output(upgrade, "Env directory", timeout=180)
        built = time.monotonic()
        new = [v for v in venvs() if v.startswith("sglang-0.5.24+sandbox-")]
        assert new, seen[-3000:]
        rest, _ = upgrade.communicate(timeout=300)
    finally:
        load.stopped.set()
        load.join()
    assert upgrade.returncode == 0, (seen + rest)[-5000:]
    done = time.monotonic()
    new_venv = f"{VENVS}/{new[0]}"
    assert live() == (new_venv, new_venv)
    # When things happened, from the node's own clocks (the sandbox shares the controller's):
    # the build finished, then the link was switched, then the new server started, seconds later;
    # nothing but the old server answered before the switch.
    finished = mtime(f"{new_venv}/.sglang-deploy-venv.json")
    switched = mtime(LINK)
    restarted = server_started()
    assert finished < switched <= restarted + 1 < switched + 15, (finished, switched, restarted)
    served = [(t, v) for t, v in load.answers if v]
    assert served[0][1] == "0.5.23+sandbox" and served[-1][1] == "0.5.24+sandbox"
    assert all(v == "0.5.23+sandbox" for t, v in served if t < switched), served
    # Never the old version again once the new one answered: the switch happened once.
    versions_served = [v for _, v in served]
    assert "0.5.23+sandbox" not in versions_served[versions_served.index("0.5.24+sandbox") :]
    assert ssh(NODE, f"test -x {old_link}/bin/python && echo kept").strip() == "kept"
    sizes = ssh(NODE, f"du -sm {VENVS}/*")
    print(
        f"\nupgrade under load: {done - started:.1f}s (build {built - started:.1f}s, switch "
        f"{switched - finished:.1f}s after it); {len(load.answers)} requests, "
        f"{sum(v is None for _, v in load.answers)} unanswered during the restart; "
        f"MiB per venv:\n{sizes}"
    )


def test_a_new_version_that_crashes_is_rolled_back_to_the_old_venv_without_a_download(versions):
    good_link, _ = live()
    before = unit_start(NODE)
    crash = start_deploy({NODE: versions["0.5.25-crashing"]}, limit=NODE)
    try:
        seen = wait_for_output(crash, "Env directory", timeout=180)
        # No package can be installed from here on: the wheels are gone.
        ssh(NODE, f"for d in {WHEELS} {WHEELHOUSE}; do test -d $d && mv $d $d.hidden; done; true")
        seen += wait_for_output(crash, "rolling back", timeout=120)
        rolling_back = time.monotonic()
        rest, _ = crash.communicate(timeout=300)
        rolled_back = time.monotonic() - rolling_back
    finally:
        ssh(NODE, f"for d in {WHEELS} {WHEELHOUSE}; do test -d $d.hidden && mv $d.hidden $d; done; true")
    output = seen + rest
    assert crash.returncode != 0, output[-5000:]
    assert "rolled back: serving next again" in output, output[-5000:]
    # No package installed: nothing reinstalled, the link back on the kept venv (below) and the
    # rollback one restart long (the last assertion).
    assert "reinstalling" not in output, output[-5000:]
    assert unit_start(NODE) != before
    assert live() == (good_link, good_link)
    assert served_version() == "0.5.24+sandbox"
    assert any(v.startswith("sglang-0.5.25+sandbox-") for v in venvs())
    one_start = json.loads(ssh(NODE, f"cat {GATE_REPORT}"))["elapsed_s"]
    print(
        f"\nrollback: {rolled_back:.1f}s from 'rolling back' to the end of the deploy; "
        f"the rolled-back server's start took {one_start:.1f}s"
    )
    assert rolled_back < one_start + 10, "a rollback is one restart, no build or download"


def test_verify_finds_a_server_that_runs_another_venv_than_the_profile(versions):
    def engine_venv_check(profile):
        env = {**os.environ, "SGLANG_DEPLOY_SANDBOX_PROFILES": f"{NODE}={profile}"}
        return subprocess.run(
            host_tests_argv(NODE, "-q", "-k", "engine-venv", "-rf"),
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    passed = engine_venv_check(versions["0.5.24"])
    assert passed.returncode == 0, passed.stdout[-3000:]
    found = engine_venv_check(versions["0.5.25-crashing"])
    assert found.returncode != 0 and "sglang-0.5.25+sandbox-" in found.stdout, found.stdout[-3000:]
    assert "runs /opt/sglang/venvs/sglang-0.5.24+sandbox-" in found.stdout, found.stdout[-3000:]


def test_a_rerun_creates_nothing_and_old_venvs_beyond_k_go_but_never_live_or_last_good(versions):
    before = venvs()
    started = unit_start(NODE)
    rerun = deploy({NODE: versions["0.5.24"]}, limit=NODE)
    assert rerun.returncode == 0 and rerun.changed == 0, rerun.output[-5000:]
    assert venvs() == before and len(before) == 3 and unit_start(NODE) == started
    live_venv = live()[0].rsplit("/", 1)[1]
    # Keep 1: the newest (the crashed 0.5.25, a retry needs no build) stays, the live one (also
    # the last known good) stays; 0.5.23 goes.
    pruned = deploy({NODE: versions["0.5.24"]}, limit=NODE, args=["--data", "venvs_keep=1"])
    assert pruned.returncode == 0 and pruned.changed == 1, pruned.output[-5000:]
    after = venvs()
    assert live_venv in after and not any(v.startswith("sglang-0.5.23+") for v in after), after
    assert any(v.startswith("sglang-0.5.25+") for v in after) and len(after) == 2
    assert unit_start(NODE) == started
    again = deploy({NODE: versions["0.5.24"]}, limit=NODE, args=["--data", "venvs_keep=1"])
    assert again.returncode == 0 and again.changed == 0, again.output[-5000:]


def test_no_room_for_a_new_venv_fails_preflight_and_the_old_server_keeps_serving(versions):
    started = unit_start(NODE)
    small = "/opt/sglang/venvs-small"
    ssh(NODE, f"mkdir -p {small} && mount -t tmpfs -o size=8m tmpfs {small}")
    try:
        run = deploy({NODE: versions["0.5.23"]}, limit=NODE, args=["--data", f"venvs_dir={small}"])
        assert run.returncode != 0, run.output[-5000:]
        message = next(line for line in run.output.splitlines() if "not enough disk" in line)
        print(f"\n{message.strip()}")
        assert "[node1]" in message or "node1" in message
        assert ssh(NODE, f"ls -A {small}").strip() == ""
    finally:
        ssh(NODE, f"umount {small}; rmdir {small}", check=False)
    assert unit_start(NODE) == started and served_version() == "0.5.24+sandbox"
