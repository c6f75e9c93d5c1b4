"""The wheelhouse (plan/wheelhouse.py): a wheel whose sha256 the lock refuses is named and
nothing is accepted; a missing wheel names the command fetching it; only the wheels a node
lacks are uploaded (operations/wheelhouse_upload.py); the engine installs exactly the lock,
offline, with uv (operations/engine.py)."""

import hashlib
import io
from pathlib import Path

import pytest
from pyinfra.api.command import FileUploadCommand

from sglang_deploy.errors import DeployError
from sglang_deploy.facts.engine_venvs import EngineVenvs
from sglang_deploy.facts.serving import FileDigests
from sglang_deploy.operations import wheelhouse_upload
from sglang_deploy.operations.engine import engine, uv_tool
from sglang_deploy.plan import locks, wheelhouse
from sglang_deploy.plan.venv_names import locked_venv_name
from tests.unit.test_operations import LINK, V, run  # noqa: F401  (run: the fixture)

GOOD, OTHER = b"wheel bytes", b"other bytes"


def sha(data):
    return hashlib.sha256(data).hexdigest()


LOCK = locks.parse_lock(
    f"# pins: idna==3.20\nidna==3.20 \\\n    --hash=sha256:{sha(GOOD)}\nh11==0.16.0 \\\n    --hash=sha256:{'e' * 64}\n"
)


def test_a_wheel_whose_hash_differs_is_refused_and_named(tmp_path):
    (tmp_path / "idna-3.20-py3-none-any.whl").write_bytes(OTHER)
    accepted, missing, refused = wheelhouse.check_wheels(LOCK, tmp_path)
    assert "idna" not in accepted and "idna==3.20" in missing and "h11==0.16.0" in missing
    (why,) = refused
    assert why.startswith("idna-3.20-py3-none-any.whl: sha256 " + sha(OTHER))
    assert "not one the lock accepts for idna==3.20" in why


def test_a_wheel_matching_its_hash_is_accepted(tmp_path):
    (tmp_path / "idna-3.20-py3-none-any.whl").write_bytes(GOOD)
    accepted, missing, refused = wheelhouse.check_wheels(LOCK, tmp_path)
    assert accepted == {"idna": tmp_path / "idna-3.20-py3-none-any.whl"}
    assert missing == ["h11==0.16.0"] and refused == []


def test_a_missing_wheel_names_the_command_that_fetches_it():
    text = wheelhouse.missing_message(
        ["h11==0.16.0"], wheelhouse.fetch_command("sandbox"), Path("build/wheelhouse/x")
    )
    assert "lacks 1 locked wheels (h11==0.16.0)" in text and "`make wheelhouse PROFILE=sandbox`" in text


def test_build_refuses_a_download_that_does_not_match(tmp_path, monkeypatch):
    class Profile:
        name = "p"

        class engine:  # noqa: N801
            find_links = []
            platform = "x86_64-manylinux_2_34"
            python_version = "3.12"

    monkeypatch.setattr(wheelhouse, "load_lock", lambda path: LOCK)
    monkeypatch.setattr(wheelhouse, "lock_path", lambda engine: Path("locks/l.txt"))

    def corrupt(lock, wanted, directory, engine):
        (directory / "idna-3.20-py3-none-any.whl").write_bytes(OTHER)
        (directory / "h11-0.16.0-py3-none-any.whl").write_bytes(b"x")

    with pytest.raises(DeployError) as refused:
        wheelhouse.build(Profile, tmp_path, download=corrupt, out=io.StringIO(), cache=tmp_path / "cache")
    assert "idna-3.20-py3-none-any.whl: sha256" in str(refused.value)
    assert "h11-0.16.0-py3-none-any.whl: sha256" in str(refused.value)
    assert "`make wheelhouse PROFILE=p` fetches them" in str(refused.value)


def _profile(find_links=()):
    class Profile:
        name = "p"

        class engine:  # noqa: N801
            platform = "x86_64-manylinux_2_34"
            python_version = "3.12"

    Profile.engine.find_links = [str(link) for link in find_links]
    return Profile


LOCK_ONE = locks.parse_lock(f"# pins: idna==3.20\nidna==3.20 \\\n    --hash=sha256:{sha(GOOD)}\n")


def test_downloads_are_kept_in_the_cache_and_a_later_build_downloads_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(wheelhouse, "load_lock", lambda path: LOCK_ONE)
    monkeypatch.setattr(wheelhouse, "lock_path", lambda engine: Path("locks/l.txt"))
    downloads = []

    def download(lock, wanted, directory, engine):
        downloads.append(list(wanted))
        (directory / "idna-3.20-py3-none-any.whl").write_bytes(GOOD)

    cache = tmp_path / "cache"
    wheelhouse.build(_profile(), tmp_path / "one", download=download, out=io.StringIO(), cache=cache)
    assert downloads == [["idna==3.20"]] and (cache / "idna-3.20-py3-none-any.whl").read_bytes() == GOOD
    # Another checkout (CI's fresh clone): its wheelhouse is filled from the cache.
    out = io.StringIO()
    accepted = wheelhouse.build(_profile(), tmp_path / "two", download=download, out=out, cache=cache)
    assert downloads == [["idna==3.20"], []] and "1 from the cache" in out.getvalue()
    assert accepted["idna"].read_bytes() == GOOD
    # A cached file the lock does not accept is not used: downloaded again.
    (cache / "idna-3.20-py3-none-any.whl").write_bytes(OTHER)
    wheelhouse.build(_profile(), tmp_path / "three", download=download, out=io.StringIO(), cache=cache)
    assert downloads[-1] == ["idna==3.20"]


def test_a_find_links_wheel_rebuilt_since_the_lock_names_the_command_that_relocks(tmp_path, monkeypatch):
    monkeypatch.setattr(wheelhouse, "load_lock", lambda path: LOCK_ONE)
    monkeypatch.setattr(wheelhouse, "lock_path", lambda engine: Path("locks/l.txt"))
    links = tmp_path / "wheels"
    links.mkdir()
    (links / "idna-3.20-py3-none-any.whl").write_bytes(OTHER)  # the same version, rebuilt

    def download(lock, wanted, directory, engine):
        raise AssertionError(f"no index has a wheel built here: {wanted}")

    with pytest.raises(DeployError) as raised:
        wheelhouse.build(
            _profile([links]), tmp_path / "wh", download=download, out=io.StringIO(), cache=tmp_path
        )
    message = str(raised.value)
    assert message.startswith("stale lock: ") and sha(OTHER) in message and "for idna==3.20" in message
    assert "`make lock PROFILE=p` re-locks it" in message


def test_uv_comes_from_the_find_links_or_the_cache_before_any_download(tmp_path):
    source = tmp_path / "links"
    source.mkdir()
    version = wheelhouse.UV_PIN.partition("==")[2]
    (source / f"uv-{version}-py3-none-manylinux_2_17_x86_64.whl").write_bytes(b"uv")
    found = wheelhouse.uv_wheel(
        tmp_path / "wh", "x86_64-manylinux_2_34", sources=[source], cache=tmp_path / "cache"
    )
    assert found.parent == tmp_path / "wh" and found.read_bytes() == b"uv"


def test_pip_platforms_cover_older_manylinux_tags():
    tags = wheelhouse.pip_platforms("x86_64-manylinux_2_34")
    assert tags[0] == "manylinux_2_34_x86_64" and "manylinux_2_17_x86_64" in tags
    assert tags[-1] == "manylinux2014_x86_64" and "manylinux_2_35_x86_64" not in tags


def test_only_the_wheels_a_node_lacks_are_uploaded(tmp_path):
    a, b, c = (tmp_path / f"{n}-1.0-py3-none-any.whl" for n in "abc")
    for path in (a, b, c):
        path.write_bytes(path.name.encode())
    local = {p: sha(p.name.encode()) for p in (a, b, c)}
    remote = {"/w/" + a.name: {"sha256": local[a]}, "/w/" + b.name: {"sha256": "0" * 64}}
    assert wheelhouse_upload.wheels_to_upload(local, "/w", remote) == [
        (b, "/w/" + b.name),
        (c, "/w/" + c.name),
    ]


def test_the_upload_operation_sends_what_differs_and_the_lock(tmp_path, run):  # noqa: F811
    wheel, lock = tmp_path / "a-1.0-py3-none-any.whl", tmp_path / "l.txt"
    wheel.write_bytes(b"a")
    lock.write_text("x")
    have = {"/w/a-1.0-py3-none-any.whl": {"sha256": sha(b"a")}}
    commands, _ = run(wheelhouse_upload.wheelhouse, {FileDigests: have}, [wheel], "/w", lock, "/l/l.txt")
    uploads = [c for c in commands if isinstance(c, FileUploadCommand)]
    assert [u.dest for u in uploads] == ["/l/l.txt"]
    have["/l/l.txt"] = {"sha256": sha(b"x")}
    commands, noops = run(wheelhouse_upload.wheelhouse, {FileDigests: have}, [wheel], "/w", lock, "/l/l.txt")
    assert commands == [] and noops == ["/w holds the 1 wheels of l.txt"]


def test_a_locked_venv_is_built_without_pip_from_the_wheelhouse_alone(run):  # noqa: F811
    facts = {EngineVenvs: {"venvs": [], "live": "old", "pending": None, "last_good": None}}
    commands, _ = run(
        engine, facts, V, LINK, "python3", ["sglang==0.5.23+sandbox"], "/opt/sd/node",
        wheels_dir="/opt/sd/wheelhouse/L", lock="/opt/sd/locks/L.txt", uv="/opt/sd/uv/bin/uv",
    )  # fmt: skip
    assert commands[1] == f"python3 -m venv --copies --without-pip {V}"
    assert commands[3] == (
        f"UV_NO_INSTALLER_METADATA=1 /opt/sd/uv/bin/uv pip install --python={V}/bin/python --require-hashes --no-deps --no-config "
        f"--cache-dir {V}/.uv-cache --no-index --find-links /opt/sd/wheelhouse/L -r /opt/sd/locks/L.txt"
        f" && rm -rf {V}/.uv-cache"  # its own cache, removed: pruning the venv frees its blocks
    )
    assert commands[4].endswith(f"venvs.py mark --venv {V} --lock /opt/sd/locks/L.txt")
    assert not any(" pip install --no-input" in c for c in commands)


def test_uv_comes_from_its_wheel_into_a_tool_venv_offline():
    commands, uv = uv_tool("/opt/sd/uv", "python3", "/w/uv-0.13.9-py3-none-any.whl")
    assert uv == "/opt/sd/uv/bin/uv"
    assert "pip install --quiet --no-index --no-deps /w/uv-0.13.9-py3-none-any.whl" in commands[0]


def test_the_venv_is_named_after_the_locks_content():
    one = locked_venv_name(["sglang==0.5.23"], LOCK.digest, "3.11.2")
    assert one.startswith("sglang-0.5.23-") and one != locked_venv_name(
        ["sglang==0.5.23"], "f" * 64, "3.11.2"
    )
    assert one != locked_venv_name(["sglang==0.5.23"], LOCK.digest, "3.12.1")
