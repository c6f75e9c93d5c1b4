"""The last known good: saved only from a server that runs exactly what is installed; a save of
what is already recorded changes nothing; compare says what differs."""

import json
import os
import shutil
import sys
import time

import pytest

from sglang_deploy.node import lastgood
from sglang_deploy.node.lib import last_good_check, result, status


def show(started_wall, now, monotonic, **extra):
    props = {
        "Id": "sglang.service",
        "ActiveState": "active",
        "SubState": "running",
        "MainPID": "42",
        "NeedDaemonReload": "no",
        "ExecMainStartTimestampMonotonic": str(int((monotonic - (now - started_wall)) * 1e6)),
    }
    props.update(extra)
    return props


NOW, MONO = 1_800_000_000.0, 5000.0


def test_a_server_started_after_its_files_runs_them():
    assert (
        last_good_check.not_running(
            show(NOW - 60, NOW, MONO), {"env": NOW - 120, "sglang": NOW - 600}, now=NOW, monotonic=MONO
        )
        is None
    )


def test_files_written_after_the_start_are_not_what_runs():
    why = last_good_check.not_running(
        show(NOW - 60, NOW, MONO), {"env": NOW - 30, "unit": NOW - 120}, now=NOW, monotonic=MONO
    )
    assert why == "the server started before env changed: it does not run the installed configuration"


@pytest.mark.parametrize(
    "extra, reason",
    [
        ({"ActiveState": "failed", "SubState": "failed", "MainPID": "0"}, "sglang.service is failed/failed"),
        ({"ActiveState": "activating", "SubState": "start"}, "is activating/start, not running"),
        ({"NeedDaemonReload": "yes"}, "daemon-reload pending"),
    ],
)
def test_a_unit_not_running_its_installed_files(extra, reason):
    assert reason in last_good_check.not_running(
        show(NOW - 60, NOW, MONO, **extra), {}, now=NOW, monotonic=MONO
    )


@pytest.fixture
def node(tmp_path, monkeypatch):
    """Installed files, a venv whose interpreter is this one, and a unit started at `started`."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    os.symlink(sys.executable, venv / "bin" / "python")
    env = tmp_path / "sglang.env"
    env.write_text("A=1\n")
    unit = tmp_path / "sglang.service"
    unit.write_text("[Service]\n")
    state = {"started": time.time() + 5}  # by default the server started after everything

    def unit_show(name, props=None, **kwargs):
        return {
            "Id": name,
            "ActiveState": "active",
            "SubState": "running",
            "MainPID": "42",
            "NeedDaemonReload": "no",
            "ExecMainStartTimestampMonotonic": str(
                int((time.monotonic() - (time.time() - state["started"])) * 1e6)
            ),
        }

    monkeypatch.setattr(last_good_check.systemd, "unit_show", unit_show)
    return {
        "venv": str(venv),
        "files": {"env": str(env), "unit": str(unit)},
        "dir": str(tmp_path / "lg"),
        "state": state,
        "env": env,
    }


def save(node, profile, unit="sglang.service"):
    return lastgood.save(node["dir"], profile, node["venv"], node["files"], ["pytest"], None, unit=unit)


def test_the_serving_configuration_is_saved_then_compare_finds_nothing_to_record(node, capsys):
    before = lastgood.compare(node["dir"], "p1", node["venv"], node["files"], ["pytest"], "sglang.service")
    assert before["last_good"] is None and before["differs"] == ["nothing saved yet"]
    assert save(node, "p1") == status.READY
    after = lastgood.compare(node["dir"], "p1", node["venv"], node["files"], ["pytest"], "sglang.service")
    assert after == {"last_good": "p1", "differs": [], "not_running": None}
    assert save(node, "p1") == status.READY
    assert "p1 is already the last known good" in capsys.readouterr().out


def test_a_changed_file_differs_and_is_saved_once_the_server_runs_it(node, capsys):
    assert save(node, "p1") == status.READY
    node["env"].write_text("A=2\n")
    os.utime(node["files"]["unit"], (time.time() - 600, time.time() - 600))
    node["state"]["started"] = time.time() - 60  # the server predates the new env file
    found = lastgood.compare(node["dir"], "p2", node["venv"], node["files"], ["pytest"], "sglang.service")
    assert found["differs"] == ["profile p1 -> p2", "env"]
    assert "started before env changed" in found["not_running"]
    assert save(node, "p2") == status.NOT_INSTALLED_CONFIG
    assert "not saved as last known good: the server started before env changed" in capsys.readouterr().out
    assert lastgood.load(node["dir"])["profile"] == "p1"
    node["state"]["started"] = time.time() + 5  # restarted: now it runs the new env file
    assert save(node, "p2") == status.READY
    manifest = lastgood.load(node["dir"])
    assert manifest["profile"] == "p2" and manifest["engine"]["pytest"] == pytest.__version__


def test_a_restored_file_is_written_now(node, monkeypatch):
    # Not the saved copy's old mtime: a server that predates the restore does not run it.
    os.utime(node["files"]["env"], (1, 1))
    assert save(node, "p1") == status.READY
    node["env"].write_text("A=2\n")
    monkeypatch.setattr(lastgood.subprocess, "run", lambda *a, **k: None)  # no daemon-reload here
    monkeypatch.setattr(lastgood, "restore_engine", lambda manifest: None)
    lastgood.restore(node["dir"])
    assert node["env"].read_text() == "A=1\n"
    assert os.stat(node["files"]["env"]).st_mtime > time.time() - 60


def test_show_without_dir_finds_every_saved_one(node, last_good_record, capsys):
    assert lastgood.main(["show"]) == status.NO_LAST_GOOD
    assert "no last known good saved on this node yet" in capsys.readouterr().out
    assert save(node, "p1") == status.READY
    capsys.readouterr()
    assert lastgood.main(["show"]) == status.READY
    shown = json.loads("\n".join(result.progress(capsys.readouterr().out.splitlines())))
    assert list(shown) == [node["dir"]] and shown[node["dir"]]["profile"] == "p1"
    assert lastgood.main(["show", "--dir", node["dir"]]) == status.READY
    printed = capsys.readouterr().out
    assert result.parse(printed.splitlines())["manifest"]["profile"] == "p1"  # what the controller reads
    assert lastgood.main(["show", "--dir", node["dir"]]) == status.READY
    assert json.loads("\n".join(result.progress(capsys.readouterr().out.splitlines())))["profile"] == "p1"


def test_every_action_but_show_needs_dir():
    with pytest.raises(SystemExit):
        lastgood.main(["restore"])


# -- killed at any step, a complete last known good remains ----------------------------------


class Killed(Exception):
    """The process died here (a kill -9, a power cut): nothing after this step ran."""


# Every call that changes the filesystem is a step; a save or restore is killed before step k.
STEPS = {
    os: ("rename", "replace", "makedirs", "mkdir", "unlink", "remove", "rmdir", "fsync", "chmod", "symlink"),
    shutil: ("copy2", "copyfile", "copystat", "rmtree", "move"),
}


def killed_at(monkeypatch, k, action):
    """Run ``action`` with the filesystem step ``k`` (0-based) raising Killed; True when the
    action ran to its end without reaching step k."""
    count = {"n": 0}
    with monkeypatch.context() as m:
        for module, names in STEPS.items():
            for name in names:

                def step(*args, _real=getattr(module, name), **kwargs):
                    if count["n"] == k:
                        raise Killed()
                    count["n"] += 1
                    return _real(*args, **kwargs)

                m.setattr(module, name, step)
        try:
            action()
        except Killed:
            return False
    return True


def assert_complete(directory, profiles):
    """A last known good is there, whole: a manifest of one of ``profiles`` whose every copy
    hashes to it, which a restore takes."""
    from sglang_deploy.node.lib import last_good_record

    manifest = lastgood.load(directory)
    assert manifest is not None and manifest["profile"] in profiles
    assert last_good_record.incomplete(last_good_record.locate(directory), manifest) == []
    return manifest


@pytest.fixture
def quick(node, monkeypatch):
    monkeypatch.setattr(lastgood, "installed_versions", lambda venv: {})  # no interpreter run per step
    monkeypatch.setattr(lastgood.subprocess, "run", lambda *a, **k: None)  # no daemon-reload here
    return node


def fresh(quick, tmp_path, k):
    """This node with p1 saved and the files changed to p2's, in a directory of its own."""
    directory = str(tmp_path / ("lg-%d" % k))
    quick["env"].write_text("A=1\n")
    assert lastgood.save(directory, "p1", quick["venv"], quick["files"], [], None) == status.READY
    quick["env"].write_text("A=2\n")
    return directory


def test_a_save_killed_at_any_step_leaves_a_complete_last_known_good(quick, tmp_path, monkeypatch):
    k = 0
    while True:
        directory = fresh(quick, tmp_path, k)
        done = killed_at(
            monkeypatch, k, lambda: lastgood.save(directory, "p2", quick["venv"], quick["files"], [], None)
        )
        assert_complete(directory, ("p1", "p2"))
        # The next save (the next deploy) finishes the job from whatever was left.
        assert lastgood.save(directory, "p2", quick["venv"], quick["files"], [], None) == status.READY
        assert assert_complete(directory, ("p2",))
        assert sorted(os.listdir(tmp_path)).count(os.path.basename(directory)) == 1
        assert not os.path.exists(directory + ".new") and not os.path.exists(directory + ".old")
        if done:
            break
        k += 1
    assert k > 8  # every step of the save was a place to die: copies, flushes, both renames


def test_a_restore_killed_at_any_step_leaves_the_record_and_whole_files(quick, tmp_path, monkeypatch):
    k = 0
    while True:
        directory = fresh(quick, tmp_path, k)
        done = killed_at(monkeypatch, k, lambda: lastgood.restore(directory))
        assert_complete(directory, ("p1",))
        assert quick["env"].read_text() in ("A=1\n", "A=2\n")  # the old file or the restored one
        assert lastgood.restore(directory) == status.READY  # the next run restores it all
        assert quick["env"].read_text() == "A=1\n"
        if done:
            break
        k += 1
    assert k > 2


def test_a_save_killed_between_its_renames_is_found_and_put_back(quick, tmp_path, capsys):
    directory = fresh(quick, tmp_path, 0)
    os.rename(directory, directory + ".old")  # the instant between the two renames
    assert lastgood.load(directory)["profile"] == "p1"
    assert lastgood.restore(directory) == status.READY and quick["env"].read_text() == "A=1\n"
    assert lastgood.save(directory, "p2", quick["venv"], quick["files"], [], None) == status.READY
    assert lastgood.load(directory)["profile"] == "p2" and not os.path.exists(directory + ".old")


def test_a_damaged_record_is_refused_with_nothing_written(quick, tmp_path, capsys):
    directory = fresh(quick, tmp_path, 0)
    with open(os.path.join(directory, "env"), "w") as f:
        f.write("A=")  # a copy cut short
    assert lastgood.restore(directory) == status.PREFLIGHT_FAILED
    found = result.parse(capsys.readouterr().out.splitlines())
    assert "is incomplete (env: its saved copy differs from the manifest)" in found["cause"]
    assert "nothing was changed" in found["cause"] and quick["env"].read_text() == "A=2\n"


def test_a_canary_is_rolled_back_to_the_record_kept_before_it(node, monkeypatch, capsys):
    """The canary passed its gate (p2 saved over p1); its failed bake puts p1 back, files and
    record, although p2 is what the record held."""
    kept = node["dir"] + ".before-canary"
    assert save(node, "p1") == status.READY
    assert lastgood.main(["keep", "--dir", node["dir"], "--to", kept]) == status.READY
    node["env"].write_text("A=2\n")
    node["state"]["started"] = time.time() + 5
    assert save(node, "p2") == status.READY
    assert lastgood.load(node["dir"])["profile"] == "p2"
    monkeypatch.setattr(lastgood.subprocess, "run", lambda *a, **k: None)  # no daemon-reload here
    monkeypatch.setattr(lastgood, "restore_venv", lambda manifest: True)
    capsys.readouterr()
    assert lastgood.main(["reinstate", "--dir", node["dir"], "--kept", kept]) == status.READY
    out = capsys.readouterr().out
    assert "reinstated p1 as the last known good" in out and "restored p1" in out
    assert node["env"].read_text() == "A=1\n"
    assert lastgood.load(node["dir"])["profile"] == "p1"
    assert result.parse(out.splitlines())["profile"] == "p1"


def test_keep_and_reinstate_without_a_record_change_nothing(node, capsys):
    kept = node["dir"] + ".before-canary"
    assert lastgood.main(["keep", "--dir", node["dir"], "--to", kept]) == status.NO_LAST_GOOD
    assert lastgood.main(["reinstate", "--dir", node["dir"], "--kept", kept]) == status.NO_LAST_GOOD
    assert "nothing kept" in capsys.readouterr().out
    assert lastgood.load(node["dir"]) is None and not os.path.exists(kept)
