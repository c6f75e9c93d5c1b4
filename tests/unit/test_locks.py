"""Locks (sglang_deploy/plan/locks.py): header and entries parsed, a lock per pin set, what moved
in a closure, the lint's refusal of a profile whose packages left its lock, and the shipped
profiles' committed locks."""

import io
import subprocess

import pytest

from sglang_deploy.errors import DeployError
from sglang_deploy.plan import lock_make, locks, wheelhouse
from sglang_deploy.profile.lint import lint_profile
from sglang_deploy.profile.schema import load_profile

H1, H2, H3 = "a" * 64, "b" * 64, "c" * 64
BODY = f"""anyio==4.16.0 \\
    --hash=sha256:{H1} \\
    --hash=sha256:{H2}
    # via starlette
Fastapi[standard]==0.165.0 \\
    --hash=sha256:{H3}
"""


def lock_text(pins="fastapi==0.165.0", platform="x86_64-manylinux_2_34", python="3.12", body=BODY):
    header = {"pins": pins, "platform": platform, "python": python, "profiles": "p"}
    return lock_make.render_lock(header, body)


def test_header_and_entries_are_parsed():
    lock = locks.parse_lock(lock_text())
    assert lock.header["platform"] == "x86_64-manylinux_2_34" and lock.header["python"] == "3.12"
    assert lock.pins == ["fastapi==0.165.0"]
    assert lock.entries["anyio"].hashes == {H1, H2}
    assert lock.entries["fastapi"].version == "0.165.0" and lock.entries["fastapi"].hashes == {H3}
    assert "# via starlette" in lock.body and "# pins" not in lock.body


def test_a_requirement_without_hash_is_refused():
    with pytest.raises(DeployError, match="no sha256 for idna"):
        locks.parse_lock(lock_text(body=BODY + "idna==3.20\n"))


def test_the_digest_follows_what_is_installed_not_the_header():
    one = locks.parse_lock(lock_text())
    assert one.digest == locks.parse_lock(lock_text(python="3.11")).digest
    assert one.digest != locks.parse_lock(lock_text(body=BODY.replace(H3, "d" * 64))).digest


def _profile(tmp_path, packages, python="3.12"):
    (tmp_path / "p.yml").write_text(
        "description: d\nengine:\n  packages: [" + ", ".join(packages) + f"]\n  python_version: '{python}'\n"
        "model: {path: /m, served_name: m}\n"
    )
    return load_profile(tmp_path / "p.yml")


def test_a_lock_is_named_after_its_pin_set_in_any_order(tmp_path):
    one = _profile(tmp_path, ["sglang==0.5.23", "Torch==2.9.1"]).engine
    two = _profile(tmp_path, ["torch==2.9.1", "sglang==0.5.23"]).engine
    assert locks.lock_name(one).startswith("sglang-0.5.23-")
    assert locks.lock_name(one) == locks.lock_name(two)
    assert locks.lock_name(one) != locks.lock_name(
        _profile(tmp_path, ["sglang==0.5.23", "torch==2.9.1"], "3.11").engine
    )


@pytest.mark.parametrize(
    "packages",
    [
        ["uvicorn==0.38.0", "sglang==0.5.23"],  # reversed
        ["sglang==0.5.23", "uvicorn==0.38.0", "sglang==0.5.23"],  # a pin twice
        ["SGLang==0.5.23", "Uvicorn==0.38.0"],  # another spelling (PEP 503: the same names)
        ["sglang==0.5.23", "uvicorn==0.38.0", "uvicorn==0.38.0"],
    ],
)
def test_a_lock_is_the_pin_sets_content_whatever_its_order_spelling_or_repeats(tmp_path, packages):
    locked = _profile(tmp_path, ["sglang==0.5.23", "uvicorn==0.38.0"])
    lock_make.make_lock(
        locked, ["p"], tmp_path, compile_=lambda engine, **_: _uvicorn_body(), out=io.StringIO()
    )
    same = _profile(tmp_path, packages)
    assert locks.lock_path(same.engine, tmp_path) == locks.lock_path(locked.engine, tmp_path)
    assert locks.lock_problems(same, tmp_path) == []


def _uvicorn_body():
    return f"sglang==0.5.23 \\\n    --hash=sha256:{H1}\nuvicorn==0.38.0 \\\n    --hash=sha256:{H2}\n"


def test_the_shipped_locks_keep_their_names():
    # Named from the normalised pin set: every committed lock is still found under its name.
    names = {locks.lock_name(load_profile(name).engine) for name in ("baseline", "sandbox")}
    assert names == {"sglang-0.5.23-473ba32a2145.txt", "sglang-0.5.23+sandbox-21ee92086ccf.txt"}
    assert all((locks.LOCKS_DIR / name).is_file() for name in names)


def test_closure_changes_name_what_moved():
    old = locks.parse_lock(lock_text())
    new = locks.parse_lock(
        lock_text(body=f"anyio==4.17.0 \\\n    --hash=sha256:{H1}\nidna==3.20 \\\n    --hash=sha256:{H2}\n")
    )
    assert lock_make.closure_changes(old, new) == [
        "anyio 4.16.0 -> 4.17.0",
        "removed Fastapi 0.165.0",
        "added idna 3.20",
    ]
    rehashed = locks.parse_lock(lock_text(body=BODY.replace(H3, "d" * 64)))
    assert lock_make.closure_changes(old, rehashed) == ["Fastapi 0.165.0: other files (hashes changed)"]


def test_make_lock_writes_the_header_and_prints_the_changes(tmp_path):
    profile = _profile(tmp_path, ["fastapi==0.165.0"])
    out = io.StringIO()
    path = lock_make.make_lock(profile, ["p"], tmp_path, compile_=lambda engine, **_: BODY, out=out)
    lock = locks.load_lock(path)
    assert lock.pins == ["fastapi==0.165.0"] and lock.header["update"] == "make lock PROFILE=p"
    assert "2 changes in the closure" in out.getvalue() and "added anyio 4.16.0" in out.getvalue()
    # The pins change: a new lock; the old one stays, no longer naming the profile, and the
    # output says what moved since it.
    moved = _profile(tmp_path, ["fastapi==0.166.0"])
    body = BODY.replace("0.165.0", "0.166.0")
    out = io.StringIO()
    new = lock_make.make_lock(moved, ["p"], tmp_path, compile_=lambda engine, **_: body, out=out)
    assert new != path and path.is_file()
    assert "Fastapi 0.165.0 -> 0.166.0" in out.getvalue() and f"since {path}" in out.getvalue()
    assert locks.load_lock(path).header["profiles"] == "(none now)"


def test_lint_refuses_packages_that_left_their_lock_and_names_the_command(tmp_path):
    profile = _profile(tmp_path, ["fastapi==0.165.0"])
    lock_make.make_lock(profile, ["p"], tmp_path, compile_=lambda engine, **_: BODY, out=io.StringIO())
    assert locks.lock_problems(profile, tmp_path) == []
    moved = _profile(tmp_path, ["fastapi==0.166.0"])
    (problem,) = locks.lock_problems(moved, tmp_path)
    assert "no longer match its lock" in problem and "pins fastapi==0.165.0" in problem
    assert "`make lock PROFILE=p` updates it" in problem


def test_lint_refuses_a_lock_edited_to_other_pins(tmp_path):
    profile = _profile(tmp_path, ["fastapi==0.165.0"])
    path = locks.lock_path(profile.engine, tmp_path)
    path.write_text(lock_text(pins="fastapi==0.164.0", body=BODY.replace("0.165.0", "0.164.0")))
    problems = locks.lock_problems(profile, tmp_path)
    assert any("made for pins ['fastapi==0.164.0']" in p for p in problems)
    assert any("does not hold fastapi==0.165.0" in p for p in problems)


def test_a_profile_never_locked_is_refused_naming_the_command(tmp_path):
    # pip would resolve it on each node, on the day: a node with no index fails mid-run.
    findings = lint_profile(_profile(tmp_path, ["sglang==9.9.9"]))
    (finding,) = [f for f in findings if "lock" in f.message]
    assert finding.severity == "error" and "have no lock" in finding.message
    assert "`make lock PROFILE=p` makes it" in finding.message and "install_from: index" in finding.message


def test_a_profile_never_locked_installing_from_an_index_is_warned_of(tmp_path):
    (tmp_path / "i.yml").write_text(f"extends: {tmp_path / 'p.yml'}\nengine:\n  install_from: index\n")
    _profile(tmp_path, ["sglang==9.9.9"])
    findings = lint_profile(load_profile(tmp_path / "i.yml"))
    (finding,) = [f for f in findings if "lock" in f.message]
    assert finding.severity == "warning" and "have no lock" in finding.message
    assert "make lock PROFILE=i" in finding.message


@pytest.mark.parametrize("name", ["baseline", "eagle3-2step", "sandbox", "sandbox-eagle3"])
def test_every_shipped_profile_has_its_lock(name):
    profile = load_profile(name)
    assert locks.lock_problems(profile) == []
    lock = locks.load_lock(locks.lock_path(profile.engine))
    assert name in lock.header["profiles"]
    assert lock.header["platform"] == profile.engine.platform


def test_the_baseline_lock_is_the_real_closure():
    lock = locks.load_lock(locks.lock_path(load_profile("baseline").engine))
    assert len(lock.entries) > 150
    assert {"torch", "sglang-kernel", "flashinfer-python", "triton", "transformers"} <= set(lock.entries)
    assert lock.header["python"] == "3.12" and "no CUDA index" in lock.header["index"]


def test_the_sandbox_lock_holds_the_standin_built_here():
    lock = locks.load_lock(locks.lock_path(load_profile("sandbox").engine))
    assert lock.entries["sglang"].version == "0.5.23+sandbox" and lock.header["python"] == "3.11"
    # `make wheels` (a prerequisite of `make test-unit`) builds the bytes the lock holds: a change
    # to engine-standin/ needs `make lock PROFILE=sandbox`.
    wheel = next((locks.REPO / "build" / "wheels").glob("sglang-0.5.23+sandbox-*.whl"), None)
    assert wheel is not None, "no stand-in wheel: run `make wheels`"
    assert wheelhouse.sha256(wheel) in lock.entries["sglang"].hashes, (
        "stale lock: `make lock PROFILE=sandbox`"
    )


def test_a_lock_made_from_the_find_links_alone_asks_no_index_and_says_so(tmp_path, monkeypatch):
    profile = _profile(tmp_path, ["fastapi==0.165.0"])
    seen = []
    path = lock_make.make_lock(
        profile,
        ["p"],
        tmp_path,
        compile_=lambda engine, **kw: seen.append(kw) or BODY,
        out=io.StringIO(),
        index=False,
    )
    assert seen[0]["index"] is False
    assert locks.load_lock(path).header["index"].startswith("none (the find-links alone, offline)")
    commands = []
    monkeypatch.setattr(
        lock_make.subprocess,
        "run",
        lambda command, **kw: commands.append(command) or subprocess.CompletedProcess(command, 0, BODY, ""),
    )
    assert lock_make.uv_compile(profile.engine, find_links=["build/x"], index=False) == BODY
    assert {"--no-index", "--offline", "--find-links"} <= set(commands[0]) and "--index-url" not in commands[
        0
    ]
