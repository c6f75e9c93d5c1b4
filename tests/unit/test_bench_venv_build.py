"""bench/venv_build.py: every arm installs exactly the lock from the wheelhouse alone, and only
the bytecode flags differ between the arms (the bench itself builds venvs)."""

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("bench_venv_build", REPO / "bench" / "venv_build.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

OFFLINE = ["--require-hashes", "--no-deps", "--no-index", "--find-links", "/w", "-r", "/l.txt"]


def command(arm):
    return bench.install_command(arm, "/v", "/l.txt", "/w", "/pip", "/uv")


def test_every_arm_installs_the_lock_with_hashes_no_deps_and_no_index():
    for arm in bench.ARMS:
        argv, _ = command(arm)
        assert argv[argv.index("--require-hashes") :][: len(OFFLINE)] == OFFLINE, arm


def test_only_the_bytecode_flags_differ():
    pip, env = command("pip")
    assert "--no-compile" not in pip and env["PYTHONPATH"] == "/pip" and pip[0] == "/v/bin/python"
    assert command("pip --no-compile")[0] == [*pip, "--no-compile"]
    uv, env = command("uv")
    assert uv[0] == "/uv" and "--no-cache" in uv and "--compile-bytecode" not in uv
    assert env == {"UV_NO_INSTALLER_METADATA": "1"}  # as the deploy runs it
    assert command("uv --compile-bytecode")[0] == [*uv, "--compile-bytecode"]


def test_the_venv_is_measured_with_its_pyc_and_distributions(tmp_path):
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    (site / "a-1.0.dist-info").mkdir(parents=True)
    (site / "a").mkdir()
    (site / "a" / "m.py").write_text("x = 1\n")
    (site / "a" / "m.cpython-311.pyc").write_bytes(b"\0" * 10)
    size, pyc, dists = bench.venv_size(tmp_path)
    assert (size, pyc, dists) == (16, 1, 1)
