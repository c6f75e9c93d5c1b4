"""Flag names checked exactly: the lint against the pinned engine's committed option list, the
node's preflight against the installed parser (the stand-in here: like SGLang's, its argparse
accepts abbreviations, so the check is ours); and the deploy refusing a profile with lint
errors before any host is touched."""

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sglang_deploy.cli import DeployStopped, exit_on_deploy_error
from sglang_deploy.errors import DeployError
from sglang_deploy.node import flags
from sglang_deploy.plan.host_plan import plan_for, print_lint_warnings
from sglang_deploy.profile import engine_flags, lint
from sglang_deploy.profile.schema import load_profile

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "engine-standin"
PREFLIGHT = REPO / "sglang_deploy" / "node" / "preflight.py"
OPTIONS = engine_flags.options_for("0.5.23")
HOST_DATA = {
    "sglang_deploy_dir": "/opt/sd",
    "env_dir": "/etc/sglang",
    "unit_dir": "/etc/systemd/system",
    "state_dir": "/var/lib/sd",
    "run_dir": "/run/sd",
    "deploy_lock_wait_s": 1,
    "rollback": True,
    "repair": False,
}
NO_WHEELS = {"engine": {"find_links": []}}  # unit tests do not need the stand-in wheel built


def profile_file(tmp_path, name, body):
    path = tmp_path / f"{name}.yml"
    path.write_text(f"extends: {REPO}/profiles/{body.pop('extends')}.yml\n" + yaml.safe_dump(body))
    return str(path)


def cli(*argv):
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "stdout", out)
        status = lint.main(list(argv))
    return status, out.getvalue().splitlines()


# -- The check itself ------------------------------------------------------------------------


def test_the_committed_list_is_sglang_0_5_23s():
    assert engine_flags.options_file("0.5.23").name == "sglang-0.5.23.txt"
    assert {
        "--speculative-num-steps",
        "--tp-size",
        "--tensor-parallel-size",
        "--model-path",
        "--cuda-graph-max-bs-decode",
        "--cuda-graph-max-bs-prefill",
    } <= OPTIONS
    assert "--speculative-num-step" not in OPTIONS and "--cuda-graph-max-bs" not in OPTIONS


@pytest.mark.parametrize(
    "flag, why",
    [
        (
            "--speculative-num-step",
            "--speculative-num-step is not a flag of E (argparse would take "
            "it as an abbreviation of --speculative-num-steps): did you mean --speculative-num-steps?",
        ),
        (
            "--speculative-num-stpes",
            "--speculative-num-stpes is not a flag of E: did you mean --speculative-num-steps?",
        ),
        (
            "--cuda-graph-max-bs",
            "--cuda-graph-max-bs is not a flag of E (argparse would find it "
            "ambiguous: --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill): did you mean "
            "--cuda-graph-max-bs-decode or --cuda-graph-max-bs-prefill?",
        ),
        ("--no-such-thing-at-all", "--no-such-thing-at-all is not a flag of E"),
        ("--tp-size", None),
        ("--tensor-parallel-size", None),
    ],
)
def test_flag_problem(flag, why):
    assert flags.flag_problem(flag, OPTIONS, "E") == why


def test_argv_problems_looks_at_flags_only():
    argv = [
        "--model-path",
        "/m",
        "--tp-size",
        "2",
        "--speculative-num-step=2",
        "--host",
        "--not-a-value-here",
        "--",
        "--after-the-end",
    ]
    assert [flag for flag, _ in flags.argv_problems(argv, OPTIONS)] == [
        "--speculative-num-step",
        "--not-a-value-here",
    ]


# -- The lint --------------------------------------------------------------------------------


def test_lint_refuses_an_abbreviated_flag_with_did_you_mean(tmp_path):
    path = profile_file(
        tmp_path, "abbrev", {"extends": "eagle3-2step", "server_args": {"speculative-num-step": 2}}
    )
    status, lines = cli(path)
    assert status == 1
    assert lines[0] == (
        f"{path}: error: server_args.speculative-num-step: --speculative-num-step is not a flag "
        f"of sglang 0.5.23 (argparse would take it as an abbreviation of "
        f"--speculative-num-steps): did you mean --speculative-num-steps?"
    )
    assert lines[-1] == "1 profile checked: 1 error, 3 warnings"


def test_make_lint_profiles_catches_a_misspelled_flag(tmp_path):
    """`make lint-profiles` runs `python -m sglang_deploy.profile.lint`: the misspelling fails it."""
    path = profile_file(tmp_path, "typo", {"extends": "sandbox", "server_args": {"speculative-num-stpes": 2}})
    result = subprocess.run(
        [sys.executable, "-m", "sglang_deploy.profile.lint", path],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    # The stand-in's build (0.5.23+sandbox) is checked against 0.5.23's list.
    assert (
        f"{path}: error: server_args.speculative-num-stpes: --speculative-num-stpes is not "
        f"a flag of sglang 0.5.23+sandbox: did you mean --speculative-num-steps?"
    ) in result.stdout.splitlines()


def test_every_shipped_profile_names_its_flags_exactly(in_repo):
    for path in sorted((REPO / "profiles").glob("*.yml")):
        assert engine_flags.lint_flags(load_profile(path)) == [], path.name


def test_a_version_without_an_option_list_is_a_warning(tmp_path):
    path = profile_file(
        tmp_path,
        "newer",
        {
            "extends": "baseline",
            # Installed from an index: the pin set needs no lock (the lint warns of that too).
            "engine": {"packages": ["sglang[all]==0.9.1"], "install_from": "index"},
            "server_args": {"speculative-num-step": 2},
        },
    )
    status, lines = cli(path)
    assert status == 0
    assert lines[0] == (
        f"{path}: warning: engine.packages: no option list for sglang 0.9.1 "
        f"(have: 0.5.23): flag names are checked on the node only (preflight); "
        f"`make engine-options` adds one"
    )


def test_pinned_version():
    assert engine_flags.pinned_version(["torch==2.13.0", "SGLang[all]==0.5.23"]) == "0.5.23"
    assert engine_flags.pinned_version(["sglang==0.5.23+sandbox"]) == "0.5.23+sandbox"
    assert engine_flags.pinned_version(["sglang-router==0.1.0"]) is None


# -- On the node: preflight asks the installed parser ----------------------------------------


def preflight_argv(argv):
    """check_argv of preflight.py run as the node runs it, with the stand-in installed."""
    code = (
        "import json, sys; sys.path.insert(0, %r); import preflight; "
        "print(json.dumps(preflight.check_argv(json.loads(sys.argv[1]))))" % str(PREFLIGHT.parent)
    )
    result = subprocess.run(
        [sys.executable, "-c", code, json.dumps(argv)],
        cwd="/",
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(STANDIN)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return tuple(json.loads(result.stdout))


def test_preflight_refuses_an_abbreviation_the_engine_parser_accepts():
    argv = load_profile("sandbox-eagle3").argv()
    abbreviated = ["--speculative-num-step" if a == "--speculative-num-steps" else a for a in argv]
    assert abbreviated != argv
    # The parser itself takes the abbreviation, as SGLang's argparse does ...
    parsed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from sglang.srt.server_args import "
            "prepare_server_args as p; print(p(sys.argv[1:]).speculative_num_steps)",
            *abbreviated,
        ],
        cwd="/",
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(STANDIN)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert parsed.stdout.strip() == "2", parsed.stderr
    # ... and preflight refuses it by name, with the flag meant.
    assert preflight_argv(abbreviated) == (
        "failed",
        "--speculative-num-step is not a flag of the engine (argparse would take it "
        "as an abbreviation of --speculative-num-steps): did you mean --speculative-num-steps?",
    )
    assert preflight_argv(argv) == ("ok", f"the engine's parser accepts the {len(argv)} arguments")


# -- The deploy's first step -----------------------------------------------------------------


def test_plan_refuses_a_profile_with_lint_errors_naming_host_and_file(tmp_path, capsys):
    path = profile_file(
        tmp_path, "fast", {"extends": "sandbox", "env": {"NCCL_PROTO": "LL,Fast", "NCCL_NTHREADS": 100}}
    )
    # A host's deploy code stops the run (pyinfra says so once) after saying why in its lines.
    with pytest.raises(DeployStopped), exit_on_deploy_error("node1"):
        plan_for({**HOST_DATA, "profile": path, "profile_overrides": NO_WHEELS})
    lines = capsys.readouterr().err.splitlines()
    where = f"sglang-deploy: node1: {path} with profile_overrides: error:"
    assert lines == [
        f"{where} NCCL_PROTO: unknown protocol 'Fast' (expected one of: LL, LL128, Simple)",
        f"{where} NCCL_NTHREADS: must be 64, 128, 256 or 512 (got '100')",
        "sglang-deploy: node1: the profile has lint errors (`make lint-profiles`): nothing was changed",
    ]


def test_plan_refuses_an_abbreviated_flag(tmp_path):
    path = profile_file(
        tmp_path, "abbrev", {"extends": "sandbox-eagle3", "server_args": {"speculative-num-step": 2}}
    )
    with pytest.raises(DeployError, match="did you mean --speculative-num-steps"):
        plan_for({**HOST_DATA, "profile": path, "profile_overrides": NO_WHEELS})


def test_warnings_are_printed_once_for_hosts_sharing_a_profile(tmp_path):
    path = profile_file(tmp_path, "warned", {"extends": "sandbox", "env": {"NCCL_BUFFSIZE": 4000000}})
    plans = [plan_for({**HOST_DATA, "profile": path, "profile_overrides": NO_WHEELS}) for _ in range(3)]
    out = io.StringIO()
    for plan in plans:
        print_lint_warnings(plan, out=out)
    lines = out.getvalue().splitlines()
    assert len(plans[0].lint_warnings) == 4
    assert lines == [f"sglang-deploy: {line}" for line in plans[0].lint_warnings]
    assert any("NCCL_BUFFSIZE: 4000000 is not a power of two" in line for line in lines)
