"""The profile's gpu: settings against nvidia-smi's query (captured on an H200 node)."""

from pathlib import Path

import pytest

from sglang_deploy.facts.gpu import GpuPersistence, acs_unit_text
from sglang_deploy.node import preflight
from sglang_deploy.node.lib import gpu_settings

CAPTURED = Path(__file__).parent / "captured"
H200 = (CAPTURED / "query_gpu_settings_h200.csv").read_text()


def test_parse_captured_query_with_and_without_header():
    gpus = gpu_settings.parse(H200)
    assert gpus == [
        {
            "index": "0",
            "name": "NVIDIA H200",
            "driver_version": "580.159.04",
            "persistence_mode": "Enabled",
            "pci.bus_id": "00000000:00:06.0",
        }
    ]
    noheader = "\n".join(H200.splitlines()[3:])
    assert gpu_settings.parse(noheader) == gpus


def test_parse_refuses_another_shape():
    with pytest.raises(gpu_settings.Unparsed):
        gpu_settings.parse("0, NVIDIA H200, 143771, 580.159.04")


@pytest.mark.parametrize(
    "min_driver,model,expected",
    [
        ("550.54.15", "H200", []),
        ("580.159.04", "h200", []),
        ("580.159.5", None, ["NVIDIA driver 580.159.04, 580.159.5 or newer needed"]),
        ("590", None, ["NVIDIA driver 580.159.04, 590 or newer needed"]),
        (None, "H100", ["GPU model NVIDIA H200, H100 wanted"]),
    ],
)
def test_driver_and_model(min_driver, model, expected):
    assert gpu_settings.problems(gpu_settings.parse(H200), min_driver=min_driver, model=model) == expected


def test_count_and_persistence():
    gpus = gpu_settings.parse(H200)
    assert gpu_settings.problems(gpus, needed=8) == ["8 GPUs needed, nvidia-smi lists 1"]
    off = [dict(gpus[0], persistence_mode="Disabled")]
    assert gpu_settings.persistence_off(gpus) == [] and gpu_settings.persistence_off(off) == ["0"]


def test_preflight_check_without_a_driver_is_skipped():
    verdict, text = preflight.check_gpu_settings("550", "H200", nvidia_smi="no-such-nvidia-smi")
    assert verdict == "skipped" and text.startswith("no GPU:")
    assert preflight.check_gpu_settings(None, None) is None


def test_preflight_check_reads_the_real_query(tmp_path):
    fake = tmp_path / "nvidia-smi"
    fake.write_text(f"#!/bin/sh\ncat <<'EOF'\n{H200}EOF\n")
    fake.chmod(0o755)
    assert preflight.check_gpu_settings("550.54.15", "H200", str(fake))[0] == "ok"
    verdict, text = preflight.check_gpu_settings("600", None, str(fake))
    assert verdict == "failed" and "600 or newer needed" in text


def test_persistence_fact():
    fact = GpuPersistence()
    assert fact.process(["no-nvidia-driver"]) is None
    found = fact.process(
        ["LoadState=not-found", "UnitFileState=", "ActiveState=inactive", *H200.splitlines()[2:]]
    )
    assert found["unit"]["LoadState"] == "not-found"
    assert found["gpus"][0]["persistence_mode"] == "Enabled"


def test_acs_unit_runs_the_script_before_the_server_at_boot():
    text = acs_unit_text("/opt/sglang-deploy/node", "sglang.service")
    assert "ExecStart=/usr/bin/python3 /opt/sglang-deploy/node/acs.py disable" in text
    assert "Before=sglang.service" in text and "Type=oneshot" in text
    assert "WantedBy=multi-user.target" in text and "RemainAfterExit=yes" in text


def test_profile_gpu_settings_reach_preflight_command_line():
    from sglang_deploy.plan.host_plan import plan_for
    from sglang_deploy.plan.hosts import deploy_defaults

    data = {
        **deploy_defaults(),
        "profile": "baseline",
        "profile_overrides": {"gpu": {"min_driver": "550.54.15", "model": "H200"}},
    }
    command = plan_for(data, operator_env={}).scripts.preflight()
    assert "--min-driver 550.54.15 --gpu-model H200" in command
    plain = plan_for({**deploy_defaults(), "profile": "baseline"}, operator_env={})
    assert "--min-driver" not in plain.scripts.preflight()
    assert plain.settings.os_packages == ["python3", "python3-venv", "pciutils", "rsync", "iproute2"]
    # Host data without the key gets group_data/all.py's default; an empty list is kept.
    data = {key: value for key, value in deploy_defaults().items() if key != "os_packages"}
    assert (
        plan_for({**data, "profile": "baseline"}, operator_env={}).settings.os_packages
        == plain.settings.os_packages
    )
    assert (
        plan_for({**data, "profile": "baseline", "os_packages": []}, operator_env={}).settings.os_packages
        == []
    )


def test_profile_refuses_a_driver_that_is_no_version():
    from sglang_deploy.errors import ProfileError
    from sglang_deploy.profile.schema import load_profile

    with pytest.raises(ProfileError, match="gpu.min_driver"):
        load_profile("sandbox", overrides={"gpu": {"min_driver": "latest"}})
    profile = load_profile("sandbox")
    assert (profile.gpu.min_driver, profile.gpu.persistence_mode, profile.pcie.disable_acs) == (
        None,
        True,
        False,
    )
