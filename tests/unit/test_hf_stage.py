"""Downloading a Hub source on the node (node/hf_stage.py), against a fake hub: a pinned
revision staged with its manifest, a revision the hub does not know failing with the hub's
answer, a full disk named before any download, a re-run downloading nothing, the token never
in an answer."""

import hashlib
import os
from types import SimpleNamespace

import pytest

from sglang_deploy.node import hf_stage, model_manifest, model_stage
from sglang_deploy.node.lib import status

REPO, COMMIT = "org/tiny", "0123456789abcdef0123456789abcdef01234567"
TOKEN = "hf_secretvalue0123456789"
FILES = {"config.json": b"{}", "model.safetensors": b"w" * 4096}


class RevisionNotFoundError(Exception):
    pass


class FakeHub:
    """huggingface_hub's HfApi().model_info and snapshot_download, on one repo and commit.

    Its download into ``local_dir`` does what huggingface_hub 2.4.0's does there
    (file_download._hf_hub_download_to_local_dir): a file already there whose sha256 is the
    LFS file's etag is kept; anything else is written to a temporary file renamed over the
    path (never written through an existing file). ``fetched``: the files it downloaded."""

    def __init__(self, files=FILES, corrupt=None, commit=COMMIT):
        self.files, self.corrupt, self.commit, self.downloads, self.fetched = files, corrupt, commit, [], []

    def HfApi(self):  # noqa: N802: the hub's name
        return self

    def _lfs_sha(self, name):
        return hashlib.sha256(self.files[name]).hexdigest() if name.endswith(".safetensors") else None

    def model_info(self, repo, revision=None, files_metadata=False, token=None):
        if revision != self.commit:
            raise RevisionNotFoundError(
                f"404 Client Error. Revision Not Found for url: "
                f"https://huggingface.co/api/models/{repo}/revision/"
                f"{revision} (token {token})"
            )
        siblings = [
            SimpleNamespace(
                rfilename=name,
                size=len(data),
                lfs=SimpleNamespace(sha256=self._lfs_sha(name)) if self._lfs_sha(name) else None,
            )
            for name, data in self.files.items()
        ]
        return SimpleNamespace(sha=self.commit, siblings=siblings)

    def snapshot_download(self, repo, revision=None, local_dir=None, token=None):
        self.downloads.append((repo, revision, token))
        os.makedirs(os.path.join(local_dir, ".cache", "huggingface"), exist_ok=True)
        for name, data in self.files.items():
            path = os.path.join(local_dir, name)
            if self._lfs_sha(name) and os.path.isfile(path):
                with open(path, "rb") as f:
                    if hashlib.sha256(f.read()).hexdigest() == self._lfs_sha(name):
                        continue
            with open(path + ".incomplete", "wb") as f:
                f.write(self.corrupt if self.corrupt and name.endswith(".safetensors") else data)
            os.replace(path + ".incomplete", path)
            self.fetched.append(name)
        return local_dir


def test_a_pinned_revision_is_staged_with_its_manifest(tmp_path):
    hub, live = FakeHub(), str(tmp_path / "models" / "tiny")
    code, cause, details = hf_stage.stage(hub, REPO, COMMIT, live, token=TOKEN)
    assert (code, cause, details["changed"]) == (status.READY, None, True)
    assert hub.downloads == [(REPO, COMMIT, TOKEN)]
    # Staged and verified beside the live directory: the restart cycle swaps it in.
    assert not os.path.exists(live) and model_stage.pending(live) is not None
    again = FakeHub()  # a deploy killed before its restart: the next one downloads nothing
    assert hf_stage.stage(again, REPO, COMMIT, live, token=TOKEN)[2] == {"changed": True, "pending": True}
    assert again.downloads == []
    assert model_stage.swap({live: {"huggingface": {"repo": REPO, "revision": COMMIT}}}) == [live]
    manifest = model_manifest.read(live)
    assert manifest["source"] == {"huggingface": {"repo": REPO, "revision": COMMIT}}
    assert sorted(e["path"] for e in manifest["files"]) == sorted(FILES)
    assert not os.path.exists(os.path.join(live, ".cache"))
    assert not os.path.exists(model_stage.staging_dir(live))
    # A re-run asks the hub nothing.
    again = FakeHub()
    assert hf_stage.stage(again, REPO, COMMIT, live, token=TOKEN)[2] == {"changed": False}
    assert again.downloads == []


def test_a_new_revision_downloads_only_the_files_that_changed(tmp_path):
    live = str(tmp_path / "models" / "tiny")
    first = {"config.json": b"{}", "model-1.safetensors": b"a" * 4096, "model-2.safetensors": b"b" * 4096}
    hub = FakeHub(first)
    hf_stage.stage(hub, REPO, COMMIT, live)
    model_stage.swap({live: None})
    assert sorted(hub.fetched) == sorted(first)
    # The next revision changes the config and one shard; the other shard is the same LFS object.
    second = {
        "config.json": b'{"v": 2}',
        "model-1.safetensors": b"a" * 4096,
        "model-2.safetensors": b"c" * 4096,
    }
    commit = "f" * 40
    hub = FakeHub(second, commit=commit)
    code, cause, details = hf_stage.stage(hub, REPO, commit, live)
    assert (code, cause, details["changed"]) == (status.READY, None, True)
    assert sorted(hub.fetched) == ["config.json", "model-2.safetensors"]  # not the unchanged shard
    staged = os.path.join(model_stage.staging_dir(live), "model-1.safetensors")
    assert os.stat(staged).st_ino == os.stat(os.path.join(live, "model-1.safetensors")).st_ino
    with open(os.path.join(live, "model-2.safetensors"), "rb") as f:
        assert f.read() == b"b" * 4096  # the served copy untouched until the swap
    model_stage.swap({live: None})
    assert model_manifest.read(live)["source"]["huggingface"]["revision"] == commit
    for name, data in second.items():
        with open(os.path.join(live, name), "rb") as f:
            assert f.read() == data


def test_a_damaged_live_file_is_downloaded_again_for_a_new_revision(tmp_path):
    live = str(tmp_path / "models" / "tiny")
    files = {"config.json": b"{}", "model.safetensors": b"a" * 4096}
    hf_stage.stage(FakeHub(files), REPO, COMMIT, live)
    model_stage.swap({live: None})
    with open(os.path.join(live, "model.safetensors"), "wb") as f:
        f.write(b"short")  # its size no longer the manifest's: not linked
    hub = FakeHub({**files, "config.json": b"{}\n"}, commit="f" * 40)
    assert hf_stage.stage(hub, REPO, "f" * 40, live)[0] == status.READY
    assert sorted(hub.fetched) == ["config.json", "model.safetensors"]


def test_a_symlinked_model_directory_is_downloaded_beside_its_target_and_the_link_stays(tmp_path):
    target, link = tmp_path / "nvme" / "tiny", tmp_path / "models" / "tiny"
    target.mkdir(parents=True)
    link.parent.mkdir()
    os.symlink(str(target), str(link))
    code, cause, _ = hf_stage.stage(FakeHub(), REPO, COMMIT, str(link), token=TOKEN)
    assert (code, cause) == (status.READY, None)
    assert os.path.isdir(str(target) + model_stage.STAGING_SUFFIX)
    model_stage.swap({str(link): None})
    assert os.path.islink(link) and os.readlink(link) == str(target)
    assert model_manifest.read(str(target))["source"]["huggingface"]["revision"] == COMMIT
    assert sorted(os.listdir(tmp_path / "models")) == ["tiny"]  # nothing staged beside the link


def test_a_wrong_revision_fails_with_the_hubs_answer_and_no_token(tmp_path):
    hub, live = FakeHub(), str(tmp_path / "models" / "tiny")
    with pytest.raises(hf_stage.HubError) as raised:
        hf_stage.stage(hub, REPO, "f" * 40, live, token=TOKEN)
    message = str(raised.value)
    assert message.startswith("RevisionNotFoundError: 404 Client Error. Revision Not Found")
    assert TOKEN not in message and "***" in message
    assert hub.downloads == [] and not os.path.exists(live)


def test_a_full_disk_is_named_before_any_download(tmp_path, monkeypatch):
    hub, live = FakeHub(), str(tmp_path / "models" / "tiny")
    monkeypatch.setattr(model_stage, "free_bytes", lambda path: 1000)
    code, cause, _ = hf_stage.stage(hub, REPO, COMMIT, live)
    assert code == status.NO_SPACE and hub.downloads == []
    assert cause.startswith("needs 0.00 GB, 0.00 GB free on ")
    assert ":%s: the new weights are staged beside" % (tmp_path / "models") in cause
    assert "`model_keep_previous: false`" in cause


def test_a_download_that_does_not_match_the_hub_is_not_swapped_in(tmp_path):
    live = tmp_path / "models" / "tiny"
    live.mkdir(parents=True)
    (live / "config.json").write_text("{}")  # the model the node serves today
    hub = FakeHub(corrupt=b"x" * 4096)
    code, cause, _ = hf_stage.stage(hub, REPO, COMMIT, str(live))
    assert code == status.MODEL_MISMATCH and "model.safetensors: sha256" in cause
    assert sorted(os.listdir(live)) == ["config.json"]


FAKE_MODULE = """
class RevisionNotFoundError(Exception):
    pass
class HfApi:
    def model_info(self, repo, revision=None, files_metadata=False, token=None):
        raise RevisionNotFoundError("404 Client Error. Revision Not Found for url: "
                                    "https://huggingface.co/api/models/%s/revision/%s token=%s"
                                    % (repo, revision, token))
def snapshot_download(*args, **kwargs):
    raise AssertionError("downloaded")
"""


def test_the_script_answers_with_the_hub_and_removes_the_token_file(tmp_path):
    import subprocess
    import sys

    from sglang_deploy.node.lib import result

    fake = tmp_path / "fake" / "huggingface_hub"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(FAKE_MODULE)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    done = subprocess.run(
        [
            sys.executable,
            str(os.path.join(os.path.dirname(hf_stage.__file__), "hf_stage.py")),
            "--repo",
            REPO,
            "--revision",
            "e" * 40,
            "--dir",
            str(tmp_path / "m"),
            "--token-file",
            str(token_file),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(fake.parent)},
    )
    found = result.parse(done.stdout.splitlines())
    assert done.returncode == found["status"] == status.HUB_ERROR
    assert found["cause"].startswith("the hub answered: RevisionNotFoundError: 404 Client Error.")
    assert "e" * 40 in found["cause"]
    assert TOKEN not in done.stdout + done.stderr
    assert not token_file.exists()
