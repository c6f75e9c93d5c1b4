"""Batches and canaries as counts or percentages (rollout/sizes.py), the canary wave in the
restart's order (plan_waves) and rolling_max_fail_percent (Rollout)."""

import pytest

from sglang_deploy.errors import DeployError
from sglang_deploy.plan.hosts import deploy_defaults
from sglang_deploy.plan.settings import settings_of, validate
from sglang_deploy.rollout import sizes as rolling_sizes
from sglang_deploy.rollout.order import NodeFacts, Rollout, plan_waves


@pytest.mark.parametrize(
    "value, fleet, expected",
    [(1, 4, 1), (3, 2, 3), ("25%", 4, 1), ("25%", 7, 1), ("50%", 7, 3), ("100%", 8, 8), ("33.4%", 3, 1)],
)
def test_a_batch_is_a_count_or_a_percentage_rounded_down(value, fleet, expected):
    assert rolling_sizes.batch_size(value, fleet) == expected


def test_a_percentage_that_rounds_to_no_node_is_refused_naming_setting_value_and_fleet():
    with pytest.raises(DeployError) as err:
        rolling_sizes.batch_size("10%", 4)
    assert str(err.value) == "rolling_batch: 10% of 4 nodes is 0 nodes; use at least 25% or a count"
    with pytest.raises(DeployError, match="rolling_canary: 5% of 7 nodes is 0 nodes; use at least 15%"):
        rolling_sizes.canary_count("5%", 7)


def test_an_empty_run_needs_no_batch():
    assert rolling_sizes.nodes("rolling_batch", "10%", 0) == 0


@pytest.mark.parametrize("value", [0, "0", "0%", "150%", "-5%", "x%", "a quarter", True, 1.5])
def test_settings_refuse_what_is_neither_a_count_nor_a_percentage(value):
    with pytest.raises(DeployError, match="rolling_batch"):
        validate({"rolling_batch": value})


def test_settings_take_both_forms():
    assert validate({"rolling_batch": "25%"}).rolling_batch == "25%"
    assert validate({"rolling_batch": "3"}).rolling_batch == 3
    assert validate({"rolling_canary": 0}).rolling_canary == 0
    assert validate({"rolling_canary": "10%"}).rolling_canary == "10%"
    with pytest.raises(DeployError, match="rolling_max_fail_percent"):
        validate({"rolling_max_fail_percent": 120})


def test_a_canary_as_large_as_the_fleet_is_refused():
    with pytest.raises(
        DeployError, match="rolling_canary: 4 is 4 canaries of 4 serving nodes: none would be left"
    ):
        rolling_sizes.canary_count(4, 4)
    with pytest.raises(DeployError, match="rolling_canary: 9 is 9 canaries of 3"):
        rolling_sizes.canary_count(9, 3)
    with pytest.raises(DeployError, match="100% is 2 canaries of 2"):
        rolling_sizes.canary_count("100%", 2)
    assert rolling_sizes.canary_count("50%", 4) == 2
    assert rolling_sizes.canary_count(0, 4) == 0


def nodes(*names, model="m", idle=None):
    return [NodeFacts(name, model, idle) for name in names]


def test_the_canary_wave_comes_after_the_first_wave_alone():
    fleet = nodes("n1", "n2", "n3", "n4") + nodes("n5", idle="unit stopped")
    waves = plan_waves(fleet, 2, canary=1)
    assert waves.first == ("n5",)
    assert waves.canary == ("n1",)
    assert waves.batches == (("n1",), ("n2", "n3"), ("n4",))
    assert waves.wave_of("n1") == 1 and waves.wave_of("n2") == 2
    assert any(line.startswith("then canary wave: n1 alone") for line in waves.lines())


def test_a_canary_whose_model_keeps_no_old_node_is_refused():
    fleet = nodes("a1", "a2", model="a") + nodes("b1", model="b")
    with pytest.raises(DeployError, match="canary b1 would leave no node serving b on the old configuration"):
        plan_waves(fleet, 1, canary=3, others={"b": 1})
    # b1 alone serves b: it is never a canary (its model would go dark); a1 is
    waves = plan_waves(fleet, 1, canary=1)
    assert waves.canary == ("a1",)


def test_canaries_never_take_a_models_last_node_out_of_rotation():
    fleet = nodes("a1", "a2", model="a") + nodes("b1", "b2", model="b")
    waves = plan_waves(fleet, 1, canary=2)
    assert waves.canary == ("a1", "b1")


def test_max_fail_percent_stops_once_failures_exceed_that_share_of_the_run():
    run = Rollout(max_failures=0, max_fail_percent=25, size=8)
    run.failed("n1", "oom")
    run.failed("n2", "oom")
    assert run.refusal("n3") is None  # 2 of 8 = 25%: not more
    run.failed("n3", "oom")
    assert "more than 25% of 8 nodes failed" in run.refusal("n4")


def test_without_max_fail_percent_max_failures_decides():
    run = Rollout(max_failures=1, size=8)
    run.failed("n1", "oom")
    assert run.refusal("n2") is None
    run.failed("n2", "oom")
    assert run.refusal("n3").startswith("rollout stopped at n1 (oom); restarted before it")


def test_a_stopped_rollout_refuses_whatever_failed():
    run = Rollout(max_failures=5)
    run.stop("canary n1 failed its bake (decode tok/s)")
    assert run.refusal("n2") == "rollout stopped: canary n1 failed its bake (decode tok/s)"


def test_rolling_settings_carry_the_canary():
    data = {
        **deploy_defaults(),
        "rolling_canary": "25%",
        "rolling_canary_bake_s": 5,
        "rolling_max_fail_percent": 10,
    }
    settings = settings_of(data)
    canary, rolling = settings.canary, settings.rolling
    assert canary.rolling_canary == "25%" and canary.rolling_canary_bake_s == 5.0
    assert rolling.rolling_max_fail_percent == 10
    assert rolling_sizes.batch_size(rolling.rolling_batch, 4) == 1
