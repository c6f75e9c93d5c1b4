"""node/fanout_pull.py: a copy from another node, through a stand-in rsync that reads the
"source node" from a local directory (and can drop the link or corrupt a file), then the
manifest check: nothing half-copied or altered is swapped in."""

import json
import os
import stat
import sys
import textwrap

import pytest

from sglang_deploy.node import fanout_pull, model_manifest, model_stage
from sglang_deploy.node.lib import result, status
from sglang_deploy.node.model_stage import staging_dir

FAKE_RSYNC = textwrap.dedent(
    """\
    #!{python}
    # Stands in for rsync pulling from a node: the source node's directory is $FAKE_SOURCE.
    import json, os, shutil, sys
    argv = sys.argv[1:]
    names = [line.rstrip("\\n") for line in sys.stdin if line.strip()]
    with open(os.environ["FAKE_LOG"], "w") as f:
        json.dump({{"argv": argv, "names": names}}, f)
    mode, dest = os.environ.get("FAKE_MODE", "ok"), argv[-1]
    for index, name in enumerate(names):
        if mode == "drop" and index == 1:
            sys.stderr.write("rsync: connection unexpectedly closed\\n")
            sys.exit(12)
        target = os.path.join(dest, name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(os.environ["FAKE_SOURCE"], name), target)
        if mode == "corrupt" and index == 0:
            with open(target, "r+b") as f:
                f.write(b"X")
    sys.exit(int(os.environ.get("FAKE_EXIT", "0")))
    """
)


@pytest.fixture
def world(tmp_path, monkeypatch):
    source = tmp_path / "parent" / "m"
    source.mkdir(parents=True)
    (source / "config.json").write_text('{"new": true}')
    (source / "tokenizer.json").write_text('{"same": 1}')
    (source / "shards").mkdir()
    (source / "shards" / "model-00001.safetensors").write_bytes(os.urandom(300_000))
    (source / "shards" / "model-00002.safetensors").write_bytes(os.urandom(200_000))
    manifest = model_manifest.build(str(source))
    # The node serves an older revision: tokenizer.json the same, the rest differs.
    live = tmp_path / "node" / "m"
    live.mkdir(parents=True)
    (live / "config.json").write_text('{"old": true}')
    (live / "tokenizer.json").write_text('{"same": 1}')
    model_manifest.write(str(live), model_manifest.build(str(live)))
    staging = staging_dir(str(live))
    os.makedirs(staging)
    with open(os.path.join(staging, model_manifest.MANIFEST_NAME), "w") as f:  # as the controller uploads it
        json.dump(dict(manifest, source={"controller": "/src"}), f)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "rsync"
    fake.write_text(FAKE_RSYNC.format(python=sys.executable))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SOURCE", str(source))
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "rsync.json"))
    return {
        "source": source,
        "live": live,
        "staging": staging,
        "manifest": manifest,
        "log": tmp_path / "rsync.json",
    }


def pull(world, capsys, *extra):
    code = fanout_pull.main(
        [
            "pull",
            "--dir",
            str(world["live"]),
            "--source",
            "root@10.0.0.2",
            "--port",
            "2222",
            "--key",
            "/run/sglang-deploy/fanout-x/key",
            "--known-hosts",
            "/run/sglang-deploy/fanout-x/known_hosts-n1",
            "--alias",
            "sglang-deploy-n1",
            "--timeout",
            "30",
            *extra,
        ]
    )
    found = result.parse(capsys.readouterr().out.splitlines())
    assert found["status"] == code
    return found


def live_digest(world):
    return model_manifest.digest(model_manifest.read(str(world["live"])))


def test_a_pull_copies_what_is_missing_and_checks_it_the_restart_swaps_it_in(world, capsys):
    found = pull(world, capsys)
    assert found["result"] == "READY", found
    # Verified and waiting (what this node serves its children): the live copy is untouched.
    waiting = model_stage.pending(str(world["live"]))
    assert waiting is not None and model_manifest.digest(waiting) == model_manifest.digest(world["manifest"])
    assert (world["live"] / "config.json").read_text() == '{"old": true}'
    log = json.loads(world["log"].read_text())
    # tokenizer.json is kept from the live revision (model_stage.seed): not asked of the source.
    assert sorted(log["names"]) == [
        "config.json",
        "shards/model-00001.safetensors",
        "shards/model-00002.safetensors",
    ]
    argv = log["argv"]
    assert "-s" not in argv  # rrsync refuses --secluded-args
    assert argv[-2:] == ["root@10.0.0.2:.", world["staging"] + "/"]  # the one remote path: rrsync's root
    ssh = argv[argv.index("-e") + 1]
    for word in (
        "-i /run/sglang-deploy/fanout-x/key",
        "-p 2222",
        "StrictHostKeyChecking=yes",
        "UserKnownHostsFile=/run/sglang-deploy/fanout-x/known_hosts-n1",
        "HostKeyAlias=sglang-deploy-n1",
        "BatchMode=yes",
        "IdentitiesOnly=yes",
    ):
        assert word in ssh
    assert "--files-from=-" in argv and "--timeout=30" in argv and "--partial-dir=.rsync-partial" in argv


def test_in_place_swaps_at_once_as_the_wheelhouse_does(world, capsys):
    found = pull(world, capsys, "--in-place")
    assert found["result"] == "READY", found
    assert live_digest(world) == model_manifest.digest(world["manifest"])
    assert (world["live"] / "config.json").read_text() == '{"new": true}'
    assert not os.path.exists(world["staging"])
    assert not os.path.exists(str(world["live"]) + model_stage.PREVIOUS_SUFFIX)


def test_a_source_that_goes_away_mid_copy_leaves_the_live_directory_and_says_so(world, capsys):
    os.environ["FAKE_MODE"] = "drop"
    try:
        found = pull(world, capsys)
    finally:
        del os.environ["FAKE_MODE"]
    assert found["result"] == "FANOUT_SOURCE_FAILED" and found["rsync_exit"] == 12, found
    assert "sglang-deploy-n1" in found["cause"]
    assert (world["live"] / "config.json").read_text() == '{"old": true}'
    assert model_manifest.read(str(world["live"]))["files"][0]["path"] == "config.json"
    assert os.path.isdir(world["staging"])  # where the next source resumes
    assert model_stage.pending(str(world["live"])) is None  # nothing verified: nothing served


def test_a_copy_that_does_not_match_the_manifest_is_not_swapped_in_and_the_bad_file_goes(world, capsys):
    os.environ["FAKE_MODE"] = "corrupt"
    try:
        found = pull(world, capsys)
    finally:
        del os.environ["FAKE_MODE"]
    assert found["result"] == "MODEL_MISMATCH", found
    bad = sorted(json.loads(world["log"].read_text())["names"])[0]
    assert any(p.startswith(bad + ": sha256") for p in found["problems"]), found["problems"]
    assert (world["live"] / "config.json").read_text() == '{"old": true}'
    assert not os.path.exists(os.path.join(world["staging"], bad))


def test_an_rsync_failure_here_is_not_blamed_on_the_source(world, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_EXIT", "11")  # a file I/O error on this node (its disk)
    found = pull(world, capsys)
    assert found["status"] == status.FANOUT_COPY_FAILED, found
    assert (world["live"] / "config.json").read_text() == '{"old": true}'


def test_files_already_staged_whole_are_not_asked_for_again(world, capsys):
    first = "shards/model-00001.safetensors"
    os.makedirs(os.path.join(world["staging"], "shards"))
    with open(os.path.join(world["staging"], first), "wb") as f:
        f.write((world["source"] / first).read_bytes())
    found = pull(world, capsys)
    assert found["result"] == "READY", found
    assert first not in json.loads(world["log"].read_text())["names"]


def test_a_staging_directory_without_a_manifest_copies_nothing(world, capsys):
    os.unlink(os.path.join(world["staging"], model_manifest.MANIFEST_NAME))
    found = pull(world, capsys)
    assert found["result"] == "MODEL_MISMATCH" and "no manifest" in found["cause"]
    assert not world["log"].exists()


def test_seed_keeps_live_files_that_hash_to_the_manifest_when_the_live_directory_has_none(tmp_path):
    # A wheelhouse an interrupted upload left: wheels, no manifest.
    live = tmp_path / "wheelhouse" / "lock-1"
    live.mkdir(parents=True)
    (live / "a-1.whl").write_bytes(b"good wheel")
    (live / "b-1.whl").write_bytes(b"bad  wheel")  # same size as the wanted one, other bytes
    wanted = {
        "files": [
            {"path": "a-1.whl", "size": 10, "sha256": model_manifest.sha256_file(str(live / "a-1.whl"))},
            {"path": "b-1.whl", "size": 10, "sha256": "0" * 64},
            {"path": "c-1.whl", "size": 3, "sha256": "1" * 64},
        ]
    }
    staging = staging_dir(str(live))
    os.makedirs(staging)
    model_manifest.write(staging, wanted)
    assert fanout_pull.seed_by_hash(str(live)) == ["a-1.whl"]
    assert os.path.samefile(os.path.join(staging, "a-1.whl"), live / "a-1.whl")
    assert fanout_pull.still_needed(staging, wanted) == wanted["files"][1:]


def test_bwlimit_reaches_rsync():
    argv = fanout_pull.rsync_argv("ssh", "u@h", "/s", bwlimit=5000, timeout=9)
    assert "--bwlimit=5000" in argv and "--timeout=9" in argv
    assert "--bwlimit" not in " ".join(fanout_pull.rsync_argv("ssh", "u@h", "/s"))
