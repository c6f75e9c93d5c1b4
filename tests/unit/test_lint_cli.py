"""`python -m sglang_deploy.profile.lint`: profiles through the loader, then the NCCL lint; the JSON
Schema (schema/profile.schema.json is the committed copy)."""

import io
import json
import re
import subprocess
import sys

import pytest
import yaml

from sglang_deploy.profile import lint
from sglang_deploy.profile.schema import PROFILES_DIR, schema_json

SCHEMA_FILE = PROFILES_DIR.parent / "schema" / "profile.schema.json"
CLEAN = {
    "description": "d",
    "engine": {"packages": ["sglang==0.5.23"]},
    "model": {"path": "/models/m", "served_name": "m"},
}


def cli(*argv):
    """(exit status, printed lines) of the command line."""
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "stdout", out)
        status = lint.main(list(argv))
    return status, out.getvalue().splitlines()


def profile_file(tmp_path, name, env):
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.safe_dump({**CLEAN, "env": env}))
    return str(path)


# -- Profiles --------------------------------------------------------------------------------


def test_every_shipped_profile_by_default(in_repo):
    status, lines = cli()
    names = sorted(p.name for p in PROFILES_DIR.glob("*.yml"))
    assert status == 0
    assert sorted({line.split(":")[0] for line in lines[:-1]}) == [f"profiles/{n}" for n in names]
    assert all(": warning: " in line for line in lines[:-1])
    assert re.fullmatch(rf"{len(names)} profiles checked: 0 errors, \d+ warnings", lines[-1])


def test_baseline_lines(in_repo):
    status, lines = cli("baseline")
    assert status == 0
    assert lines == [
        "profiles/baseline.yml: warning: NCCL_MAX_NCHANNELS: deprecated since NCCL 2.17: use NCCL_MAX_CTAS",
        "profiles/baseline.yml: warning: NCCL_BUFFSIZE: has no effect with NCCL_PROTO=LL: it "
        "sizes only the Simple protocol's buffer (LL uses NCCL_LL_BUFFSIZE)",
        "profiles/baseline.yml: warning: NCCL_PROTO, NCCL_ALGO, NCCL_P2P_LEVEL, "
        "NCCL_MAX_NCHANNELS, NCCL_BUFFSIZE, NCCL_NTHREADS: NCCL's guide lists these under "
        '"Debugging", not for production (sub-optimal behaviour, crashes or hangs): keep them '
        "only if an A/B all-reduce measurement on the node proves they help",
        "1 profile checked: 0 errors, 3 warnings",
    ]


def test_names_and_paths_mix(in_repo):
    status, lines = cli("sandbox", "profiles/eagle3-2step.yml")
    assert status == 0
    assert {line.split(":")[0] for line in lines[:-1]} == {
        "profiles/sandbox.yml",
        "profiles/eagle3-2step.yml",
    }
    assert lines[-1] == "2 profiles checked: 0 errors, 6 warnings"


def test_strict_fails_on_warnings(tmp_path):
    warn = profile_file(tmp_path, "warn", {"NCCL_BUFFSIZE": "4000000"})
    clean = profile_file(tmp_path, "clean", {"NCCL_DEBUG": "WARN"})
    assert cli(clean) == (0, ["1 profile checked: 0 errors, 0 warnings"])
    assert cli("--strict", clean)[0] == 0
    status, lines = cli(warn)
    assert status == 0 and lines[-1] == "1 profile checked: 0 errors, 2 warnings"
    assert lines[0] == (
        f"{warn}: warning: NCCL_BUFFSIZE: 4000000 is not a power of two "
        f"(NCCL recommends powers of two; default 4194304)"
    )
    assert cli("--strict", warn)[0] == 1


def test_errors_fail(tmp_path):
    bad = profile_file(tmp_path, "bad", {"NCCL_NTHREADS": 500, "NCCL_P2P_LEVEL": "sys"})
    status, lines = cli(bad)
    assert status == 1
    assert lines == [
        f"{bad}: error: NCCL_NTHREADS: must be 64, 128, 256 or 512 (got '500')",
        f"{bad}: error: NCCL_P2P_LEVEL: 'sys': NCCL matches level names case-sensitively and "
        f"ignores this one (write 'SYS')",
        f"{bad}: warning: NCCL_NTHREADS, NCCL_P2P_LEVEL: NCCL's guide lists these under "
        '"Debugging", not for production (sub-optimal behaviour, crashes or hangs): keep them '
        "only if an A/B all-reduce measurement on the node proves they help",
        "1 profile checked: 2 errors, 1 warning",
    ]


def test_profiles_that_do_not_load_are_errors(in_repo):
    status, lines = cli("tests/unit/bad_profiles/tab.yml", "basline", "baseline")
    assert status == 1
    assert lines[:2] == [
        "tests/unit/bad_profiles/tab.yml:4: tab character (indent YAML with spaces)",
        "no profile named 'basline' in profiles (did you mean 'baseline'?)",
    ]
    assert lines[-1] == "3 profiles checked: 2 errors, 3 warnings"


def test_every_bad_profile_in_the_corpus_fails(in_repo):
    corpus = yaml.safe_load((in_repo / "tests/unit/bad_profiles/expected.yml").read_text())
    status, lines = cli(*(f"tests/unit/bad_profiles/{name}" for name in sorted(corpus)))
    assert status == 1
    assert lines[-1] == f"{len(corpus)} profiles checked: {len(corpus)} errors, 0 warnings"
    assert "\n".join(lines[:-1]) == "\n".join(corpus[name] for name in sorted(corpus))


def test_runs_as_a_module(in_repo):
    result = subprocess.run(
        [sys.executable, "-m", "sglang_deploy.profile.lint", "--strict", "sandbox"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    assert result.stdout.splitlines()[-1] == "1 profile checked: 0 errors, 3 warnings"


# -- JSON Schema -----------------------------------------------------------------------------


def test_schema_is_printed():
    status, lines = cli("--schema")
    assert status == 0
    assert "\n".join(lines) == schema_json()
    assert json.loads("\n".join(lines))["properties"]["extends"] == {"type": "string", "title": "Extends"}


def test_committed_schema_is_current():
    """After a change to the profile schema: `make schema` (or
    `python -m sglang_deploy.profile.lint --schema > schema/profile.schema.json`)."""
    assert SCHEMA_FILE.read_text() == schema_json() + "\n"


def test_schema_takes_no_profiles(capsys):
    with pytest.raises(SystemExit) as exc:
        lint.main(["--schema", "baseline"])
    assert exc.value.code == 2
    assert "--schema takes no other argument" in capsys.readouterr().err
