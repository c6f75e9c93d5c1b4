"""The incident replayed on a sandbox node: the baseline at 82 tok/s deployed and recorded, then
EAGLE-3 on the same node (the stand-in's speculation model: 2 draft steps, accept length ~1.9,
the verify pass's cost: ~60 tok/s) with `max_regression_pct: 10`: the deploy reports -27%;
`on_regression: rollback` serves the baseline again, `warn` deploys with a warning. `make report`
shows it. The stand-in's configured rate (SGLANG_STANDIN_TOKENS_PER_SECOND) stands in for the GPU."""

import json
import re
import shlex
import subprocess

import pytest

from sglang_deploy.node.lib import result

from .sandbox import (  # noqa: F401 (a fixture)
    REPO_ROOT,
    deploy,
    profile_dir,
    ssh,
    unit_start,
    wipe,
    write_profile,
)

pytestmark = pytest.mark.e2e

HISTORY = "/var/lib/sglang-deploy/sglang/throughput.jsonl"
LAST_GOOD = "python3 /opt/sglang-deploy/node/lastgood.py show --dir /var/lib/sglang-deploy/sglang/last-good"
REGRESSION = re.compile(r"(\d+\.\d) tok/s \(-(2[5-9])% vs baseline (8\d\.\d)\)")


def eagle3(profile_dir, policy):
    return write_profile(
        profile_dir,
        f"incident-eagle3-{policy}",
        f"""
        extends: {{profiles}}/sandbox-eagle3.yml
        env:
          SGLANG_STANDIN_TOKENS_PER_SECOND: 82
        throughput:
          max_regression_pct: 10
          on_regression: {policy}
    """,
    )


@pytest.fixture(scope="module")
def baseline(profile_dir):
    wipe("node1")
    path = write_profile(
        profile_dir,
        "incident-baseline",
        """
        extends: {profiles}/sandbox.yml
        env:
          SGLANG_STANDIN_TOKENS_PER_SECOND: 82
    """,
    )
    run = deploy({"node1": path}, limit="node1")
    assert run.returncode == 0, run.output[-5000:]
    return run


def node_history():
    return [json.loads(line) for line in ssh("node1", f"cat {HISTORY}").splitlines()]


def serving_rate():
    """Decode tok/s of what node1 serves now, measured on the node with the check's own code."""
    code = (
        "import sys; sys.path.insert(0, '/opt/sglang-deploy/node'); from lib import decode_rate; "
        "print(decode_rate.measure('http://127.0.0.1:%d/v1/chat/completions', "
        "'tiny-standin', [], 2, 0, 24, 30)['decode_tok_s'])" % node_history()[-1]["port"]
    )
    return float(ssh("node1", f"python3 -c {shlex.quote(code)}").strip())


def test_a_profile_without_expectations_records_its_figures(baseline):
    entry = node_history()[-1]
    assert entry["profile"] == "incident-baseline" and entry["regression"] == [] and entry["accepted"]
    assert 78 < entry["decode_tok_s"] < 84 and entry["engine_version"] == "0.5.23+sandbox"
    assert "not a GPU's" in baseline.output  # the stand-in says so, from its version string
    local = [
        json.loads(line)
        for line in (REPO_ROOT / "reports" / "throughput" / "node1.jsonl").read_text().splitlines()
    ]
    assert local[-1]["time"] == entry["time"] and local[-1]["host"] == "node1"
    last = baseline.output.strip().splitlines()[-2]
    assert re.fullmatch(
        r"sglang-deploy: node1: deployed \(\d+ operations changed; "
        r"8\d\.\d tok/s \(no baseline yet\)\)",
        last.strip(),
    ), last


def test_eagle3_regression_rolls_back_to_the_baseline(baseline, profile_dir):
    run = deploy({"node1": eagle3(profile_dir, "rollback")}, limit="node1")
    assert run.returncode != 0, run.output[-5000:]
    assert REGRESSION.search(run.output), run.output[-5000:]
    assert "exceeds max_regression_pct 10" in run.output
    assert "rolled back: serving incident-baseline again" in run.output
    # The deploy measured the restored baseline itself, and recorded it under its own name.
    assert re.search(
        r"decode check after the rollback: incident-baseline serves at 8\d\.\d tok/s", run.output
    )
    outcome = run.output.strip().splitlines()[-2]
    assert outcome.startswith("sglang-deploy: node1: failed") and REGRESSION.search(outcome), outcome
    assert result.parse(ssh("node1", LAST_GOOD).splitlines())["manifest"]["profile"] == "incident-baseline"
    regressed, restored = node_history()[-2:]
    assert regressed["profile"] == "incident-eagle3-rollback" and not regressed["accepted"]
    assert restored["profile"] == "incident-baseline" and restored["restored"] and restored["accepted"]
    assert 78 < serving_rate() < 84  # the baseline serves again
    print(
        "\nthe incident replayed (-s):",
        *[
            line
            for line in run.output.splitlines()
            if re.search(r"decode check|rolled back|rolling back|sglang-deploy: node1", line)
        ],
        sep="\n",
    )


def test_eagle3_regression_with_fail_stays_unrecorded_however_often_it_is_rerun(baseline, profile_dir):
    profile = eagle3(profile_dir, "fail")
    run = deploy({"node1": profile}, limit="node1")
    assert run.returncode != 0 and REGRESSION.search(run.output), run.output[-5000:]
    assert "the new configuration serves, but is not recorded as the last known good" in run.output
    started = unit_start("node1")
    # Nothing changed since: the re-run restarts nothing, measures what serves again and
    # still refuses to record it.
    rerun = deploy({"node1": profile}, limit="node1")
    assert rerun.returncode != 0 and REGRESSION.search(rerun.output), rerun.output[-5000:]
    assert unit_start("node1") == started
    assert result.parse(ssh("node1", LAST_GOOD).splitlines())["manifest"]["profile"] == "incident-baseline"
    checks = [e for e in node_history() if e["profile"] == "incident-eagle3-fail"]
    assert len(checks) == 2 and not any(e["accepted"] for e in checks)


def test_eagle3_regression_with_warn_deploys_with_a_warning(baseline, profile_dir):
    run = deploy({"node1": eagle3(profile_dir, "warn")}, limit="node1")
    assert run.returncode == 0, run.output[-5000:]
    assert "regression (on_regression: warn)" in run.output
    outcome = run.output.strip().splitlines()[-2]
    assert outcome.startswith("sglang-deploy: node1: deployed") and REGRESSION.search(outcome), outcome
    assert result.parse(ssh("node1", LAST_GOOD).splitlines())["manifest"]["profile"] == "incident-eagle3-warn"


def test_make_report_shows_the_recorded_figures(baseline):
    done = subprocess.run(
        ["make", "-s", "report"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    page = (REPO_ROOT / "reports" / "index.html").read_text()
    latest = node_history()[-1]  # incident-eagle3-warn's, the last check
    assert f"<td>{latest['profile']}</td>" in page
    assert (
        f"<td>{latest['decode_tok_s']:.1f}</td>" in page and f"<td>{latest['change_pct']:+.0f}%</td>" in page
    )
    for profile in ("incident-baseline", "incident-eagle3-rollback"):
        assert f"<td>{profile}</td>" in page
        assert (REPO_ROOT / "reports" / "throughput" / f"node1--{profile}.svg").is_file()
        assert f'src="throughput/node1--{profile}.svg"' in page
