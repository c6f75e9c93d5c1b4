"""A normal stop of the server's unit is a clean stop, and a crash still reads as one: the rendered
unit's stop settings (KillMode=mixed; for an SGLang that SIGKILLs itself after a drained stop,
SuccessExitStatus= and RestartForceExitStatus=) judged by a systemd-like stop of local
processes that end as SGLang's launchers do (tests/unit/systemd_like.py). The stand-in itself
under the same stop: test_standin_server.py."""

import signal
import subprocess
import sys
import textwrap

import pytest
import systemd_like

from sglang_deploy.plan.render import render_unit, stop_kills_itself
from sglang_deploy.profile.schema import load_profile

# A launcher and a child in its process group: the child (a scheduler) has no SIGTERM handler;
# the launcher drains on SIGTERM, stops its child, then exits 0 (0.5.23) or SIGKILLs itself
# (0.5.17: exit status 137); a crash (the child dies on its own) ends the launcher by SIGKILL.
LAUNCHER = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ending = sys.argv[1]
    def on_term(signum, frame):
        time.sleep(0.2)  # the drain
        child.kill(); child.wait()
        if ending == "0.5.17":
            os.kill(os.getpid(), signal.SIGKILL)
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    print("ready", flush=True)
    if ending == "crash":
        child.kill(); child.wait()
        os.kill(os.getpid(), signal.SIGKILL)  # SIGQUIT handler: kill_process_tree(os.getpid())
    time.sleep(60)
    """
)


def launcher(ending):
    proc = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, ending], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert proc.stdout.readline().strip() == "ready" or ending == "crash"
    return proc


def unit_for(version, restart="on-failure"):
    profile = load_profile(
        "sandbox", overrides={"engine": {"packages": [f"sglang=={version}"]}, "service": {"restart": restart}}
    )
    return render_unit(profile)


def test_only_an_sglang_before_0_5_23_is_taken_to_sigkill_itself():
    assert not stop_kills_itself(load_profile("sandbox"))  # 0.5.23+sandbox
    assert not stop_kills_itself(load_profile("baseline"))  # 0.5.23
    assert stop_kills_itself(load_profile("sandbox", overrides={"engine": {"packages": ["sglang==0.5.17"]}}))
    unit = systemd_like.settings(render_unit(load_profile("sandbox")))
    assert (
        unit["KillMode"] == "mixed"
        and "SuccessExitStatus" not in unit
        and "RestartForceExitStatus" not in unit
    )


@pytest.mark.parametrize("version", ["0.5.23", "0.5.17"])
def test_a_normal_stop_is_a_clean_stop(version):
    unit = unit_for(version)
    proc = launcher(version)
    ended, took = systemd_like.stop(proc, unit)
    assert ended == "success" and took < 5, (ended, proc.returncode)


def test_without_its_success_status_a_0_5_17_stop_leaves_the_unit_failed():
    """What the bug looked like: the same drained stop, judged by a unit without the setting."""
    proc = launcher("0.5.17")
    ended, _ = systemd_like.stop(proc, unit_for("0.5.23"))
    assert ended == "signal" and proc.returncode == -signal.SIGKILL


@pytest.mark.parametrize("version", ["0.5.23", "0.5.17"])
def test_a_crash_still_restarts(version):
    unit = systemd_like.settings(unit_for(version))
    proc = launcher("crash")
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    assert systemd_like.restarts(proc.returncode, unit)
    # 0.5.23: the crash reads failed (Result=signal), as before; 0.5.17: a restart counted in
    # NRestarts with its cause in the journal, the unit never failed.
    assert systemd_like.result(proc.returncode, unit) == ("signal" if version == "0.5.23" else "success")
    assert not systemd_like.restarts(0, unit) and not systemd_like.restarts(
        proc.returncode, unit, stopped=True
    )


def test_restart_no_is_honoured():
    unit = systemd_like.settings(unit_for("0.5.17", restart="no"))
    assert "RestartForceExitStatus" not in unit and not systemd_like.restarts(-signal.SIGKILL, unit)
