"""node/lib/textfile.py: a sample a node script writes of its own (rotation.py's, a drift check's)
into the node exporter's textfile directory: the text format, a file per writer, written whole,
rewritten only when its text changed, removed where there is no such state, and never a failed
step when the directory cannot be written."""

import os
import shutil
import subprocess
from argparse import ArgumentParser

import pytest
from pydantic import TypeAdapter, ValidationError

from sglang_deploy.node.lib import textfile
from sglang_deploy.plan import commands
from sglang_deploy.profile.fields import UnitStem

parser = pytest.importorskip("prometheus_client.parser", reason="prometheus-client (requirements.txt)")


def _args(tmp_path, *extra):
    p = ArgumentParser()
    textfile.add_arguments(p)
    return p.parse_args(
        ["--textfile-service", "sglang", "--textfile-port", "30000", "--textfile-dir", str(tmp_path), *extra]
    )


def _samples(path):
    found = {}
    for family in parser.text_string_to_metric_families(path.read_text()):
        assert family.type == "gauge" and family.documentation
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_a_sample_is_its_writers_file_with_the_rules_labels(tmp_path):
    assert textfile.export(_args(tmp_path), "in_rotation", 0) is True
    path = tmp_path / "sglang-deploy-sglang@rotation.prom"
    assert _samples(path) == {
        ("sglang_deploy_in_rotation", (("engine_port", "30000"), ("service", "sglang"))): 0.0
    }
    assert textfile.export(_args(tmp_path), "drift_detected", 1, {"venv": 'odd "name"'}) is True
    drift = _samples(tmp_path / "sglang-deploy-sglang@drift.prom")
    labels = (("engine_port", "30000"), ("service", "sglang"), ("venv", 'odd "name"'))
    assert drift == {("sglang_deploy_drift_detected", labels): 1.0}
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert sorted(os.listdir(tmp_path)) == [
        "sglang-deploy-sglang@drift.prom",
        "sglang-deploy-sglang@rotation.prom",
    ]


def test_the_file_passes_promtools_metrics_check(tmp_path):
    if shutil.which("promtool") is None:
        pytest.skip("promtool not installed (Debian package: prometheus)")
    textfile.export(_args(tmp_path), "drift_detected", 0, {"venv": "sglang-0.5.23-py3.11-1a2b"})
    text = (tmp_path / "sglang-deploy-sglang@drift.prom").read_bytes()
    done = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_same_sample_again_is_no_write(tmp_path, monkeypatch):
    assert textfile.export(_args(tmp_path), "in_rotation", 1) is True
    path = tmp_path / "sglang-deploy-sglang@rotation.prom"
    before = path.stat()

    def no_write(*args):
        raise AssertionError("rewritten with the same text")

    monkeypatch.setattr(textfile, "write_atomically", no_write)
    assert textfile.export(_args(tmp_path), "in_rotation", 1) is False
    assert (path.stat().st_ino, path.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_a_changed_sample_replaces_the_file_whole(tmp_path):
    assert textfile.export(_args(tmp_path), "in_rotation", 1) is True
    path = tmp_path / "sglang-deploy-sglang@rotation.prom"
    inode = path.stat().st_ino
    assert textfile.export(_args(tmp_path), "in_rotation", 0) is True
    assert path.stat().st_ino != inode  # renamed over it, never written in place
    assert list(_samples(path).values()) == [0.0]


def test_a_rename_that_fails_leaves_the_old_file_no_temporary_and_no_failure(tmp_path, monkeypatch, capsys):
    textfile.export(_args(tmp_path), "in_rotation", 1)
    before = (tmp_path / "sglang-deploy-sglang@rotation.prom").read_text()

    def no_rename(src, dst):
        raise OSError("disk went away")

    monkeypatch.setattr(textfile.os, "replace", no_rename)
    assert textfile.export(_args(tmp_path), "in_rotation", 0) is None
    assert "sglang_deploy_in_rotation not written: disk went away" in capsys.readouterr().err
    assert os.listdir(tmp_path) == ["sglang-deploy-sglang@rotation.prom"]
    assert (tmp_path / "sglang-deploy-sglang@rotation.prom").read_text() == before


def test_an_unwritable_directory_is_said_not_raised(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    args = _args(tmp_path, "--textfile-dir", str(tmp_path / "file" / "under"))
    assert textfile.export(args, "drift_detected", 1, {"venv": "v"}) is None
    assert "not written" in capsys.readouterr().err


def test_no_state_removes_the_file_once(tmp_path):
    textfile.export(_args(tmp_path), "in_rotation", 0)
    assert textfile.export(_args(tmp_path), "in_rotation", None) is True
    assert os.listdir(tmp_path) == []
    assert textfile.export(_args(tmp_path), "in_rotation", None) is False


def test_without_a_service_nothing_is_written(tmp_path):
    p = ArgumentParser()
    textfile.add_arguments(p)
    args = p.parse_args(["--textfile-dir", str(tmp_path)])
    assert textfile.export(args, "in_rotation", 1) is None
    assert os.listdir(tmp_path) == []
    assert args.textfile_service is None and p.parse_args([]).textfile_dir == textfile.DEFAULT_DIR


def test_no_services_file_is_another_services():
    """ "@" is in no service name (a unit name): service "a"'s rotation file is no service's own."""
    with pytest.raises(ValidationError):
        TypeAdapter(UnitStem).validate_python("a@rotation")
    names = {textfile.file_name("a"), textfile.file_name("a", "rotation"), textfile.file_name("a-rotation")}
    assert len(names) == 3 and all(name.endswith(".prom") for name in names)


def test_the_builder_gives_the_flags_the_scripts_take(tmp_path):
    argv = commands.textfile_args("svc", 30001)
    assert argv == ["--textfile-service", "svc", "--textfile-port", 30001]
    p = ArgumentParser()
    textfile.add_arguments(p)
    args = p.parse_args([str(a) for a in commands.textfile_args("svc", 30001, str(tmp_path))])
    assert (args.textfile_service, args.textfile_port, args.textfile_dir) == ("svc", 30001, str(tmp_path))
