"""The lint refuses an `env` variable SGLang 0.5.23 sets over the profile's value (the table in
profile/engine_env.py), located at the line that sets it; one the engine sets only when unset
passes."""

import io
import os
import sys
from pathlib import Path

import pytest

from sglang_deploy.profile import lint
from sglang_deploy.profile.schema import Profile, load_profile

CLEAN = """\
description: d
engine:
  packages: [sglang==0.5.23]
model: {path: /models/m, served_name: m}
"""


def cli(*argv):
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "stdout", out)
        status = lint.main(list(argv))
    return status, out.getvalue().splitlines()


def test_a_profile_setting_cuda_device_max_connections_is_refused_at_its_line(tmp_path):
    path = tmp_path / "bad.yml"
    path.write_text(CLEAN + 'env:\n  NCCL_DEBUG: WARN\n  CUDA_DEVICE_MAX_CONNECTIONS: "1"\n')
    assert cli(str(path)) == (
        1,
        [
            f"{path}:7: env.CUDA_DEVICE_MAX_CONNECTIONS: SGLang 0.5.23 always sets it to 8 "
            "(srt/entrypoints/engine.py:1921): the server runs with '8', not '1'; remove it from env",
            "1 profile checked: 1 error, 0 warnings",
        ],
    )


def test_the_shipped_profiles_lint_clean(in_repo):
    status, lines = cli()
    assert status == 0 and ": 0 errors, " in lines[-1]


def test_a_parent_sets_it_and_host_data_overrides_it(tmp_path, in_repo):
    (tmp_path / "parent.yml").write_text(CLEAN + "env:\n  SGLANG_RUN_ID: mine\n")
    (tmp_path / "child.yml").write_text("extends: parent\ndescription: child\n")
    errors, _ = lint.finding_lines(load_profile(tmp_path / "child.yml"))
    assert errors == [
        f"{tmp_path}/parent.yml:6: env.SGLANG_RUN_ID: SGLang 0.5.23 always sets it to a new "
        "sglang-run-<time>-<random> (srt/entrypoints/engine.py:1936): the server runs with a value "
        "of its own, not 'mine'; remove it from env"
    ]
    overridden = load_profile("sandbox", overrides={"env": {"CUDA_DEVICE_MAX_CONNECTIONS": "2"}})
    errors, _ = lint.finding_lines(overridden, where="profiles/sandbox.yml with profile_overrides")
    assert [line.split(": SGLang")[0] for line in errors] == [
        "profile_overrides: env.CUDA_DEVICE_MAX_CONNECTIONS"
    ]


def _errors(env, server_args=None, packages=("sglang==0.5.23",)):
    from sglang_deploy.profile.engine_env import lint_engine_env

    profile = Profile.model_validate(
        {
            "description": "d",
            "engine": {"packages": list(packages)},
            "model": {"path": "/models/m", "served_name": "m"},
            "server_args": server_args or {},
            "env": env,
        }
    )
    return [
        f"{f.variable}: {f.message.split(': the server runs with ')[1]}" for f in lint_engine_env(profile)
    ]


@pytest.mark.parametrize(
    "env, server_args, expected",
    [
        ({"CUDA_DEVICE_MAX_CONNECTIONS": "8"}, {}, []),  # what the engine sets anyway
        # Set from flags only when the flag is given; when unset they keep the profile's value.
        ({"NCCL_CUMEM_ENABLE": "0", "NCCL_NVLS_ENABLE": "0"}, {}, []),
        (
            {"NCCL_CUMEM_ENABLE": "0", "NCCL_NVLS_ENABLE": "0"},
            {"enable-symm-mem": True},
            [
                "env.NCCL_CUMEM_ENABLE: '1', not '0'; remove it from env",
                "env.NCCL_NVLS_ENABLE: '1', not '0'; remove it from env",
            ],
        ),
        (
            {"NCCL_NVLS_ENABLE": "0"},
            {"enable-nccl-nvls": True},
            ["env.NCCL_NVLS_ENABLE: '1', not '0'; remove it from env"],
        ),
        ({"NCCL_CUMEM_ENABLE": "1"}, {"enable-symm-mem": True}, []),
        ({"NCCL_GRAPH_MIXING_SUPPORT": "1"}, {"enable-symm-mem": True}, []),
        (
            {"NCCL_GRAPH_MIXING_SUPPORT": "1"},
            {"enable-symm-mem": True, "dcp-size": 2},
            ["env.NCCL_GRAPH_MIXING_SUPPORT: '0', not '1'; remove it from env"],
        ),
        # Only when unset: the profile wins.
        (
            {"CUTE_DSL_LOG_LEVEL": "10", "NCCL_GRAPH_REGISTER": "1", "PROMETHEUS_MULTIPROC_DIR": "/run/p"},
            {},
            [],
        ),
        ({"TRTLLM_ENABLE_PDL": "0"}, {}, []),
        ({"TRTLLM_ENABLE_PDL": "true"}, {}, ["env.TRTLLM_ENABLE_PDL: '1', not 'true'; remove it from env"]),
        (
            {"SGLANG_ENABLE_TORCH_COMPILE": "1"},
            {},
            ["env.SGLANG_ENABLE_TORCH_COMPILE: '0', not '1'; remove it from env"],
        ),
        ({"SGLANG_ENABLE_TORCH_COMPILE": "1"}, {"enable-torch-compile": True}, []),
        # Deterministic inference pins NCCL's algorithm and channels when tp is over 1.
        ({"NCCL_ALGO": "Ring", "NCCL_MAX_NCHANNELS": "8"}, {"enable-deterministic-inference": True}, []),
        (
            {"NCCL_ALGO": "Ring", "NCCL_MAX_NCHANNELS": "16"},
            {"enable-deterministic-inference": True, "tp-size": 2},
            [
                "env.NCCL_ALGO: 'allreduce:tree', not 'Ring'; remove it from env",
                "env.NCCL_MAX_NCHANNELS: '8', not '16'; remove it from env",
            ],
        ),
        (
            {"NCCL_MIN_NCHANNELS": "4", "SGLANG_DETERMINISTIC_NCCL_NCHANNELS": "4"},
            {"enable-deterministic-inference": True, "tensor-parallel-size": 4},
            [],
        ),
        ({"DG_JIT_CACHE_DIR": "/c/dg", "SGLANG_DG_CACHE_DIR": "/c/dg"}, {}, []),
        (
            {"DG_JIT_CACHE_DIR": "/c/dg"},
            {},
            ["env.DG_JIT_CACHE_DIR: a value of its own, not '/c/dg'; remove it from env"],
        ),
        (
            {"CUDA_VISIBLE_DEVICES": "0,1", "SGLANG_ONE_VISIBLE_DEVICE_PER_PROCESS": "1"},
            {},
            ["env.CUDA_VISIBLE_DEVICES: a value of its own, not '0,1'; remove it from env"],
        ),
        ({"CUDA_VISIBLE_DEVICES": "0,1"}, {}, []),
        ({"SGL_X": "a", "SGLANG_X": "b"}, {}, ["env.SGLANG_X: 'a', not 'b'; remove it from env"]),
        ({"SGL_X": "a", "SGLANG_X": "a", "SGLANG_Y": "b"}, {}, []),
    ],
)
def test_rules(env, server_args, expected):
    assert _errors(env, server_args) == expected


def test_only_for_the_engine_version_the_table_was_read_from():
    assert _errors({"SGLANG_RUN_ID": "x"}, packages=["sglang==0.5.23+sandbox"]) != []
    assert _errors({"SGLANG_RUN_ID": "x"}, packages=["sglang==0.5.24"]) == []
    assert _errors({"SGLANG_RUN_ID": "x"}, packages=["torch==2.13.0"]) == []


def _real_srt() -> Path:
    venv = os.environ.get("SGLANG_REAL_VENV") or Path.home() / ".cache" / "sglang-deploy" / "real-sglang-venv"
    return Path(venv) / "lib" / "python3.11" / "site-packages" / "sglang" / "srt"


@pytest.mark.skipif(
    not _real_srt().is_dir(), reason="no real SGLang venv (test_real_sglang_parser builds it)"
)
def test_every_row_names_the_line_of_the_real_engine_that_sets_it():
    from sglang_deploy.profile.engine_env import ENGINE_VARS

    for row in ENGINE_VARS:
        file, line = row.source.rsplit(":", 1)
        text = (_real_srt() / file).read_text().splitlines()[int(line) - 1]
        assert ("SGL_" if row.name == "SGLANG_*" else row.name) in text, row
