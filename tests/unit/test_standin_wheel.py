"""The stand-in builds as the wheel the sandbox profile pins, and runs from a venv the way
the unit's ExecStart runs it (`<venv>/bin/python -m sglang.launch_server ...`)."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

STANDIN = Path(__file__).resolve().parents[2] / "engine-standin"
WHEEL = "sglang-0.5.23+sandbox-py3-none-any.whl"


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    # Build from a copy: setuptools writes build/ and *.egg-info next to the sources.
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
    env_dir = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-index",
            "--no-deps",
            "--quiet",
            str(out / WHEEL),
        ],
        check=True,
        capture_output=True,
    )
    return python


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
