"""A canary wave behind SGLang's router: 3 serving nodes and a router node, a bake of a few
seconds under a load through the router. A change that decodes slower on its canary (the
stand-in's SGLANG_STANDIN_TOKENS_PER_SECOND) is rolled back and the run stops; a change that
does not is followed by the other nodes, its figures on the router's exporter judged too.

python3 sandbox/sandbox.py up --nodes 3 --routers 1 && python3 -m pytest -m fleet tests/e2e/test_canary.py
"""

import re

import pytest

from .sandbox import env_values, profile_dir, unit_start  # noqa: F401 (a fixture)
from .test_fleet import (  # noqa: F401 (a fixture)
    _outcome_line,
    deployed,
    fleet_deploy,
    router_view,
    sandbox_with_env,
    under_load,
)

pytestmark = [pytest.mark.e2e, pytest.mark.fleet]

# One canary, baked 8 s: the load (3 at a time through the router) finishes far more requests.
CANARY = (
    "--data",
    "rolling_canary=1",
    "--data",
    "rolling_canary_bake_s=8",
    "--data",
    "rolling_canary_min_requests=5",
)


def _canary_of(output):
    found = re.search(r"canary wave: (\S+?),? alone", output)
    assert found, output[-4000:]
    return found.group(1)


def test_a_slower_canary_is_rolled_back_and_the_run_stops(deployed, profile_dir):  # noqa: F811
    names, ports, router, router_port = deployed
    slower = sandbox_with_env(profile_dir, "canary-slower", SGLANG_STANDIN_TOKENS_PER_SECOND=20)
    before = {name: env_values(name).get("SGLANG_STANDIN_TOKENS_PER_SECOND") for name in names}
    starts = {name: unit_start(name) for name in names}
    run, load = under_load(router_port, lambda: fleet_deploy(slower, names, router, args=CANARY))
    assert run.returncode != 0, run.output[-4000:]
    canary = _canary_of(run.output)
    rest = [n for n in names if n != canary]
    assert re.search(rf"canary {canary} failed its bake: {canary}: (decode tok/s|TTFT p95)", run.output), (
        run.output[-4000:]
    )
    assert f"sglang-deploy: {canary}: failed" in run.output
    assert "canary rolled back: serves" in _outcome_line(run.output, canary)
    # The canary restarted (twice: the new configuration, then the old one back) ...
    assert unit_start(canary) != starts[canary]
    assert env_values(canary).get("SGLANG_STANDIN_TOKENS_PER_SECOND") == before[canary]
    # ... the others never did, and their files went back.
    for name in rest:
        assert unit_start(name) == starts[name], f"{name} was restarted after the canary failed"
        assert "not restarted: serves" in _outcome_line(run.output, name)
        assert env_values(name).get("SGLANG_STANDIN_TOKENS_PER_SECOND") == before[name]
    assert sorted(router_view(router_port).values()) == [True] * len(names)
    assert load.failed == 0, f"{load.failed} of {load.sent} requests failed during the canary"
    # The failed canary is listed for a re-run once the change is fixed.
    assert canary in run.output.split("to re-run", 1)[-1]
    # Nothing is left half-applied: the profile every node serves is a no-op run.
    again = fleet_deploy("sandbox", names, router)
    assert again.returncode == 0 and "out of rotation" not in again.output, again.output[-3000:]


def test_a_canary_that_does_as_well_is_followed_by_the_others(deployed, profile_dir):  # noqa: F811
    names, ports, router, router_port = deployed
    same_speed = sandbox_with_env(profile_dir, "canary-same", SGLANG_STANDIN_LOAD_SECONDS=4)
    starts = {name: unit_start(name) for name in names}
    run, load = under_load(router_port, lambda: fleet_deploy(same_speed, names, router, args=CANARY))
    assert run.returncode == 0, run.output[-4000:]
    canary = _canary_of(run.output)
    assert f"canary bake passed: {canary}" in run.output
    # The gateway's figures were read from the router's exporter and judged, not left out.
    assert re.search(
        rf"gateway: {canary}: \d+ answers, error rate [0-9.]+% \(smg_worker_cb_outcomes_total", run.output
    ), run.output[-4000:]
    assert "not judged there" not in run.output
    assert "canary passed its bake" in _outcome_line(run.output, canary)
    assert all(unit_start(name) != starts[name] for name in names)
    assert load.failed == 0
    # Back to the served profile for the tests after this one.
    assert fleet_deploy("sandbox", names, router).returncode == 0
