"""The model manifest (node/model_manifest.py): build, compare, the on-node check script, and
preflight's refusal of a directory that does not match it."""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from sglang_deploy.node import model_manifest, preflight
from sglang_deploy.node.lib import result

NODE_DIR = Path(model_manifest.__file__).parent


def make_model(root: Path) -> Path:
    model = root / "m"
    (model / "sub").mkdir(parents=True)
    (model / "config.json").write_text('{"model_type": "llama"}\n')
    (model / "model-00001.safetensors").write_bytes(b"\x01" * 5000)
    (model / "sub" / "extra.bin").write_bytes(b"abc")
    return model


def test_build_lists_every_file_with_size_and_sha256(tmp_path):
    model = make_model(tmp_path)
    built = model_manifest.build(str(model), workers=2)
    assert built["files"] == [
        {
            "path": "config.json",
            "size": 24,
            "sha256": hashlib.sha256(b'{"model_type": "llama"}\n').hexdigest(),
        },
        {
            "path": "model-00001.safetensors",
            "size": 5000,
            "sha256": hashlib.sha256(b"\x01" * 5000).hexdigest(),
        },
        {"path": os.path.join("sub", "extra.bin"), "size": 3, "sha256": hashlib.sha256(b"abc").hexdigest()},
    ]
    assert model_manifest.total_size(built) == 5027


def test_the_written_manifest_is_not_part_of_the_model(tmp_path):
    model = make_model(tmp_path)
    built = model_manifest.build(str(model))
    model_manifest.write(str(model), built)
    assert model_manifest.build(str(model)) == built
    assert model_manifest.read(str(model))["digest"] == model_manifest.digest(built)


def test_digest_changes_with_any_file(tmp_path):
    model = make_model(tmp_path)
    before = model_manifest.digest(model_manifest.build(str(model)))
    (model / "sub" / "extra.bin").write_bytes(b"abd")
    assert model_manifest.digest(model_manifest.build(str(model))) != before


def test_compare_names_truncated_missing_and_altered_files(tmp_path):
    model = make_model(tmp_path)
    built = model_manifest.build(str(model))
    assert model_manifest.compare(built, str(model), deep=True) == []
    with open(model / "model-00001.safetensors", "r+b") as f:
        f.truncate(100)
    (model / "config.json").unlink()
    (model / "sub" / "extra.bin").write_bytes(b"xyz")  # same size, other bytes
    shallow = model_manifest.compare(built, str(model))
    assert shallow == [
        "config.json: missing",
        "model-00001.safetensors: 100 bytes, the manifest says 5000 (truncated or partial?)",
    ]
    deep = model_manifest.compare(built, str(model), deep=True)
    assert deep[:2] == shallow and deep[2].startswith(os.path.join("sub", "extra.bin") + ": sha256")


def run_check(model, *args):
    # As on the node: the script run by path, its siblings importable, standard library only.
    done = subprocess.run(
        [sys.executable, "-S", str(NODE_DIR / "model_manifest.py"), "check", "--dir", str(model), *args],
        capture_output=True,
        text=True,
    )
    return done.returncode, result.parse(done.stdout.splitlines()), done.stdout


def test_check_script_names_the_truncated_shard(tmp_path):
    model = make_model(tmp_path)
    model_manifest.write(str(model), model_manifest.build(str(model)))
    code, found, _ = run_check(model)
    assert code == 0 and found["result"] == "READY" and found["files"] == 3
    with open(model / "model-00001.safetensors", "r+b") as f:
        f.truncate(10)
    code, found, out = run_check(model)
    assert code == found["status"] == 30 and found["result"] == "MODEL_MISMATCH"
    assert "model-00001.safetensors: 10 bytes, the manifest says 5000" in found["cause"]
    assert "model file model-00001.safetensors" in out


def test_check_script_deep_finds_same_size_corruption(tmp_path):
    model = make_model(tmp_path)
    model_manifest.write(str(model), model_manifest.build(str(model)))
    (model / "model-00001.safetensors").write_bytes(b"\x02" * 5000)
    assert run_check(model)[1]["result"] == "READY"  # sizes only
    code, found, _ = run_check(model, "--deep")
    assert found["result"] == "MODEL_MISMATCH" and "model-00001.safetensors: sha256" in found["cause"]


def test_check_script_without_manifest_has_nothing_to_compare(tmp_path):
    model = make_model(tmp_path)
    code, found, _ = run_check(model)
    assert code == 0 and found["manifest"] is False


def test_preflight_refuses_a_model_that_does_not_match_its_manifest(tmp_path):
    model = make_model(tmp_path)
    assert preflight.check_model_dir("model path", str(model)) == (
        "ok",
        f"model path {model} has a config.json",
    )
    model_manifest.write(str(model), model_manifest.build(str(model)))
    assert preflight.check_model_dir("model path", str(model))[0] == "ok"
    (model / "model-00001.safetensors").write_bytes(b"\x01" * 4096)
    verdict, text = preflight.check_model_dir("draft model path", str(model))
    assert verdict == "failed"
    assert text.startswith(
        f"draft model path {model} does not match its manifest: "
        "model-00001.safetensors: 4096 bytes, the manifest says 5000"
    )
