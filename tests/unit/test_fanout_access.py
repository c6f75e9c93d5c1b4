"""node/fanout_access.py: a run's key may read one directory, read only; revoked exactly;
what a run that died left is found and removed."""

import os

import pytest

from sglang_deploy.node import fanout_access
from sglang_deploy.node.lib import result

PUBLIC = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeFakeFakeFakeFakeFakeFakeFakeFakeFake sglang-deploy-fanout:r1:abc"
MARKER = "sglang-deploy-fanout:r1:abc"


@pytest.fixture
def home(tmp_path, monkeypatch):
    keys = tmp_path / "home" / ".ssh" / "authorized_keys"
    monkeypatch.setattr(fanout_access, "authorized_keys", lambda user: (str(keys), os.getuid(), os.getgid()))
    monkeypatch.setattr(fanout_access, "rrsync_path", lambda: "/usr/bin/rrsync")
    return keys


def test_the_line_forces_a_read_only_rrsync_of_that_directory_and_restricts_the_rest():
    line = fanout_access.key_line(PUBLIC, "/models/my model", MARKER)
    assert line == (
        "restrict,command=\"/usr/bin/rrsync -ro '/models/my model'\" "
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeFakeFakeFakeFakeFakeFakeFakeFakeFake " + MARKER
    )


@pytest.mark.parametrize(
    "key,directory,marker",
    [
        ("not a key", "/models/m", MARKER),
        (PUBLIC, '/models/m" ,permitopen="*', MARKER),  # a quote would end command="..."
        (PUBLIC, "/models/m\nssh-ed25519 AAAA evil", MARKER),
        (PUBLIC, "/models/m", "someone-else"),
    ],
)
def test_a_line_that_could_say_more_than_it_should_is_refused(key, directory, marker):
    with pytest.raises(SystemExit):
        fanout_access.key_line(key, directory, marker)


def test_grant_adds_one_line_once_and_keeps_the_others(home, tmp_path):
    home.parent.mkdir(parents=True)
    home.write_text("ssh-ed25519 AAAAoperator operator@laptop\n")
    (tmp_path / "m").mkdir()
    for _ in range(2):  # granted again (a retry): still one line
        fanout_access.grant("root", str(tmp_path / "m"), MARKER, PUBLIC)
    lines = home.read_text().splitlines()
    assert lines[0] == "ssh-ed25519 AAAAoperator operator@laptop"
    assert len([line for line in lines if line.endswith(MARKER)]) == 1
    assert oct(os.stat(home).st_mode & 0o777) == "0o600"


def test_grant_creates_a_private_ssh_directory(home, tmp_path):
    (tmp_path / "m").mkdir()
    fanout_access.grant("root", str(tmp_path / "m"), MARKER, PUBLIC)
    assert oct(os.stat(home.parent).st_mode & 0o777) == "0o700"


def test_grant_refuses_a_node_without_rrsync(home, tmp_path, monkeypatch):
    monkeypatch.setattr(fanout_access, "rrsync_path", lambda: None)
    (tmp_path / "m").mkdir()
    with pytest.raises(SystemExit, match="rrsync"):
        fanout_access.grant("root", str(tmp_path / "m"), MARKER, PUBLIC)
    assert not home.exists()


def test_revoke_removes_exactly_its_marker(home, tmp_path):
    (tmp_path / "m").mkdir()
    other = "sglang-deploy-fanout:r1:def"
    fanout_access.grant("root", str(tmp_path / "m"), MARKER, PUBLIC)
    fanout_access.grant("root", str(tmp_path / "m"), other, PUBLIC)
    assert fanout_access.revoke("root", only=MARKER) == 1
    assert [line.split()[-1] for line in home.read_text().splitlines()] == [other]


def test_leftovers_and_clean(home, tmp_path, capsys):
    home.parent.mkdir(parents=True)
    home.write_text(f"ssh-ed25519 AAAAoperator operator@laptop\nrestrict ssh-ed25519 AAAAx {MARKER}\n")
    run_dir = tmp_path / "run"
    (run_dir / "fanout-r1-abc").mkdir(parents=True)
    (run_dir / "fanout-r1-abc" / "key").write_text("private")
    (run_dir / "sglang.lock").write_text("not ours")
    args = ["--user", "root", "--run-dir", str(run_dir)]
    fanout_access.main(["leftovers", *args])
    assert result.parse(capsys.readouterr().out.splitlines())["lines"] == 1
    fanout_access.main(["clean", *args])
    found = result.parse(capsys.readouterr().out.splitlines())
    assert (found["lines"], found["key_dirs"]) == (1, 1)
    assert home.read_text() == "ssh-ed25519 AAAAoperator operator@laptop\n"
    assert sorted(os.listdir(run_dir)) == ["sglang.lock"]
    fanout_access.main(["leftovers", *args])
    found = result.parse(capsys.readouterr().out.splitlines())
    assert (found["lines"], found["key_dirs"]) == (0, 0)


def test_hostkeys_reads_each_public_host_key(tmp_path):
    (tmp_path / "ssh_host_ed25519_key.pub").write_text("ssh-ed25519 AAAAhost root@n1\n")
    (tmp_path / "ssh_host_rsa_key.pub").write_text("ssh-rsa AAAArsa root@n1\n")
    (tmp_path / "ssh_host_ed25519_key").write_text("PRIVATE")
    found = fanout_access.host_keys(str(tmp_path / "ssh_host_*_key.pub"))
    assert found == ["ssh-ed25519 AAAAhost", "ssh-rsa AAAArsa"]
