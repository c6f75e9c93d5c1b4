"""The on-node scripts operation case by case: one digest fact, uploads of what differs only."""

import hashlib

import pytest
from pyinfra.api.command import FileUploadCommand
from pyinfra.context import ctx_host

from sglang_deploy.facts.serving import FileDigests
from sglang_deploy.operations import script_upload as scripts


class FakeHost:
    name = "node1"

    def __init__(self, digests):
        self.digests, self.noops, self.asked = digests, [], []

    def get_fact(self, fact, **kwargs):
        assert fact is FileDigests
        self.asked.append(kwargs["paths"])
        return self.digests

    def noop(self, text):
        self.noops.append(text)

    def get_temp_filename(self, *args, **kwargs):
        return "/tmp/upload"


@pytest.fixture
def files(tmp_path):
    found = []
    for name in ("gate.py", "status.py"):
        (tmp_path / name).write_text(f"# {name}\n")
        found.append((tmp_path / name, f"/opt/sd/node/{name}"))
    return found


def entry(mode, sha256):
    return {"mode": mode, "user": "root", "sha256": sha256}


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run(files, remote):
    fake = FakeHost(remote)
    with ctx_host.use(fake):
        commands = list(scripts.node_scripts._inner(files))
    return commands, fake


def test_up_to_date_scripts_are_a_noop_from_one_fact(files):
    commands, fake = run(files, {dest: entry("755", digest(src)) for src, dest in files})
    assert commands == [] and fake.noops == ["2 scripts are up to date"]
    assert fake.asked == [[dest for _, dest in files]]


def test_only_a_changed_or_missing_script_is_uploaded(files):
    (src, dest), _ = files
    commands, _ = run(files, {files[1][1]: entry("755", digest(files[1][0])), dest: entry("755", "0" * 64)})
    uploads = [c for c in commands if isinstance(c, FileUploadCommand)]
    assert [u.dest for u in uploads] == [dest]
    assert commands[0] == "mkdir -p /opt/sd/node" and commands[-1] == f"chmod 0755 {dest}"
    commands, _ = run(files, {})
    assert len([c for c in commands if isinstance(c, FileUploadCommand)]) == 2


def test_a_wrong_mode_is_fixed_without_an_upload(files):
    remote = {dest: entry("755", digest(src)) for src, dest in files}
    remote[files[1][1]] = entry("644", remote[files[1][1]]["sha256"])
    commands, _ = run(files, remote)
    assert commands == [f"chmod 0755 {files[1][1]}"]


def test_the_fact_parses_mode_digest_and_path():
    fact = FileDigests()
    assert "sha256sum" in fact.command(["/opt/sd/node/a b.py"]) and "'/opt/sd/node/a b.py'" in fact.command(
        ["/opt/sd/node/a b.py"]
    )
    assert fact.process(["755 root abc /opt/sd/node/a b.py"]) == {"/opt/sd/node/a b.py": entry("755", "abc")}


def test_no_file_on_the_node_reads_as_an_empty_mapping():
    # pyinfra hands an empty output to default(), not to process().
    assert FileDigests().default() == {}


def test_the_fact_command_runs_in_a_real_shell(tmp_path):
    import os
    import subprocess

    present = tmp_path / "with space.py"
    present.write_text("x = 1\n")
    os.chmod(present, 0o640)
    fact = FileDigests()
    out = subprocess.run(
        ["sh", "-c", fact.command([str(present), str(tmp_path / "missing.py")])],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    found = fact.process(out)
    assert list(found) == [str(present)]
    assert found[str(present)]["mode"] == "640"
    assert found[str(present)]["sha256"] == digest(present)
