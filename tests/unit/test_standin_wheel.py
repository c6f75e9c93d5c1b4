"""The stand-in builds as the wheel the sandbox profile pins, with SGLang's HTTP/JSON stack as
its dependencies; a venv holds it with its closure exactly as a node builds one (uv, the lock's
hashes required, from the wheelhouse alone, offline), and it runs from there the way the unit's
ExecStart runs it (`<venv>/bin/python -m sglang.launch_server ...`)."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest

from sglang_deploy.operations.engine import locked_install
from sglang_deploy.plan.locks import load_lock, lock_path
from sglang_deploy.profile.schema import load_profile

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "engine-standin"
WHEEL = "sglang-0.5.23+sandbox-py3-none-any.whl"
# What SGLang 0.5.23's own metadata declares for these (its METADATA's Requires-Dist), and PyYAML,
# which its --config reader imports.
REQUIRES = ["fastapi", "orjson", "pydantic", "PyYAML", "setproctitle", "uvicorn>=0.51"]


def requires_dist(wheel: Path) -> list:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(name).decode()
    return re.findall(r"^Requires-Dist: (.+)$", metadata, re.M)


def node_venv(path: Path, wheelhouse: Path) -> Path:
    """A venv built as operations/engine.py builds one on a node: no pip in it, then the
    lock installed by uv with every hash required, no dependency resolution, no index."""
    subprocess.run([sys.executable, "-m", "venv", "--copies", "--without-pip", str(path)], check=True)
    lock = lock_path(load_profile("sandbox").engine)
    command = locked_install(str(path), str(lock), str(wheelhouse), f"{sys.executable} -m uv --offline")
    done = subprocess.run(
        command,
        shell=True,
        capture_output=True,
        text=True,
        env={**os.environ, "UV_CACHE_DIR": str(path) + ".uv"},
    )
    assert done.returncode == 0, done.stderr
    return path / "bin" / "python"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The wheel built from a copy of engine-standin/ (setuptools writes build/ and
    *.egg-info next to the sources)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "engine-standin"
    shutil.copytree(STANDIN, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    out = tmp / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            str(src),
            "-w",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    assert [p.name for p in out.iterdir()] == [WHEEL]
    return out / WHEEL


@pytest.fixture(scope="module")
def venv(tmp_path_factory, sandbox_wheelhouse):
    return node_venv(tmp_path_factory.mktemp("node") / "venv", sandbox_wheelhouse)


def test_the_wheel_depends_on_sglangs_http_stack_and_the_next_versions_too(built, tmp_path):
    assert requires_dist(built) == REQUIRES
    subprocess.run(
        [sys.executable, "sandbox/standin_wheel.py", "--version", "0.5.24+sandbox", "--out", str(tmp_path)],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    (next_wheel,) = tmp_path.glob("sglang-0.5.24+sandbox-*.whl")
    assert requires_dist(next_wheel) == REQUIRES


def test_the_venv_is_exactly_the_lock_and_its_files_match_their_record(venv):
    lock = load_lock(lock_path(load_profile("sandbox").engine))
    node = REPO / "sglang_deploy" / "node"
    exact = subprocess.run([str(venv), str(node / "exact.py"), "--lock", str(lock_path(load_profile("sandbox").engine))],
                           capture_output=True, text=True, cwd="/")  # fmt: skip
    assert exact.returncode == 0, exact.stdout
    assert f"{len(lock.entries)} distributions, exactly the lock's" in exact.stdout
    drift = subprocess.run(
        [str(venv), str(node / "drift.py"), "--json", "--all"], capture_output=True, text=True, cwd="/"
    )
    report = json.loads(drift.stdout.splitlines()[-1])
    assert drift.returncode == 0 and report["result"] == "READY", drift.stdout[-2000:]
    assert {k.replace("_", "-").lower() for k in report["distributions"]} == set(lock.entries)


def test_two_builds_of_the_lock_at_one_path_are_the_same_bytes(venv, tmp_path, sandbox_wheelhouse):
    """Two nodes build the lock's venv at the same path at different moments: every RECORD (what
    the fleet's manifest diff compares) and every other file must be the same, or a fleet that
    runs one lock could never diff to 0."""
    first = venv.parent.parent
    second = node_venv(tmp_path / first.name, sandbox_wheelhouse).parent.parent
    # The same path on both nodes; here the second build sits elsewhere, so compare below it.
    site = "lib/python%d.%d/site-packages" % sys.version_info[:2]
    files = sorted(p.relative_to(first / site) for p in (first / site).rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(second / site) for p in (second / site).rglob("*") if p.is_file())
    assert not [f for f in files if f.name == "uv_cache.json"], "uv wrote install-time metadata"
    records = [f for f in files if f.name == "RECORD"]
    assert len(records) == len(load_lock(lock_path(load_profile("sandbox").engine)).entries)
    for name in records:
        one = [
            line
            for line in (first / site / name).read_text().splitlines()
            if not line.startswith("../../../bin/")
        ]
        other = [
            line
            for line in (second / site / name).read_text().splitlines()
            if not line.startswith("../../../bin/")
        ]
        assert one == other, name


def test_installed_metadata_and_version(venv):
    code = (
        "import importlib.metadata as m, sglang; "
        "print(m.version('sglang'), sglang.__version__, sglang.__file__)"
    )
    out = subprocess.run(
        [str(venv), "-c", code], check=True, capture_output=True, text=True, cwd="/"
    ).stdout.split()
    assert out[:2] == ["0.5.23+sandbox", "0.5.23+sandbox"]
    assert "site-packages" in out[2]


def test_help_from_the_venv(venv):
    res = subprocess.run(
        [str(venv), "-m", "sglang.launch_server", "--help"], capture_output=True, text=True, cwd="/"
    )
    assert res.returncode == 0 and res.stdout.startswith("usage: sglang serve ")
    assert "--speculative-num-draft-tokens" in res.stdout


def test_serves_from_the_venv(venv, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps({"architectures": ["LlamaForCausalLM"], "max_position_embeddings": 512})
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(SGLANG_STANDIN_LOAD_SECONDS="0.2", SGLANG_STANDIN_WARMUP_SECONDS="0.1")
    proc = subprocess.Popen(
        [str(venv), "-m", "sglang.launch_server", "--model-path", str(model), "--port", str(port)],
        env=env,
        cwd="/",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline, status = time.monotonic() + 15, None
        while time.monotonic() < deadline and status != 200:
            try:
                status = urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).status
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.05)
        assert status == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0  # drained at SGLang's next 5-s look
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_venv_missing_a_distribution_of_the_closure_fails_the_start(tmp_path, sandbox_wheelhouse):
    """As SGLang: its http_server imports uvicorn at the server's start (a traceback, exit 1)."""
    python = node_venv(tmp_path / "venv", sandbox_wheelhouse)
    subprocess.run(
        [sys.executable, "-m", "uv", "pip", "uninstall", "--python", str(python), "uvicorn"],
        check=True,
        capture_output=True,
    )
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    done = subprocess.run(
        [str(python), "-m", "sglang.launch_server", "--model-path", str(model), "--port", "1"],
        capture_output=True,
        text=True,
        cwd="/",
        timeout=60,
    )
    assert done.returncode == 1
    assert "ModuleNotFoundError: No module named 'uvicorn'" in done.stderr
