"""A model directory that is its own mount point (/models/m on a disk of its own, a bind mount):
staged and swapped on that filesystem (inside it: the directory cannot be renamed, EBUSY), its
free space the one measured, a swap killed halfway finished before anything reads it, and a
layout nothing works on refused before anything is touched. Real mounts on temporary
directories (a bind mount, a small tmpfs); skipped where this machine does not allow mounting."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_model_stage import V1, V2, manifest_of, write_files

from sglang_deploy.node import model_manifest, model_stage
from sglang_deploy.node.lib import mount_swap, mounts, result

NODE_SCRIPTS = Path(model_stage.__file__).resolve().parent


def _mount(argv, where):
    if os.geteuid() != 0:
        pytest.skip("mounting needs root")
    done = subprocess.run(argv + [str(where)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"{' '.join(argv)} not permitted here: {done.stderr.strip()}")


@pytest.fixture
def mount_at():
    """mount_at(path, "bind" | "tmpfs:SIZE"): that path made a mount point, unmounted after."""
    mounted = []

    def mount_at(path, how="bind"):
        path.mkdir(parents=True, exist_ok=True)
        if how == "bind":
            _mount(["mount", "--bind", str(path)], path)  # its own directory: same st_dev as its parent
        else:
            _mount(["mount", "-t", "tmpfs", "-o", "size=" + how.split(":")[1], "tmpfs"], path)
        mounted.append(path)
        return path

    yield mount_at
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], check=False)


def stage(tmp_path, directory, files):
    """What the controller does: manifest and files into the staging directory `state` names,
    `seed` between; then `finish`."""
    found = model_stage.state(str(directory))
    assert not found.get("layout_problem")
    staging = Path(found["staging"])
    staging.mkdir(parents=True, exist_ok=True)
    (staging / model_manifest.MANIFEST_NAME).write_text(json.dumps(manifest_of(tmp_path, files)))
    model_stage.seed(str(directory))
    write_files(staging, {k: v for k, v in files.items() if not (staging / k).exists()})
    assert model_stage.finish(str(directory)) == []


def live_v1(directory):
    write_files(directory, V1)
    model_manifest.write(str(directory), model_manifest.build(str(directory)))


def digest(tmp_path, files):
    return model_manifest.digest(manifest_of(tmp_path / "digest", files))


def test_a_bind_mount_is_a_mount_point_though_its_device_is_its_parents(tmp_path, mount_at):
    live = mount_at(tmp_path / "models" / "m")
    assert os.stat(live).st_dev == os.stat(live.parent).st_dev and not os.path.ismount(live)
    assert mounts.is_mount_point(str(live)) and not mounts.is_mount_point(str(live.parent))


def test_a_mount_point_is_staged_and_swapped_inside_itself(tmp_path, mount_at):
    live = mount_at(tmp_path / "models" / "m")
    live_v1(live)
    found = model_stage.state(str(live))
    assert found["staging"] == str(live / ".sglang-deploy-staging")
    assert found["previous_dir"] == str(live / ".sglang-deploy-previous")
    stage(tmp_path, live, V2)
    assert (live / "shard-2").read_bytes() == V1["shard-2"]  # nothing changed before the swap
    assert os.path.samefile(live / "shard-1", live / ".sglang-deploy-staging" / "shard-1")  # kept, linked

    assert model_stage.swap({str(live): None}) == [str(live)]  # EBUSY, were the directory renamed
    assert (live / "shard-2").read_bytes() == V2["shard-2"]
    assert sorted(os.listdir(tmp_path / "models")) == ["m"]  # nothing on the parent's disk
    found = model_stage.state(str(live))
    assert found["digest"] == digest(tmp_path, V2) and found["problems"] == []
    assert found["previous"] == digest(tmp_path, V1)  # the old weights kept, inside
    assert model_manifest.build(str(live)) == manifest_of(tmp_path, V2)  # our entries are no model's

    # A rollback renames them back; the new ones wait staged again (a retry copies nothing).
    assert "renamed back" in model_stage.restore_weights(str(live), digest(tmp_path, V1))
    assert (live / "shard-2").read_bytes() == V1["shard-2"]
    assert model_stage.pending(str(live))["digest"] == digest(tmp_path, V2)
    assert model_stage.swap({str(live): None}) == [str(live)]
    # Recorded: the previous weights go; the mount point stays what it was.
    assert model_stage.forget_previous(str(live), digest(tmp_path, V2))
    assert sorted(os.listdir(live)) == sorted([*V2, model_manifest.MANIFEST_NAME])
    assert mounts.is_mount_point(str(live))


def test_free_space_is_measured_on_the_disk_the_weights_land_on(tmp_path, mount_at):
    live = mount_at(tmp_path / "models" / "m", "tmpfs:4m")
    live_v1(live)
    found = model_stage.state(str(live))
    assert found["free"] <= 4 << 20 < model_stage.free_bytes(str(tmp_path))
    stage(tmp_path, live, V2)
    assert model_stage.swap({str(live): None}) == [str(live)]
    assert (live / "shard-2").read_bytes() == V2["shard-2"]


def test_drop_live_keeps_the_mount_point_and_what_is_staged_in_it(tmp_path, mount_at):
    live = mount_at(tmp_path / "models" / "m")
    live_v1(live)
    found = model_stage.state(str(live))
    staging = Path(found["staging"])
    staging.mkdir()
    (staging / model_manifest.MANIFEST_NAME).write_text(json.dumps(manifest_of(tmp_path, V2)))
    model_stage.seed(str(live))
    model_stage.drop_live(str(live))  # model_keep_previous: false
    assert sorted(os.listdir(live)) == [".sglang-deploy-staging"] and mounts.is_mount_point(str(live))
    write_files(staging, {"shard-2": V2["shard-2"]})
    assert model_stage.finish(str(live), in_place=True) == []
    assert (live / "shard-2").read_bytes() == V2["shard-2"] and model_stage.pending(str(live)) is None


def test_copies_an_earlier_release_left_beside_a_mount_point_are_removed(tmp_path, mount_at, capsys):
    live = mount_at(tmp_path / "models" / "m")
    live_v1(live)
    stray = tmp_path / "models" / "m.sglang-deploy-staging"  # on the parent's (root) disk
    write_files(stray, {"shard-2": V2["shard-2"]})
    stage(tmp_path, live, V2)
    assert not stray.exists() and "on another filesystem" in capsys.readouterr().out


@pytest.mark.parametrize("killed_after", [1, 3, 5])
def test_a_swap_killed_halfway_is_finished_before_anything_reads_it(
    tmp_path, mount_at, monkeypatch, killed_after
):
    live = mount_at(tmp_path / "models" / "m")
    live_v1(live)
    stage(tmp_path, live, V2)
    renames, real = [], os.rename

    def dies(src, dst):
        if len(renames) == killed_after:
            raise KeyboardInterrupt("killed")
        renames.append(src)
        real(src, dst)

    monkeypatch.setattr(mount_swap.os, "rename", dies)
    with pytest.raises(KeyboardInterrupt):
        model_stage.swap({str(live): None})
    monkeypatch.setattr(mount_swap.os, "rename", real)
    assert (live / mount_swap.JOURNAL).exists()
    assert model_stage.pending(str(live)) is None  # what preflight asks: the swap finished first
    assert not (live / mount_swap.JOURNAL).exists()
    assert model_manifest.check(str(live)) == ([], model_manifest.read(str(live)))
    assert model_stage.state(str(live))["digest"] == digest(tmp_path, V2)
    assert model_stage.state(str(live))["previous"] == digest(tmp_path, V1)


def test_the_script_swaps_a_mount_point(tmp_path, mount_at):
    """Run as the node runs it (its own directory on sys.path: `from lib import mounts`)."""
    live = mount_at(tmp_path / "models" / "m")
    live_v1(live)
    stage(tmp_path, live, V2)
    argv = [
        sys.executable,
        str(NODE_SCRIPTS / "model_stage.py"),
        "swap",
        "--want-json",
        json.dumps({str(live): None}),
    ]
    done = subprocess.run(argv, capture_output=True, text=True)
    assert result.parse(done.stdout.splitlines())["swapped"] == [str(live)], done.stderr
    assert (live / "shard-2").read_bytes() == V2["shard-2"]


def test_a_layout_nothing_can_be_staged_on_is_refused_before_anything_is_touched(tmp_path, mount_at):
    assert "root directory" in model_stage.layout_problem("/")
    live = tmp_path / "models" / "m"
    live_v1(live)
    mount_at(tmp_path / "models" / "m.sglang-deploy-staging")  # something mounted where staging goes
    found = model_stage.state(str(live))
    assert "m.sglang-deploy-staging is a mount point" in found["layout_problem"]
    assert sorted(os.listdir(live)) == sorted([*V1, model_manifest.MANIFEST_NAME])
