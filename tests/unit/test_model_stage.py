"""Staging on the node (node/model_stage.py): the live directory changes only by the restart
cycle's swap of a complete, verified staging directory (the old weights kept beside it); live
files the new manifest lists unchanged are kept."""

import json
import os
from pathlib import Path

from sglang_deploy.node import model_manifest, model_stage
from sglang_deploy.node.lib import result, status


def write_files(directory, files):
    for name, data in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def manifest_of(tmp_path, files):
    source = tmp_path / "source"
    write_files(source, files)
    return model_manifest.build(str(source))


def start_staging(live, manifest):
    staging = model_stage.staging_dir(str(live))
    os.makedirs(staging, exist_ok=True)
    with open(os.path.join(staging, model_manifest.MANIFEST_NAME), "w") as f:
        json.dump(manifest, f)
    return staging


V1 = {"config.json": b"{}", "shard-1": b"a" * 1000, "shard-2": b"b" * 1000}
V2 = {"config.json": b"{}", "shard-1": b"a" * 1000, "shard-2": b"c" * 2000}


def staged_v1(tmp_path):
    live = tmp_path / "models" / "m"
    write_files(live, V1)
    model_manifest.write(str(live), model_manifest.build(str(live)))
    return live


def test_state_reports_digest_staged_files_and_free_disk(tmp_path):
    live = staged_v1(tmp_path)
    staging = start_staging(live, manifest_of(tmp_path, V2))
    write_files(tmp_path / "models" / "m.sglang-deploy-staging", {"shard-2": b"c" * 10})
    found = model_stage.state(str(live))
    assert found["digest"] == model_manifest.digest(model_manifest.build(str(live)))
    assert found["staged"] == [["shard-2", 10]] and found["problems"] == []
    assert found["free"] > 0 and staging.endswith(".sglang-deploy-staging")


def test_seed_links_unchanged_files_only(tmp_path):
    live = staged_v1(tmp_path)
    start_staging(live, manifest_of(tmp_path, V2))
    assert sorted(model_stage.seed(str(live))) == ["config.json", "shard-1"]
    staged = tmp_path / "models" / "m.sglang-deploy-staging"
    assert os.path.samefile(staged / "shard-1", live / "shard-1")
    assert not (staged / "shard-2").exists()


def test_seed_skips_a_live_file_that_no_longer_matches(tmp_path):
    live = staged_v1(tmp_path)
    start_staging(live, manifest_of(tmp_path, V1))
    (live / "shard-1").write_bytes(b"a" * 10)  # truncated on the node
    (live / "shard-2").write_bytes(b"x" * 1000)  # same size, other bytes: only deep sees it
    assert sorted(model_stage.seed(str(live), deep=True)) == ["config.json"]


def test_finish_refuses_an_incomplete_copy_and_leaves_the_live_model(tmp_path):
    live = staged_v1(tmp_path)
    before = model_manifest.read(str(live))
    start_staging(live, manifest_of(tmp_path, V2))
    model_stage.seed(str(live))
    write_files(
        tmp_path / "models" / "m.sglang-deploy-staging", {"shard-2": b"c" * 1500, ".upload-1": b"half"}
    )
    problems = model_stage.finish(str(live))
    assert problems == ["shard-2: 1500 bytes, the manifest says 2000 (truncated or partial?)"]
    assert model_manifest.read(str(live)) == before and (live / "shard-2").read_bytes() == V1["shard-2"]
    staged = tmp_path / "models" / "m.sglang-deploy-staging"
    assert sorted(os.listdir(staged)) == [model_manifest.MANIFEST_NAME, "config.json", "shard-1"]


def test_finish_verifies_and_the_swap_keeps_the_old_weights(tmp_path):
    live = staged_v1(tmp_path)
    start_staging(live, manifest_of(tmp_path, V2))
    model_stage.seed(str(live))
    write_files(tmp_path / "models" / "m.sglang-deploy-staging", {"shard-2": V2["shard-2"]})
    assert model_stage.finish(str(live)) == []
    assert (live / "shard-2").read_bytes() == V1["shard-2"]  # verified, not swapped in
    assert model_stage.swap({str(live): None}) == [str(live)]
    assert (live / "shard-2").read_bytes() == V2["shard-2"]
    assert model_manifest.check(str(live), deep=True)[0] == []
    assert sorted(os.listdir(tmp_path / "models")) == ["m", "m.sglang-deploy-previous"]
    assert (tmp_path / "models" / "m.sglang-deploy-previous" / "shard-2").read_bytes() == V1["shard-2"]


def test_finish_in_place_swaps_at_once_and_keeps_nothing(tmp_path):
    live = staged_v1(tmp_path)
    start_staging(live, manifest_of(tmp_path, V2))
    model_stage.seed(str(live))
    write_files(tmp_path / "models" / "m.sglang-deploy-staging", {"shard-2": V2["shard-2"]})
    assert model_stage.finish(str(live), in_place=True) == []
    assert (live / "shard-2").read_bytes() == V2["shard-2"]
    assert sorted(os.listdir(tmp_path / "models")) == ["m"]


def test_finish_stages_into_a_directory_that_did_not_exist(tmp_path):
    live = tmp_path / "models" / "new"
    start_staging(live, manifest_of(tmp_path, V1))
    write_files(tmp_path / "models" / "new.sglang-deploy-staging", V1)
    assert model_stage.finish(str(live)) == []
    assert model_stage.swap({str(live): None}) == [str(live)]
    assert model_manifest.check(str(live), deep=True) == ([], model_manifest.read(str(live)))


# -- a model directory that is a symlink (/models/m -> /nvme/m) ------------------------------


def linked_v1(tmp_path):
    """/models/m -> /nvme/m, holding V1."""
    target = staged_v1(tmp_path / "nvme")
    link = tmp_path / "models" / "m"
    link.parent.mkdir(parents=True)
    os.symlink(str(target), str(link))
    return link, target


def stage_through(tmp_path, link, files, command):
    """What the controller does: the manifest and the files into the staging directory
    `state` names, `seed` between (hard links: the staging directory is on the target's
    filesystem); then `finish` through ``command`` (main, or the function)."""
    found = model_stage.state(str(link))
    staging = found.get("staging") or model_stage.staging_dir(str(link))  # as operations/model.py
    os.makedirs(staging, exist_ok=True)
    with open(os.path.join(staging, model_manifest.MANIFEST_NAME), "w") as f:
        json.dump(manifest_of(tmp_path, files), f)
    kept = model_stage.seed(str(link))
    assert "shard-1" in kept
    write_files(Path(staging), {"shard-2": files["shard-2"]})
    return command(str(link))


def test_a_symlinked_model_directory_is_staged_at_its_target_and_the_link_stays(tmp_path, capsys):
    link, target = linked_v1(tmp_path)
    code = stage_through(tmp_path, link, V2, lambda d: model_stage.main(["finish", "--dir", d]))
    assert code == 0 and result.parse(capsys.readouterr().out.splitlines())["status"] == 0
    assert model_stage.main(["swap", "--want-json", json.dumps({str(link): None})]) == 0
    assert result.parse(capsys.readouterr().out.splitlines())["swapped"] == [str(link)]
    assert os.path.islink(link) and os.readlink(link) == str(target)
    found = model_stage.state(str(link))
    assert found["target"] == str(target) and found["staging"] == str(target) + ".sglang-deploy-staging"
    assert (link / "shard-2").read_bytes() == V2["shard-2"] and (target / "shard-2").read_bytes() == V2[
        "shard-2"
    ]
    assert sorted(os.listdir(tmp_path / "models")) == ["m"]  # nothing staged beside the link
    # Staging swapped in, the old copy kept beside the target until recorded.
    assert sorted(os.listdir(target.parent)) == ["m", "m.sglang-deploy-previous"]
    v2 = model_manifest.digest(manifest_of(tmp_path, V2))
    assert model_stage.state(str(link))["digest"] == v2
    assert model_stage.forget_previous(str(link), v2) and sorted(os.listdir(target.parent)) == ["m"]
    # And again (another revision later): the link still stands.
    assert stage_through(tmp_path, link, V1, model_stage.finish) == []
    assert model_stage.swap({str(link): None}) == [str(link)] and os.path.islink(link)
    assert (link / "shard-2").read_bytes() == V1["shard-2"]


def test_a_link_an_earlier_release_left_as_the_old_copy_is_removed_not_followed(tmp_path):
    live = staged_v1(tmp_path)
    elsewhere = staged_v1(tmp_path / "elsewhere")
    os.symlink(str(elsewhere), str(live) + model_stage.OLD_SUFFIX)  # what the link-renaming swap left
    start_staging(live, manifest_of(tmp_path, V2))
    model_stage.seed(str(live))
    write_files(tmp_path / "models" / "m.sglang-deploy-staging", {"shard-2": V2["shard-2"]})
    assert model_stage.finish(str(live)) == [] and model_stage.swap({str(live): None}) == [str(live)]
    assert (live / "shard-2").read_bytes() == V2["shard-2"]
    assert (elsewhere / "shard-2").read_bytes() == V1["shard-2"]  # what the old link pointed at is kept
    assert not os.path.lexists(str(live) + model_stage.OLD_SUFFIX)


def test_any_error_still_ends_with_a_result_line_and_its_cause(tmp_path, capsys, monkeypatch):
    live = staged_v1(tmp_path)
    start_staging(live, manifest_of(tmp_path, V2))
    model_stage.seed(str(live))
    write_files(tmp_path / "models" / "m.sglang-deploy-staging", {"shard-2": V2["shard-2"]})
    assert model_stage.finish(str(live)) == []  # verified: the swap gets as far as its renames

    def full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(model_stage.os, "rename", full)
    assert model_stage.main(["swap", "--want-json", json.dumps({str(live): None})]) == status.UNEXPECTED
    found = result.parse(capsys.readouterr().out.splitlines())
    assert found["result"] == "UNEXPECTED"
    assert found["cause"] == "unexpected error: OSError: [Errno 28] No space left on device"
