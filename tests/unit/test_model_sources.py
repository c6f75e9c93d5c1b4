"""A model's `source` in a profile (schema and lint), and the controller's side of staging:
what a profile stages, the source's cached manifest, what is left to copy, the disk verdict."""

import io
import sys

import pytest
import yaml

from sglang_deploy.errors import ProfileError
from sglang_deploy.node import model_manifest
from sglang_deploy.plan import model_sources as model_staging
from sglang_deploy.profile import lint
from sglang_deploy.profile.schema import load_profile

COMMIT = "0123456789abcdef0123456789abcdef01234567"
BASE = {
    "description": "d",
    "engine": {"packages": ["sglang==0.5.23"]},
    "model": {"path": "/models/m", "served_name": "m"},
}


def profile(tmp_path, model=None, server_args=None, name="p"):
    data = {**BASE, "model": {**BASE["model"], **(model or {})}}
    if server_args:
        data["server_args"] = server_args
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_source_defaults_to_path(tmp_path):
    loaded = load_profile(profile(tmp_path))
    assert loaded.model.source.kind == "path" and loaded.model.draft_source.kind == "path"
    assert load_profile(profile(tmp_path, {"source": "path"})).model.source.kind == "path"
    assert model_staging.targets(loaded) == []


def test_controller_and_huggingface_sources(tmp_path):
    loaded = load_profile(profile(tmp_path, {"source": {"controller": "sandbox/models/x"}}))
    assert loaded.model.source.controller == "sandbox/models/x"
    hf = load_profile(
        profile(tmp_path, {"source": {"huggingface": {"repo": "org/model", "revision": COMMIT}}})
    )
    assert hf.model.source.kind == "huggingface" and hf.model.source.huggingface.revision == COMMIT


@pytest.mark.parametrize("revision", ["main", "v1.0", COMMIT[:7], COMMIT.upper(), COMMIT + "0"])
def test_revision_must_be_a_commit(tmp_path, revision):
    path = profile(tmp_path, {"source": {"huggingface": {"repo": "org/model", "revision": revision}}})
    with pytest.raises(ProfileError) as raised:
        load_profile(path)
    assert (
        f"model.source.huggingface.revision: {revision!r} is not a 40-hex commit id "
        "(a branch or tag name moves: not reproducible)"
    ) in str(raised.value)


@pytest.mark.parametrize(
    "source, message",
    [
        ("copy", "model.source: 'copy' is not a source: path, {controller: DIR}"),
        ({"ctrl": "x"}, "model.source.ctrl: unknown key"),
        (
            {"controller": "x", "huggingface": {"repo": "a/b", "revision": COMMIT}},
            "model.source: either controller or huggingface, not both",
        ),
    ],
)
def test_bad_sources_are_named(tmp_path, source, message):
    with pytest.raises(ProfileError) as raised:
        load_profile(profile(tmp_path, {"source": source}))
    assert message in str(raised.value)


def run_lint(*argv):
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "stdout", out)
        status = lint.main(list(argv))
    return status, out.getvalue()


def test_lint_rejects_a_branch_name(tmp_path):
    path = profile(tmp_path, {"source": {"huggingface": {"repo": "org/m", "revision": "main"}}})
    status, out = run_lint(str(path))
    assert status == 1 and "is not a 40-hex commit id" in out


def test_lint_source_findings(tmp_path):
    source = tmp_path / "weights"
    source.mkdir()
    missing = profile(
        tmp_path,
        {"source": {"controller": str(tmp_path / "nowhere")}, "draft_source": {"controller": str(source)}},
        name="missing",
    )
    status, out = run_lint(str(missing))
    assert status == 1
    assert f"model source: controller directory {tmp_path / 'nowhere'} does not exist" in out
    assert "model.draft_source: set, but server_args has no speculative-draft-model-path" in out
    same_dir = profile(
        tmp_path,
        {
            "source": {"controller": str(source)},
            "draft_source": {"huggingface": {"repo": "a/b", "revision": COMMIT}},
        },
        {"speculative-draft-model-path": "/models/m"},
        name="same",
    )
    status, out = run_lint(str(same_dir))
    assert status == 1 and "the draft model is the model's directory" in out


def test_targets_stage_a_shared_directory_once(tmp_path):
    src = {"controller": str(tmp_path)}
    shared = load_profile(
        profile(tmp_path, {"source": src, "draft_source": src}, {"speculative-draft-model-path": "/models/m"})
    )
    assert [(t.role, t.path) for t in model_staging.targets(shared)] == [("model", "/models/m")]
    two = load_profile(
        profile(
            tmp_path, {"source": src, "draft_source": src}, {"speculative-draft-model-path": "/models/draft"}
        )
    )
    assert [(t.role, t.path) for t in model_staging.targets(two)] == [
        ("model", "/models/m"),
        ("draft model", "/models/draft"),
    ]


def test_shipped_sandbox_profiles_stage_from_the_controller():
    for name in ("sandbox", "sandbox-eagle3"):
        targets = model_staging.targets(load_profile(name))
        assert [(t.path, t.source.kind) for t in targets] == [("/models/tiny-standin", "controller")]
        assert (targets[0].controller_dir / "config.json").is_file()


def test_local_manifest_hashes_again_only_what_changed(tmp_path, monkeypatch):
    source, cache = tmp_path / "src", tmp_path / "cache"
    source.mkdir()
    (source / "a").write_bytes(b"1" * 10)
    (source / "b").write_bytes(b"2" * 10)
    first = model_staging.local_manifest(source, cache)
    assert first == model_manifest.build(str(source))
    hashed = []
    real = model_manifest.sha256_file
    monkeypatch.setattr(model_manifest, "sha256_file", lambda p: hashed.append(p) or real(p))
    assert model_staging.local_manifest(source, cache) == first and hashed == []
    (source / "b").write_bytes(b"3" * 11)
    again = model_staging.local_manifest(source, cache)
    assert hashed == [str(source / "b")]
    assert again == model_manifest.build(str(source))


def entry(path, size, sha="0" * 64):
    return {"path": path, "size": size, "sha256": sha}


def test_to_copy_leaves_out_staged_and_kept_files():
    manifest = {"files": [entry("a", 1), entry("b", 2), entry("c", 3), entry("d", 4)]}
    node = {
        "staged": [["a", 1], ["b", 1]],  # b: a half-sent file
        "live_files": [entry("c", 3), entry("d", 4)],
        "problems": ["d: 2 bytes, the manifest says 4 (truncated or partial?)"],
    }
    assert [e["path"] for e in model_staging.to_copy(manifest, node)] == ["b", "d"]


def test_disk_problem_names_host_and_directory():
    need = [entry("a", 3 * 10**9), entry("b", 2 * 10**9)]
    assert model_staging.disk_problem("node1", "/models/m", need, 5 * 10**9) is None
    assert model_staging.disk_problem("node1", "/models/m", need, 10**9) == (
        "needs 5.00 GB, 1.00 GB free on node1:/models"
    )


def test_rsync_is_resumable_with_progress(tmp_path):
    argv = model_staging.rsync_argv(["ssh", "-p", "2201"], "root@h", tmp_path, "/models/m.s")
    assert "--partial" in argv and "--info=progress2" in argv and "--files-from=-" in argv
    assert argv[-2:] == [f"{tmp_path}/", "root@h:/models/m.s/"]
    assert argv[argv.index("--rsh") + 1] == "ssh -p 2201"


def test_the_plan_carries_the_hub_token_without_showing_it(tmp_path):
    from sglang_deploy.plan.host_plan import plan_for

    path = profile(tmp_path, {"source": {"huggingface": {"repo": "org/m", "revision": COMMIT}}})
    text = path.read_text() + "secrets:\n  HF_TOKEN: {from_env: HF_TOKEN}\n"
    path.write_text(text)
    data = {
        "profile": str(path),
        "sglang_deploy_dir": "/opt/sd",
        "env_dir": "/etc/sglang",
        "unit_dir": "/etc/systemd/system",
        "state_dir": "/var/lib/sd",
        "run_dir": "/run/sd",
        "deploy_lock_wait_s": 1,
        "rollback": True,
        "repair": False,
        "huggingface_hub_pin": "huggingface_hub==2.4.0",
    }
    plan = plan_for(data, operator_env={"HF_TOKEN": "hf_topsecret123456"})
    assert [t.source.kind for t in plan.models] == ["huggingface"]
    assert plan.hub_client.token == "hf_topsecret123456"
    assert plan.hub_client.python == "/opt/sd/hf-venv/bin/python"
    assert "hf_topsecret" not in repr(plan) + repr(plan.hub_client)
