"""Models inside the rollback, with the node scripts run for real in temporary directories: a
staged model waits for the restart cycle's model step (after preflight, which judges it), the
old weights stay until the new configuration is recorded and a rollback renames them back; a
disk without room for both is refused naming the setting; a deploy killed after staging still
restarts; a symlinked model directory swaps at its target."""

import os
import shlex
import sys
from pathlib import Path

import pytest
from pyinfra.api import FunctionCommand
from pyinfra.context import ctx_host
from test_hostile_input import NODE_SCRIPTS, StagingHost, run_on_node
from test_model_stage import V1, V2, manifest_of, start_staging, write_files

from sglang_deploy.node import cycle, lastgood, model_manifest, model_stage, preflight
from sglang_deploy.node.lib import last_good_check, result, status
from sglang_deploy.operations import model as model_ops
from sglang_deploy.plan import model_sources
from sglang_deploy.plan.commands import model_stage_command
from sglang_deploy.plan.model_sources import StagingTarget
from sglang_deploy.profile.schema import Source

PREVIOUS = ".sglang-deploy-previous"  # where the swap keeps the old weights


def live_v1(directory):
    write_files(directory, V1)
    model_manifest.write(str(directory), model_manifest.build(str(directory)))
    return directory


def staged_v2(tmp_path, live, files=V2):
    """V2 staged beside ``live`` and verified (what the deploy's model step leaves)."""
    staging = Path(model_stage.staging_dir(model_stage.staged_at(str(live))))  # a link's: its target's
    start_staging(
        staging.with_name(staging.name[: -len(model_stage.STAGING_SUFFIX)]), manifest_of(tmp_path, files)
    )
    model_stage.seed(str(live))
    write_files(staging, {k: v for k, v in files.items() if not (staging / k).exists()})
    assert model_stage.finish(str(live)) == []


def digest(files, tmp_path):
    return model_manifest.digest(manifest_of(tmp_path / "digest", files))


def shard(live):
    return (Path(live) / "shard-2").read_bytes()


# -- the cycle's model step ------------------------------------------------------------------


def _probe(tmp_path, name, live, code=0):
    """A stand-in step that logs which weights the live directory held when it ran."""
    log = tmp_path / "ran"
    py = (
        f"import json; d = open({str(live)!r} + '/shard-2', 'rb').read()[:1].decode(); "
        f"open({str(log)!r}, 'a').write('{name}:' + d + '\\n'); "
        f"print(json.dumps({{'status': {code}, 'result': 'X', 'cause': None, 'profile': 'v1'}})); "
        f"raise SystemExit({code})"
    )
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(py)}"


def test_a_staged_model_waits_for_the_cycles_model_step_after_preflight(tmp_path, capsys):
    live = live_v1(tmp_path / "models" / "m")
    staged_v2(tmp_path, live)
    assert shard(live) == V1["shard-2"]  # the deploy's model step staged it: nothing swapped
    commands = {name: _probe(tmp_path, name, live) for name in cycle.STEPS}
    commands["model"] = model_stage_command(str(NODE_SCRIPTS), "swap", None, want={str(live): None})
    assert cycle.cycle(commands) == status.READY
    found = result.parse(capsys.readouterr().out.splitlines())
    ran = (tmp_path / "ran").read_text().split()
    # b: V1's shard-2, c: V2's: swapped after preflight and switch, before the restart.
    assert ran == ["preflight:b", "switch:b", "restart:c", "gate:c", "workers:c", "recheck:c", "save:c"]
    assert [s["step"] for s in found["steps"]][:3] == ["preflight", "engine venv switch", "staged model swap"]
    assert (tmp_path / "models" / ("m" + PREVIOUS) / "shard-2").read_bytes() == V1["shard-2"]


def test_a_failed_preflight_leaves_the_staged_model_unswapped(tmp_path, capsys):
    live = live_v1(tmp_path / "models" / "m")
    staged_v2(tmp_path, live)
    commands = {name: _probe(tmp_path, name, live) for name in cycle.STEPS}
    commands["preflight"] = _probe(tmp_path, "preflight", live, code=status.PREFLIGHT_FAILED)
    commands["model"] = model_stage_command(str(NODE_SCRIPTS), "swap", None, want={str(live): None})
    assert cycle.cycle(commands) == status.PREFLIGHT_FAILED
    assert shard(live) == V1["shard-2"] and model_stage.pending(str(live)) is not None


def test_a_staged_model_of_another_source_is_not_swapped(tmp_path):
    live = live_v1(tmp_path / "models" / "m")
    staged_v2(tmp_path, live)  # its manifest has no source: an abandoned deploy's, say
    assert model_stage.swap({str(live): {"controller": "/elsewhere"}}) == []
    assert shard(live) == V1["shard-2"]


def test_preflight_checks_the_staged_directory_not_the_live_one(tmp_path):
    live = live_v1(tmp_path / "models" / "m")
    no_config = {k: v for k, v in V2.items() if k != "config.json"}
    staged_v2(tmp_path, live, no_config)
    verdict, text = preflight.check_model_dir("model path", str(live))
    assert verdict == "failed" and text.endswith(".sglang-deploy-staging has no config.json"), text
    model_stage.swap({str(live): None})  # once swapped, the live one is what it checks
    assert preflight.check_model_dir("model path", str(live))[0] == "failed"


# -- the last known good: the weights recorded, kept, renamed back ---------------------------


@pytest.fixture
def node(tmp_path, monkeypatch):
    """What lastgood.py needs: installed files, a venv (this interpreter), a unit that runs."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    os.symlink(sys.executable, venv / "bin" / "python")
    (tmp_path / "sglang.env").write_text("A=1\n")
    running = {"since": 10**10}  # started after every file (far in the future)

    def unit_show(name, props=None, **kwargs):
        import time

        started = time.monotonic() - (time.time() - running["since"])
        return {
            "Id": name,
            "ActiveState": "active",
            "SubState": "running",
            "MainPID": "42",
            "NeedDaemonReload": "no",
            "ExecMainStartTimestampMonotonic": str(int(started * 1e6)),
        }

    monkeypatch.setattr(last_good_check.systemd, "unit_show", unit_show)
    real_run = lastgood.subprocess.run

    def run(argv, *args, **kwargs):  # no daemon-reload here; the venv's interpreter does run
        return None if argv[0] == "systemctl" else real_run(argv, *args, **kwargs)

    monkeypatch.setattr(lastgood.subprocess, "run", run)
    return {
        "venv": str(venv),
        "files": {"env": str(tmp_path / "sglang.env")},
        "dir": str(tmp_path / "lg"),
        "running": running,
    }


def save(node, live, profile):
    return lastgood.save(
        node["dir"], profile, node["venv"], node["files"], [], None, unit="u", model_dirs=[str(live)]
    )


def test_a_rollback_after_a_failed_gate_renames_the_old_weights_back(tmp_path, node, capsys):
    live = live_v1(tmp_path / "models" / "m")
    assert save(node, live, "v1") == status.READY
    assert lastgood.load(node["dir"])["models"] == {str(live): digest(V1, tmp_path)}
    inode = os.stat(live / "shard-2").st_ino
    staged_v2(tmp_path, live)
    model_stage.swap({str(live): None})  # the cycle's model step; then the gate fails
    assert lastgood.restore(node["dir"]) == status.READY
    assert shard(live) == V1["shard-2"] and os.stat(live / "shard-2").st_ino == inode  # renamed, not copied
    assert model_stage.state(str(live))["digest"] == digest(V1, tmp_path)
    assert model_stage.pending(str(live)) is not None  # the new weights staged again: a retry copies nothing
    assert "renamed back" in capsys.readouterr().out


def test_the_previous_weights_go_only_once_the_new_configuration_is_recorded(tmp_path, node):
    live = live_v1(tmp_path / "models" / "m")
    assert save(node, live, "v1") == status.READY
    staged_v2(tmp_path, live)
    model_stage.swap({str(live): None})
    previous = tmp_path / "models" / ("m" + PREVIOUS)
    found = lastgood.compare(node["dir"], "v1", node["venv"], node["files"], [], None, [str(live)])
    assert found["differs"] and found["differs"][0].startswith("model %s " % live)  # new weights: unrecorded
    node["running"]["since"] = 1  # the server predates the files: the save is refused
    assert save(node, live, "v1") == status.NOT_INSTALLED_CONFIG and previous.is_dir()
    node["running"]["since"] = 10**10
    assert save(node, live, "v1") == status.READY and not previous.exists()
    assert lastgood.load(node["dir"])["models"] == {str(live): digest(V2, tmp_path)}


def test_a_symlinked_model_directory_swaps_and_rolls_back_at_its_target(tmp_path, node):
    target = live_v1(tmp_path / "nvme" / "m")
    link = tmp_path / "models" / "m"
    link.parent.mkdir()
    os.symlink(str(target), str(link))
    assert save(node, link, "v1") == status.READY
    staged_v2(tmp_path, link)
    assert model_stage.swap({str(link): None}) == [str(link)]
    assert os.path.islink(link) and shard(link) == V2["shard-2"]
    assert sorted(os.listdir(tmp_path / "nvme")) == ["m", "m" + PREVIOUS]
    assert sorted(os.listdir(tmp_path / "models")) == ["m"]
    assert lastgood.restore(node["dir"]) == status.READY
    assert os.path.islink(link) and shard(link) == V1["shard-2"]
    assert sorted(os.listdir(tmp_path / "nvme")) == ["m", "m" + model_stage.STAGING_SUFFIX]


# -- the deploy's model step (operations/model.py, its commands run by bash) ------------------


@pytest.fixture
def source(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setattr(model_ops, "local_manifest", lambda d: model_sources.local_manifest(d, cache))
    monkeypatch.setattr(
        model_ops, "_swap_mode", lambda in_group: (False, False), raising=False
    )  # the default
    found = tmp_path / "controller" / "v2"
    write_files(found, V2)
    return found


class TightHost(StagingHost):
    """A node whose disk has ``free`` bytes left."""

    def __init__(self, shell_cwd, free):
        super().__init__(shell_cwd)
        self.free = free

    def get_fact(self, fact, **kwargs):
        found = super().get_fact(fact, **kwargs)
        return dict(found, free=self.free) if "free" in found else found


def model_step(tmp_path, source, live, free=None):
    cwd = tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)
    fake = StagingHost(cwd) if free is None else TightHost(cwd, free)
    target = StagingTarget("model", str(live), Source(controller=str(source)))
    with ctx_host.use(fake):
        return list(model_ops.model_staged._inner(target, str(NODE_SCRIPTS))), fake


def test_a_disk_without_room_for_both_copies_is_refused_naming_the_setting(tmp_path, source):
    live = live_v1(tmp_path / "models" / "m")
    commands, _ = model_step(tmp_path, source, live, free=100)  # shard-2 (2000 bytes) needed
    assert len(commands) == 1 and commands[0].function is model_ops.fail_with
    message = commands[0].args[0]
    assert "needs 0.00 GB" in message and "`model_keep_previous: false`" in message, message
    assert "nothing was copied" in message
    assert sorted(os.listdir(live.parent)) == ["m"]  # nothing touched


def test_model_keep_previous_false_removes_the_live_weights_first(tmp_path, source, monkeypatch):
    monkeypatch.setattr(model_ops, "_swap_mode", lambda in_group: (True, False), raising=False)
    live = live_v1(tmp_path / "models" / "m")
    commands, _ = model_step(tmp_path, source, live, free=1500)  # V1's shard-2 frees 1000 more
    assert any("drop-live" in str(getattr(c, "get_raw_value", lambda: c)()) for c in commands)
    run_on_node(commands, tmp_path / "cwd")
    assert shard(live) == V2["shard-2"] and sorted(os.listdir(live.parent)) == ["m"]


def test_a_deploy_killed_after_staging_still_restarts_on_the_next_run(tmp_path, source):
    live = live_v1(tmp_path / "models" / "m")
    commands, _ = model_step(tmp_path, source, live)
    run_on_node(commands, tmp_path / "cwd")  # staged and verified; then the deploy dies
    assert shard(live) == V1["shard-2"]
    again, fake = model_step(tmp_path, source, live)
    # Still a change (the restart's `_if` sees it), and nothing is copied again.
    assert fake.noops == [] and [type(c) for c in again] == [FunctionCommand]
    assert again[0].function is model_ops._finish and " pending " in again[0].args[1]
    run_on_node(again, tmp_path / "cwd")
    want = {str(live): {"controller": str(source)}}
    assert model_stage.swap(want) == [str(live)] and shard(live) == V2["shard-2"]
    # Swapped: the next run has nothing to do.
    assert model_step(tmp_path, source, live)[1].noops


def test_the_swap_mode_follows_the_setting_and_serving_groups():
    from types import SimpleNamespace

    for keep, in_group, mode in (
        (True, False, (False, False)),
        (False, False, (True, False)),
        (True, True, (False, True)),
    ):
        with ctx_host.use(SimpleNamespace(data={"model_keep_previous": keep})):
            assert model_ops._swap_mode(in_group) == mode


def test_a_repair_of_the_served_weights_replaces_the_damaged_files_at_once(tmp_path):
    """make repair: the same manifest re-staged because a live file was damaged. No restart
    would swap it in (the live manifest's digest is the staged one's): finish does, dropping the
    damaged copy, and the live directory hashes to its manifest again."""
    live = live_v1(tmp_path / "models" / "m")
    with open(live / "shard-2", "r+b") as damaged:
        damaged.truncate(1)
    assert model_manifest.compare(model_manifest.read(str(live)), str(live), deep=True)
    staged_v2(tmp_path, live, files=V1)
    assert model_manifest.compare(model_manifest.read(str(live)), str(live), deep=True) == []
    assert shard(live) == V1["shard-2"]
    assert model_stage.pending(str(live)) is None, "nothing left waiting for a restart"
    assert not (tmp_path / "models" / ("m" + PREVIOUS)).exists(), "the damaged copy is no rollback"
