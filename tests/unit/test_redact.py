"""Secret values never reach `make verify`'s output: the Redactor, the report plugin every
tests/host report passes through, the checks' details, the summary and the Makefile target."""

import json
import os
import secrets
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from sglang_deploy.profile.schema import load_profile
from sglang_deploy.verify import service_checks, summary
from sglang_deploy.verify.redact import MASK, Redactor

REPO_ROOT = Path(__file__).resolve().parents[2]

SECRET = "hf_" + secrets.token_hex(16)


def test_known_values_are_masked_as_printed_plain_repr_and_json():
    odd = "tok'en\\with\"quotes"
    redact = Redactor(values=[SECRET, odd])
    text = f"{SECRET} {odd!r} {json.dumps(odd)} {[odd]}"
    assert SECRET not in redact.text(text) and "with" not in redact.text(text)
    assert redact.text(f"x {SECRET} y") == f"x {MASK} y"


@pytest.mark.parametrize(
    "shown",
    [
        'HF_TOKEN="{v}"',  # env file line
        "HF_TOKEN={v}",  # environ entry, shell line
        "['PATH=/bin', 'HF_TOKEN={v}']",  # a list of env file lines
        "b'PATH=/bin\\x00HF_TOKEN={v}\\x00LANG=C'",  # raw /proc/<pid>/environ
        '_stdout=b\'A="1"\\nHF_TOKEN="{v}"\\n\'',  # testinfra's debug log of a cat
        "{{'HF_TOKEN': '{v}', 'A': '1'}}",  # a dict's repr
        '{{"HF_TOKEN": "{v}"}}',  # JSON
    ],
)
def test_unknown_values_are_masked_by_the_secret_name(shown):
    """A node can hold a value the operator running verify never exported."""
    text = Redactor(names=["HF_TOKEN"]).text(shown.format(v=SECRET))
    assert SECRET not in text and MASK in text
    assert ("LANG=C" in text) == ("LANG=C" in shown) and ("PATH=/bin" in text) == ("PATH=/bin" in shown)


def test_mapping_masks_by_name_and_value():
    redact = Redactor(names=["HF_TOKEN"], values=[SECRET])
    assert redact.mapping({"HF_TOKEN": "other", "A": f"x{SECRET}", "B": "1"}) == {
        "HF_TOKEN": MASK,
        "A": f"x{MASK}",
        "B": "1",
    }


def test_profile_secrets_and_operator_values():
    profile = load_profile("sandbox")
    redact = Redactor.for_profile(profile, {"HF_TOKEN": SECRET})
    assert "HF_TOKEN" in redact.names and SECRET not in redact.text(f"token {SECRET}")


# -- The report plugin, on real pytest runs -----------------------------------------------------

FAILING_TESTS = """
import logging, os
from dataclasses import dataclass
import pytest

TOKEN = os.environ["TOKEN_UNDER_TEST"]

@dataclass
class Plan:
    env_text: str

def test_dict_compare():
    env = {"HF_TOKEN": TOKEN, "A": "1"}
    assert env == {"HF_TOKEN": "x", "A": "2"}

def test_in_lines():
    lines = [f'HF_TOKEN="{TOKEN}"', 'A="1"']
    assert 'A="2"' in lines

def test_environ_bytes():
    raw = f"PATH=/bin\\0HF_TOKEN={TOKEN}\\0".encode()
    assert b"X=1" in raw

def test_object_attribute():
    plan = Plan(env_text=f'HF_TOKEN="{TOKEN}"')
    assert plan.env_text.startswith("A=")

def test_value_cut_by_a_shortened_repr():
    blob = "x" * 100 + TOKEN + "y" * 300
    assert blob == "z"

def test_exception():
    raise RuntimeError(f"could not use {TOKEN}")

def test_output_captured():
    print(TOKEN)
    logging.getLogger().warning("token %s", TOKEN)
    assert False

def test_skip_reason():
    pytest.skip(f"skipped with {TOKEN}")

def test_passes_with_output():
    print(f"HF_TOKEN={TOKEN}")

@pytest.fixture
def broken():
    raise ValueError(TOKEN)

def test_setup_error(broken):
    pass
"""

CONFTEST = """
from sglang_deploy.verify.redact import Redactor
from sglang_deploy.verify.pytest_redaction import ReportRedaction

def pytest_configure(config):
    if config.getoption("redact"):
        config.pluginmanager.register(ReportRedaction(Redactor(values=[{secret!r}])))

def pytest_addoption(parser):
    parser.addoption("--no-redact", dest="redact", action="store_false")
"""

VERBOSITIES = [
    ["-q"],
    ["-v"],
    ["-vv"],
    ["-l", "--tb=long"],
    ["-vv", "-l", "--tb=long", "-rA"],
    ["-q", "-rA", "--tb=short"],
    ["--tb=line"],
    ["--tb=native", "-l"],
]


def shown_parts(output, secret=SECRET, size=6):
    """Every piece of ``secret`` (``size`` characters or more) that ``output`` shows."""
    return sorted(
        {secret[i : i + size] for i in range(len(secret) - size + 1) if secret[i : i + size] in output}
    )


@pytest.fixture(scope="module")
def failing_suite(tmp_path_factory):
    directory = tmp_path_factory.mktemp("suite")
    (directory / "test_leaky.py").write_text(FAILING_TESTS)
    (directory / "conftest.py").write_text(CONFTEST.format(secret=SECRET))

    def run(*args):
        env = {**os.environ, "TOKEN_UNDER_TEST": SECRET, "PYTHONPATH": str(REPO_ROOT)}
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
            cwd=directory,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        return done.returncode, done.stdout + done.stderr

    return run


def test_without_the_plugin_these_tests_do_print_the_secret(failing_suite):
    returncode, output = failing_suite("-vv", "-l", "-rA", "--no-redact")
    assert returncode == 1 and SECRET in output


@pytest.mark.parametrize("args", VERBOSITIES, ids=" ".join)
def test_no_report_shows_the_secret_at_any_verbosity(failing_suite, args):
    returncode, output = failing_suite(*args)
    assert returncode == 1
    assert "8 failed" in output or "7 failed, 1 passed, 1 skipped, 1 error" in output, output[-800:]
    assert not shown_parts(output), shown_parts(output)
    if "--tb=line" not in args:
        assert MASK in output


def test_short_summary_keeps_the_failure_line(failing_suite):
    _, output = failing_suite("-q", "-rfE")
    assert "FAILED test_leaky.py::test_exception - RuntimeError: could not use ***" in output


# -- Checks and the summary ---------------------------------------------------------------------


@dataclass
class Result:
    rc: int
    stdout: str
    stderr: str = ""


class NodeWithOutput:
    """A testinfra-like host whose every command prints ``stdout``."""

    def __init__(self, stdout, rc=0):
        self.result = Result(rc, stdout)

    def run(self, command):
        return self.result


def test_a_check_detail_never_carries_a_secret(monkeypatch):
    """The gate's cause text (journal lines) is node output: a server that logs the token."""
    monkeypatch.setenv("HF_TOKEN", SECRET)
    from sglang_deploy.plan.host_plan import plan_for

    plan = plan_for(
        {
            "profile": "baseline",
            "sglang_deploy_dir": "/opt/d",
            "env_dir": "/etc/s",
            "unit_dir": "/etc/systemd/system",
            "state_dir": "/var/lib/d",
            "deploy_lock_wait_s": 1,
            "rollback": True,
            "repair": False,
        }
    )
    report = {
        "status": 3,
        "status_name": "FAILED",
        "cause_text": f"Traceback: bad token {SECRET}; env HF_TOKEN=hf_value_never_exported",
    }
    found = service_checks.last_start(NodeWithOutput(json.dumps(report)), plan)
    assert SECRET not in found.detail and "hf_value_never_exported" not in found.detail
    assert found.detail.startswith("FAILED: Traceback: bad token ***")


def test_summary_row_says_which_profile_was_checked_and_which_last_passed():
    report = {
        "host": "node1",
        "profile": "sandbox-eagle3",
        "checks": [
            {"name": "serving", "state": "failed", "detail": ""},
            {
                "name": "last good",
                "state": "warning",
                "detail": "sandbox (passed the gate at 2026-11-30 19:00:00 UTC; verified against "
                "sandbox-eagle3: rolled back?)",
                "data": {"profile": "sandbox", "saved_at": "2026-11-30 19:00:00 UTC"},
            },
        ],
    }
    report["last_passed_gate"] = summary.last_passed(report)
    row = summary.row(report)
    assert dict(zip(summary.COLUMNS, row))["checked against"] == "sandbox-eagle3"
    assert dict(zip(summary.COLUMNS, row))["last passed gate"] == "sandbox"


def test_make_verify_prints_the_summary_when_an_assertion_failed_and_still_fails():
    done = subprocess.run(
        ["make", "-s", "verify", "PYTEST=false", "PYTHON=echo summary-ran"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "summary-ran -m sglang_deploy.verify.summary" in done.stdout, done.stdout + done.stderr
    assert done.returncode != 0


def test_make_verify_fails_when_only_the_summary_failed():
    done = subprocess.run(
        ["make", "-s", "verify", "PYTEST=true", "PYTHON=false"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
