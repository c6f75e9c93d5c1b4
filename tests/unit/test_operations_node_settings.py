"""OS prerequisites and GPU node settings, case by case: what each operation yields for a given
node state (facts faked), and host.noop when there is nothing to do (so a re-run calls no apt)."""

import pytest
from pyinfra.api import FunctionCommand
from pyinfra.context import ctx_host
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.files import File

from sglang_deploy.facts.gpu import GpuPersistence
from sglang_deploy.facts.os_release import OsRelease
from sglang_deploy.facts.serving import UnitState
from sglang_deploy.operations.gpu_node import persistence_mode, unit_absent, unit_active
from sglang_deploy.operations.prerequisites import os_prerequisites

DEBIAN = {"ID": "debian", "PRETTY_NAME": "Debian GNU/Linux 12 (bookworm)"}
PACKAGES = ["python3", "python3-venv", "pciutils", "rsync", "iproute2"]
H200_ON = [
    {
        "index": "0",
        "name": "NVIDIA H200",
        "driver_version": "580.159.04",
        "persistence_mode": "Enabled",
        "pci.bus_id": "00000000:00:06.0",
    }
]


class FakeHost:
    """Answers facts from a table keyed by fact class; records noops and logs."""

    name = "node1"

    def __init__(self, facts):
        self.facts, self.noops, self.logs = facts, [], []

    def get_fact(self, fact, **kwargs):
        return self.facts.get(fact)

    def noop(self, text):
        self.noops.append(text)

    def log(self, text, *args, **kwargs):
        self.logs.append(text)


@pytest.fixture
def run():
    def run(op, facts, *args, **kwargs):
        fake = FakeHost(facts)
        with ctx_host.use(fake):
            commands = list(op._inner(*args, **kwargs))
        return [c if isinstance(c, FunctionCommand) else str(c) for c in commands], fake

    return run


def test_unsupported_os_fails_before_reading_packages(run):
    commands, fake = run(
        os_prerequisites,
        {OsRelease: {"ID": "fedora", "PRETTY_NAME": "Fedora Linux 40"}, DebPackages: None},
        PACKAGES,
    )
    assert len(commands) == 1 and isinstance(commands[0], FunctionCommand)
    assert commands[0].args[0].startswith("unsupported OS: Fedora Linux 40")
    assert fake.noops == []


def test_everything_installed_makes_no_apt_call(run):
    installed = {name: ["1"] for name in PACKAGES}
    commands, fake = run(os_prerequisites, {OsRelease: DEBIAN, DebPackages: installed}, PACKAGES)
    assert commands == [] and fake.noops == [f"installed: {', '.join(PACKAGES)}"]


def test_a_missing_package_refreshes_the_index_then_installs_only_what_is_missing(run):
    installed = {"python3": ["3.11.2"], "rsync": ["3.2.7"]}
    commands, _ = run(os_prerequisites, {OsRelease: DEBIAN, DebPackages: installed}, PACKAGES)
    assert commands[0] == "apt-get update"
    assert len(commands) == 2 and "install --no-install-recommends" in commands[1]
    assert commands[1].endswith("python3-venv pciutils iproute2")
    assert " rsync" not in commands[1] and "python3 " not in commands[1].split("install")[1]


def test_persistence_without_a_driver_is_skipped(run):
    commands, fake = run(persistence_mode, {GpuPersistence: None})
    assert commands == [] and "no NVIDIA driver" in fake.noops[0]


def test_persistence_enables_and_starts_the_driver_daemon(run):
    unit = {"LoadState": "loaded", "UnitFileState": "disabled", "ActiveState": "inactive"}
    commands, _ = run(persistence_mode, {GpuPersistence: {"unit": unit, "gpus": H200_ON}})
    assert commands == [
        "systemctl enable nvidia-persistenced.service",
        "systemctl start nvidia-persistenced.service",
    ]
    unit = {"LoadState": "loaded", "UnitFileState": "enabled", "ActiveState": "active"}
    commands, fake = run(persistence_mode, {GpuPersistence: {"unit": unit, "gpus": H200_ON}})
    assert commands == [] and fake.noops


def test_persistence_without_the_daemon_uses_nvidia_smi(run):
    off = [dict(H200_ON[0], persistence_mode="Disabled")]
    commands, fake = run(
        persistence_mode, {GpuPersistence: {"unit": {"LoadState": "not-found"}, "gpus": off}}
    )
    assert commands == ["nvidia-smi -pm 1"] and any("reboot" in line for line in fake.logs)
    commands, fake = run(
        persistence_mode, {GpuPersistence: {"unit": {"LoadState": "not-found"}, "gpus": H200_ON}}
    )
    assert commands == [] and fake.noops == ["persistence mode: on for every GPU"]


def test_acs_unit_enabled_and_run_once(run):
    commands, _ = run(
        unit_active, {UnitState: {"UnitFileState": "disabled", "ActiveState": "inactive"}}, "x.service"
    )
    assert commands == ["systemctl enable x.service", "systemctl start x.service"]
    commands, fake = run(
        unit_active, {UnitState: {"UnitFileState": "enabled", "ActiveState": "active"}}, "x.service"
    )
    assert commands == [] and fake.noops == ["x.service enabled and active"]


def test_acs_unit_removed_when_turned_off(run):
    commands, _ = run(unit_absent, {File: {"mode": 644}}, "x.service")
    assert commands == [
        "systemctl disable --now x.service",
        "rm -f /etc/systemd/system/x.service",
        "systemctl daemon-reload",
    ]
    commands, fake = run(unit_absent, {File: None}, "x.service")
    assert commands == [] and fake.noops == ["x.service not installed"]
