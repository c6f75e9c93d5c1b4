"""Wheels: built reproducibly (same source, same bytes) and uploaded without a text diff."""

import hashlib
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from pyinfra.api.command import FileUploadCommand
from pyinfra.context import ctx_host

from sglang_deploy import operations
from sglang_deploy.facts.serving import FileDigests
from sglang_deploy.operations import files as files_ops
from sglang_deploy.wheel_normal import FIXED_TIME, normalise

REPO = Path(__file__).resolve().parents[2]


def sha1(path):
    return hashlib.sha1(Path(path).read_bytes()).hexdigest()


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def write_zip(path, entries, date_time, mode):
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=date_time)
            info.external_attr = mode << 16
            archive.writestr(info, data)


ENTRIES = [
    ("pkg/__init__.py", b"x = 1\n"),
    ("pkg-1.0.dist-info/RECORD", b"r\n"),
    ("pkg-1.0.dist-info/METADATA", b"m\n"),
    ("pkg/a.py", b"a = 2\n"),
]


def test_normalised_zips_of_the_same_files_are_the_same_bytes(tmp_path):
    one, other = tmp_path / "one.whl", tmp_path / "other.whl"
    write_zip(one, ENTRIES, (2026, 11, 30, 12, 0, 0), 0o100664)
    write_zip(other, ENTRIES[::-1], (2027, 1, 2, 3, 4, 6), 0o100644)
    assert sha1(one) != sha1(other)
    normalise(one)
    normalise(other)
    assert sha1(one) == sha1(other)
    with zipfile.ZipFile(one) as archive:
        infos = archive.infolist()
        assert [i.filename for i in infos] == [
            "pkg/__init__.py",
            "pkg/a.py",
            "pkg-1.0.dist-info/METADATA",
            "pkg-1.0.dist-info/RECORD",
        ]
        assert {i.date_time for i in infos} == {FIXED_TIME}
        assert {i.external_attr >> 16 for i in infos} == {0o100644}
        assert {name: archive.read(name) for name, _ in ENTRIES} == dict(ENTRIES)


def test_normalised_wheel_keeps_an_executable_bit(tmp_path):
    path = tmp_path / "x.whl"
    write_zip(path, [("pkg/run.sh", b"#!/bin/sh\n")], (2026, 1, 1, 0, 0, 0), 0o100775)
    normalise(path)
    with zipfile.ZipFile(path) as archive:
        assert archive.infolist()[0].external_attr >> 16 == 0o100755


def _make_wheels(umask):
    return subprocess.run(
        ["make", "-s", "wheels", f"WHEELS={WHEELS}"],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
        preexec_fn=lambda: os.umask(umask),
    )


WHEELS = "build/test-reproducible-wheels"


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_wheels_twice_gives_the_same_bytes():
    """A rebuild (other time, other umask, sources touched) is no change to deploy."""
    out = REPO / WHEELS
    try:
        _make_wheels(0o022)
        (first,) = out.glob("*.whl")
        before = sha1(first)
        os.utime(REPO / "engine-standin/sglang/__init__.py")
        _make_wheels(0o002)
        assert sha1(first) == before
        with zipfile.ZipFile(first) as archive:  # still a valid wheel: RECORD matches
            assert archive.testzip() is None
            assert any(n.endswith(".dist-info/RECORD") for n in archive.namelist())
    finally:
        shutil.rmtree(out, ignore_errors=True)


class FakeHost:
    name = "node1"

    def __init__(self, sha):
        self.sha, self.noops, self.logs = sha, [], []

    def get_fact(self, fact, **kwargs):
        assert fact is FileDigests
        return (
            {}
            if self.sha is None
            else {path: {"mode": "644", "user": "root", "sha256": self.sha} for path in kwargs["paths"]}
        )

    def noop(self, text):
        self.noops.append(text)

    def log(self, text, *args):
        self.logs.append(text)

    def get_temp_filename(self, *args, **kwargs):
        return "/tmp/upload"


def run_binary_file(monkeypatch, src, remote_sha, diff=True):
    fake = FakeHost(remote_sha)
    monkeypatch.setattr(files_ops, "_diff_wanted", lambda: diff)
    with ctx_host.use(fake):
        commands = list(operations.binary_file._inner(src=str(src), dest="/opt/sd/wheels/x.whl"))
    return commands, fake


@pytest.fixture
def binary(tmp_path):
    path = tmp_path / "x.whl"
    path.write_bytes(bytes(range(256)) * 4)  # not UTF-8: a text diff would fail on it
    return path


def test_binary_file_same_checksum_is_a_noop(monkeypatch, binary):
    commands, fake = run_binary_file(monkeypatch, binary, sha256(binary))
    assert commands == [] and fake.noops == ["/opt/sd/wheels/x.whl is up to date"]


def test_binary_file_changed_under_diff_names_checksums_and_uploads(monkeypatch, binary):
    commands, fake = run_binary_file(monkeypatch, binary, "0" * 64)
    mkdir, create, upload, swap = commands
    temp = "/opt/sd/wheels/.x.whl.sglang-deploy-new"
    assert mkdir == "mkdir -p /opt/sd/wheels" and create == f"rm -f {temp} && (umask 077 && : > {temp})"
    assert isinstance(upload, FileUploadCommand) and upload.dest == temp  # beside it, renamed over it
    assert (
        swap
        == f"chown root:root {temp} && chmod 0644 {temp} && sync {temp} && mv -f {temp} /opt/sd/wheels/x.whl"
    )
    assert fake.logs == [
        f"Will replace /opt/sd/wheels/x.whl (sha256 {'0' * 64}) with {binary} "
        f"(binary, sha256 {sha256(binary)})"
    ]


def test_binary_file_new_under_diff(monkeypatch, binary):
    commands, fake = run_binary_file(monkeypatch, binary, None)
    assert len(commands) == 4 and fake.logs[0].startswith("Will create /opt/sd/wheels/x.whl")
