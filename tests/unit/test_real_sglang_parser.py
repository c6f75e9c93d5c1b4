"""The profiles' argv against the argument parser of the real SGLang 0.5.23, and the stand-in
(engine-standin/) against the same parser: what one accepts, the other must accept (an
abbreviated flag included: both are argparse, the deploy's exact check refuses it); and the
committed option list the lint checks flag names against, against the real parser's.

The real SGLang lives in a venv of its own (SGLang with --no-deps, CPU torch and the light
packages its import chain needs, every version pinned in real_sglang_requirements.txt), built
once and kept at ~/.cache/sglang-deploy/real-sglang-venv (or $SGLANG_REAL_VENV). A marker file
named after the pinned version and the requirements' hash says the venv is complete; without
it the venv is built again. First build: about a minute (the wheels come from this machine's
local index or PyPI); afterwards this module takes a few seconds.

Why prepare_server_args itself is safe to call here: in 0.5.23 it only builds the parser
(ServerArgs.add_cli_args), parses argv and wraps the namespace in a ServerArgs record. The
model path, the config, the devices are looked at later, by ServerArgs.resolve_once(), which
launch_server calls and this test does not. Checked: it accepts argv naming model paths that do
not exist, on a machine without a GPU. So what is tested is argument parsing, by SGLang's own
code, with SGLang's own exit status (2, argparse's) for an argv it rejects.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_deploy.node import secret_args
from sglang_deploy.profile import engine_flags
from sglang_deploy.profile.schema import load_profile

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
STANDIN = REPO / "engine-standin"
REQUIREMENTS = HERE / "real_sglang_requirements.txt"
SGLANG_VERSION = "0.5.23"
SHIPPED = ["baseline", "eagle3-2step", "eagle3-3step", "sandbox", "sandbox-eagle3"]
BUILD_TIMEOUT_S = 1200


# -- The real SGLang, in its own venv --------------------------------------------------------


def venv_dir() -> Path:
    configured = os.environ.get("SGLANG_REAL_VENV")
    return Path(configured) if configured else (Path.home() / ".cache" / "sglang-deploy" / "real-sglang-venv")


def marker_name() -> str:
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:12]
    return f".ready-sglang-{SGLANG_VERSION}-{digest}"


def base_python() -> str:
    """A Python 3.11: SGLang's and torch's wheels here are cp311."""
    if sys.version_info[:2] == (3, 11):
        return sys.executable
    found = shutil.which("python3.11")
    if not found:
        pytest.fail(
            "the real-SGLang venv needs Python 3.11 (sglang 0.5.23 and torch 2.13.0 "
            "wheels are cp311); none found"
        )
    return found


def build_venv(venv: Path) -> None:
    if venv.exists():
        shutil.rmtree(venv)
    run = dict(check=True, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    try:
        subprocess.run([base_python(), "-m", "venv", str(venv)], **run)
        # --no-deps: SGLang's declared dependencies pull CUDA builds; the requirements file is
        # the complete, pinned set its import chain needs.
        subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "-r",
                str(REQUIREMENTS),
            ],
            **run,
        )
        subprocess.run(
            [str(venv / "bin" / "python"), "-c", "from sglang.srt.server_args import prepare_server_args"],
            **run,
            cwd="/",
        )
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"building the real-SGLang venv at {venv} failed: {exc.cmd}\n{exc.stdout}\n{exc.stderr}")


@pytest.fixture(scope="session")
def real_python() -> str:
    """The python of a venv with the real SGLang, built on first use."""
    venv = venv_dir()
    venv.parent.mkdir(parents=True, exist_ok=True)
    marker = venv / marker_name()
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time
        if not marker.exists():
            build_venv(venv)
            marker.write_text(REQUIREMENTS.read_text())
    return str(venv / "bin" / "python")


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "SGLANG", "VIRTUAL_ENV"))}
    return {**env, **extra}


# -- Asking a parser -------------------------------------------------------------------------

# Runs in the parser's interpreter: for each case, prepare_server_args(argv) with its exit
# status (argparse exits 2 on a bad argv; an exception, as from a bad --config file, is exit 1
# with the exception's type and text), the last line it wrote to stderr, and the fields the
# test asks for as the parser typed them.
PROBE = r"""
import contextlib, io, json, sys
from importlib import metadata
import sglang.srt.server_args as module
from sglang.srt.server_args import prepare_server_args

cases = json.load(open(sys.argv[1]))
results = []
for case in cases:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            args = prepare_server_args(case["argv"])
    except SystemExit as exc:
        lines = err.getvalue().strip().splitlines()
        results.append({"exit": exc.code, "error": lines[-1] if lines else "", "fields": {}})
        continue
    except Exception as exc:
        results.append({"exit": 1, "error": f"{type(exc).__name__}: {exc}", "fields": {}})
        continue
    results.append({"exit": 0, "error": "", "fields": {
        name: getattr(args, name, "<no such field>") for name in case["fields"]}})
try:
    version = metadata.version("sglang")
except metadata.PackageNotFoundError:
    version = None
json.dump({"module": module.__file__, "version": version, "results": results},
          open(sys.argv[2], "w"), default=repr)
"""


def ask(python: str, cases: list, tmp: Path, env: dict) -> dict:
    request, answer = tmp / "cases.json", tmp / "answer.json"
    request.write_text(json.dumps(cases))
    result = subprocess.run(
        [python, "-c", PROBE, str(request), str(answer)],
        env=env,
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(answer.read_text())


def expected_fields(name: str) -> dict:
    """The ServerArgs fields a profile's argv sets, with the values the profile means."""
    profile = load_profile(name)
    fields = {
        "model_path": profile.model.path,
        "served_model_name": profile.model.served_name,
        "host": profile.service.host,
        "port": profile.service.port,
    }
    for flag, value in profile.server_args.items():
        if value is not None and value is not False:
            fields[flag.replace("-", "_")] = value
    return fields


def typo(argv: list) -> list:
    return ["--tp-sizee" if arg == "--tp-size" else arg for arg in argv]


# Argv lists both parsers must judge alike: every shipped profile, a typo, the aliases the
# profiles may use, a flag 0.5.23 no longer has, values of the wrong type.
BASE = ["--model-path", "/models/m", "--served-model-name", "m", "--host", "0.0.0.0", "--port", "30000"]
PARITY = {
    **{f"profile-{name}": lambda name=name: load_profile(name).argv() for name in SHIPPED},
    "typo-tp-sizee": lambda: typo(load_profile("baseline").argv()),
    "aliases": lambda: [
        "--model",
        "/models/m",
        "--tensor-parallel-size",
        "2",
        "--speculative-draft-model",
        "/models/d",
        "--speculative-algorithm",
        "EAGLE3",
        "--nccl-init-addr",
        "10.0.0.1:5000",
        "--nnodes",
        "2",
        "--node-rank",
        "1",
        "--watchdog-timeout",
        "600",
    ],
    # 0.5.23 split it into --cuda-graph-max-bs-decode and -prefill: an ambiguous prefix now
    "old-cuda-graph-max-bs": lambda: BASE + ["--cuda-graph-max-bs", "32"],
    "cuda-graph-max-bs-decode": lambda: BASE + ["--cuda-graph-max-bs-decode", "32"],
    "context-length-suffix": lambda: BASE + ["--context-length", "128k"],
    # a follower's argv without --dist-init-addr parses (0.5.23 never asks for it)
    "multinode-without-dist-init-addr": lambda: BASE
    + ["--nnodes", "2", "--node-rank", "1", "--tp-size", "2"],
    "dist-timeout": lambda: BASE + ["--dist-timeout", "30"],
    "bad-int": lambda: BASE + ["--tp-size", "eight"],
    "bad-float": lambda: BASE + ["--mem-fraction-static", "most"],
    "missing-value": lambda: BASE + ["--tp-size"],
    "no-model-path": lambda: ["--tp-size", "2"],
    "underscore-flag": lambda: BASE + ["--tp_size", "2"],
    # argparse takes an unambiguous prefix as the flag it abbreviates: our check refuses it
    "abbreviated-flag": lambda: BASE + ["--speculative-num-step", "2"],
    # options beyond the shipped profiles' (tests/unit/test_standin_server_args.py: all of them)
    "reasoning-tools-api-key": lambda: BASE
    + ["--reasoning-parser", "deepseek-r1", "--tool-call-parser", "deepseekv3", "--api-key", "K"],
    "base-gpu-id-dp-size": lambda: BASE + ["--base-gpu-id", "2", "--dp-size", "2"],
    "data-parallel-size-alias": lambda: BASE + ["--data-parallel-size", "2"],
    "bad-reasoning-parser": lambda: BASE + ["--reasoning-parser", "nosuch"],
    "bad-base-gpu-id": lambda: BASE + ["--base-gpu-id", "two"],
    "bad-context-length": lambda: BASE + ["--context-length", "1.5Ki"],
    "bad-log-level": lambda: BASE + ["--log-level", "chatty"],
}


def parity_case(case: str) -> dict:
    """The argv, and the fields its flags name (an alias names none: both parsers answer
    "<no such field>")."""
    argv = PARITY[case]()
    return {"argv": argv, "fields": [a[2:].replace("-", "_") for a in argv if a.startswith("--")]}


@pytest.fixture(scope="module")
def real_answers(real_python, tmp_path_factory):
    """The real parser's verdict on every shipped profile's argv and every parity case."""
    cases = [{"argv": load_profile(name).argv(), "fields": list(expected_fields(name))} for name in SHIPPED]
    cases += [parity_case(case) for case in PARITY]
    answer = ask(real_python, cases, tmp_path_factory.mktemp("real"), clean_env())
    assert answer["version"] == SGLANG_VERSION
    assert Path(answer["module"]).resolve().is_relative_to(venv_dir().resolve())
    results = answer["results"]
    n = len(SHIPPED)
    return {"profile": dict(zip(SHIPPED, results[:n])), "parity": dict(zip(PARITY, results[n:]))}


@pytest.fixture(scope="module")
def standin_answers(tmp_path_factory):
    assert (STANDIN / "sglang" / "srt" / "server_args.py").is_file(), "engine-standin/ missing"
    cases = [parity_case(case) for case in PARITY]
    answer = ask(
        sys.executable, cases, tmp_path_factory.mktemp("standin"), clean_env(PYTHONPATH=str(STANDIN))
    )
    assert Path(answer["module"]).is_relative_to(STANDIN)
    return dict(zip(PARITY, answer["results"]))


# -- The shipped profiles, by SGLang's own parser --------------------------------------------


@pytest.mark.parametrize("name", SHIPPED)
def test_real_sglang_accepts_profile_argv(real_answers, name):
    result = real_answers["profile"][name]
    assert result["exit"] == 0, result["error"]
    # Each flag landed in the field the profile means, typed as the profile says (argparse
    # also accepts unambiguous abbreviations: a truncated flag would land elsewhere).
    assert result["fields"] == expected_fields(name)


def test_real_sglang_rejects_a_misspelled_flag(real_python, tmp_path):
    """The command the unit runs, with `--tp-sizee 8`: SGLang exits 2 before doing anything
    else."""
    argv = typo(load_profile("baseline").argv())
    result = subprocess.run(
        [real_python, "-m", "sglang.launch_server", *argv],
        env=clean_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.splitlines()[-1] == ("sglang serve: error: unrecognized arguments: --tp-sizee 8")


def test_real_sglang_has_no_cuda_graph_max_bs_any_more(real_answers):
    """0.5.23 split it into -decode and -prefill; the old spelling stops SGLang at start."""
    old = real_answers["parity"]["old-cuda-graph-max-bs"]
    assert old["exit"] == 2
    assert old["error"] == (
        "sglang serve: error: ambiguous option: --cuda-graph-max-bs could "
        "match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"
    )
    assert real_answers["parity"]["cuda-graph-max-bs-decode"]["exit"] == 0


# -- The stand-in judges argv like SGLang ----------------------------------------------------


@pytest.mark.parametrize("case", list(PARITY))
def test_standin_parser_agrees_with_real_sglang(real_answers, standin_answers, case):
    """Same verdict, same error line, same typed values."""
    real, standin = real_answers["parity"][case], standin_answers[case]
    assert standin == real


def test_standin_rejects_a_misspelled_flag(standin_answers):
    assert standin_answers["typo-tp-sizee"]["exit"] == 2
    assert standin_answers["typo-tp-sizee"]["error"] == (
        "sglang serve: error: unrecognized arguments: --tp-sizee 8"
    )


@pytest.mark.parametrize("name", SHIPPED)
def test_standin_accepts_profile_argv(standin_answers, name):
    assert standin_answers[f"profile-{name}"]["exit"] == 0, standin_answers[f"profile-{name}"]


# -- The option list the lint checks flag names against --------------------------------------


def test_committed_option_list_is_the_real_parsers(real_python, tmp_path):
    """After an engine upgrade: `make engine-options` writes the new version's list."""
    result = subprocess.run(
        [real_python, str(engine_flags.FLAGS_SCRIPT)],
        env=clean_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == engine_flags.options_file(SGLANG_VERSION).read_text()


def test_real_sglang_runs_an_abbreviated_flag_as_the_full_one(real_python, tmp_path):
    """Why the exact check exists: SGLang itself accepts `--speculative-num-step 2`."""
    answer = ask(
        real_python,
        [{"argv": BASE + ["--speculative-num-step", "2"], "fields": ["speculative_num_steps"]}],
        tmp_path,
        clean_env(),
    )
    assert answer["results"][0] == {"exit": 0, "error": "", "fields": {"speculative_num_steps": 2}}


def test_preflight_refuses_the_abbreviation_with_the_real_parser(real_python, tmp_path):
    """preflight.py's argv check, run by the real engine's interpreter as on a node."""
    node_dir = engine_flags.FLAGS_SCRIPT.parent
    code = (
        "import json, sys; sys.path.insert(0, %r); import preflight; "
        "print(json.dumps(preflight.check_argv(json.loads(sys.argv[1]))))" % str(node_dir)
    )
    argv = BASE + ["--speculative-num-step", "2"]
    result = subprocess.run(
        [real_python, "-c", code, json.dumps(argv)],
        env=clean_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == [
        "failed",
        "--speculative-num-step is not a flag of the engine (argparse would take it "
        "as an abbreviation of --speculative-num-steps): did you mean --speculative-num-steps?",
    ]


# -- The secret server arguments' --config file, by SGLang's own merger -----------------------


def test_real_sglang_takes_its_key_from_the_secret_args_file(real_python, tmp_path):
    """The file node/secret_args.py writes (JSON, read as YAML): the key as written, `{}` (an
    optional key unset) accepted, and a flag on the command line wins over the file's."""
    key = "sk-t3st\"$HOME`x`\\back'#;"
    keyed, empty = tmp_path / "keyed" / "secret-args.yaml", tmp_path / "empty" / "secret-args.yaml"
    for path, found in ((keyed, {"api-key": key, "admin-api-key": "adm"}), (empty, {})):
        path.parent.mkdir()
        secret_args.write(str(path), found)
    fields = ["api_key", "admin_api_key"]
    cases = [
        {"argv": BASE + ["--config", str(keyed)], "fields": fields},
        {"argv": BASE + ["--config", str(empty)], "fields": fields},
        {"argv": BASE + ["--api-key", "from-argv", "--config", str(keyed)], "fields": fields},
    ]
    results = ask(real_python, cases, tmp_path, clean_env())["results"]
    assert [r["fields"] for r in results] == [
        {"api_key": key, "admin_api_key": "adm"},
        {"api_key": None, "admin_api_key": None},
        {"api_key": "from-argv", "admin_api_key": "adm"},
    ]


def test_preflight_parses_a_keyed_profile_with_the_real_parser(real_python, tmp_path):
    """Before the start the --config file does not exist: preflight gives the parser an empty one."""
    node_dir = engine_flags.FLAGS_SCRIPT.parent
    secrets = {"SGLANG_API_KEY": {"from_env": "SGLANG_API_KEY", "server_arg": "api-key"}}
    argv = load_profile("baseline", overrides={"secrets": secrets}).argv()
    assert argv[-2:] == ["--config", "/run/sglang-env/sglang/secret-args.yaml"]
    code = (
        "import json, sys; sys.path.insert(0, %r); import preflight; "
        "print(json.dumps(preflight.check_argv(json.loads(sys.argv[1]))))" % str(node_dir)
    )
    result = subprocess.run(
        [real_python, "-c", code, json.dumps(argv)],
        env=clean_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == [
        "ok",
        f"the engine's parser accepts the {len(argv)} arguments",
    ]
