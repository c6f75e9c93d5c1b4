"""GPU node settings: persistence mode, and (opt-in) ACS cleared on PCI bridges at every boot."""

from __future__ import annotations

import shlex
from io import StringIO

from pyinfra import host, logger
from pyinfra.api import operation
from pyinfra.api.command import FileUploadCommand
from pyinfra.facts.files import File

from sglang_deploy.facts.gpu import (
    NO_PERSISTENCE,
    PERSISTENCED_DROPIN,
    PERSISTENCED_UNIT,
    GpuPersistence,
    persistence_problems,
    persistenced_argv,
    persistenced_dropin,
)
from sglang_deploy.facts.serving import UnitState
from sglang_deploy.plan.commands import persistence_check_command
from sglang_deploy.plan.settings import default


@operation()
def persistence_mode(
    enabled: bool = True, scripts_dir: str | None = None, unit_dir: str = default("unit_dir")
):
    """
    Keep the NVIDIA driver initialised between processes, on every GPU, at every boot.

    nvidia-persistenced's unit enabled and running where the driver ships it (with Ubuntu's
    packaging, whose unit passes ``--no-persistence-mode``, a drop-in runs the same command line
    without it), else ``nvidia-smi -pm 1`` (which a reboot undoes: said as a warning). Judged as
    `make verify` judges it (facts/gpu.py persistence_problems); what it changed is confirmed on the
    node before the step ends. No driver on the node: skipped, saying so.

    + enabled: the profile's ``gpu.persistence_mode``
    + scripts_dir: where our on-node scripts are (node/lib/gpu_settings.py confirms)
    + unit_dir: where units and their drop-ins are installed

    **Examples:**

    .. code:: python

        gpu_node.persistence_mode(
            name="GPU persistence mode",
            enabled=plan.profile.gpu.persistence_mode,
            scripts_dir=plan.scripts.directory,
        )
    """
    found = host.get_fact(GpuPersistence)
    if found is None:
        host.noop("persistence mode: no NVIDIA driver (nvidia-smi not found): skipped")
        return
    if not enabled:
        host.noop("persistence mode: not asked for (gpu.persistence_mode: false)")
        return
    problems = persistence_problems(found)
    unit = found["unit"]
    loaded = unit.get("LoadState") == "loaded"
    if not problems:
        host.noop(
            f"persistence mode: on for every GPU ({PERSISTENCED_UNIT} enabled and running)"
            if loaded
            else "persistence mode: on for every GPU"
        )
        return
    host.log(f"persistence mode: {'; '.join(problems)}")
    if not loaded:
        host.log(
            f"no {PERSISTENCED_UNIT} on this node: `nvidia-smi -pm 1` lasts until the next reboot",
            logger.warning,
        )
        yield "nvidia-smi -pm 1"
    else:
        if unit.get("UnitFileState") not in ("enabled", "static"):
            yield f"systemctl enable {PERSISTENCED_UNIT}"
        if NO_PERSISTENCE in persistenced_argv(unit):
            dropin = f"{unit_dir}/{PERSISTENCED_DROPIN}"
            yield f"mkdir -p {shlex.quote(dropin.rsplit('/', 1)[0])}"
            yield FileUploadCommand(StringIO(persistenced_dropin(unit)), dropin)
            yield "systemctl daemon-reload"
            yield f"systemctl restart {PERSISTENCED_UNIT}"
        elif unit.get("ActiveState") != "active":
            yield f"systemctl start {PERSISTENCED_UNIT}"
        else:  # the daemon runs as it should, and some GPU is off all the same: ask it
            yield "nvidia-smi -pm 1"
    if scripts_dir:
        yield persistence_check_command(scripts_dir)


@operation()
def unit_active(unit: str):
    """
    A oneshot unit enabled at boot and run once now.

    Active after it; re-running it when its file changed is the deploy's `_if=` on the unit file's
    operation.

    + unit: the unit's name

    **Examples:**

    .. code:: python

        gpu_node.unit_active(
            name="ACS cleared at every boot",
            unit=ACS_UNIT,
        )
    """
    state = host.get_fact(UnitState, unit=unit)
    if state.get("UnitFileState") != "enabled":
        yield f"systemctl enable {shlex.quote(unit)}"
    if state.get("ActiveState") != "active":
        yield f"systemctl start {shlex.quote(unit)}"
    if state.get("UnitFileState") == "enabled" and state.get("ActiveState") == "active":
        host.noop(f"{unit} enabled and active")


@operation()
def unit_absent(unit: str, unit_dir: str = default("unit_dir")):
    """
    No such unit installed by us: disabled, stopped, its file removed (a setting turned off).

    + unit: the unit's name
    + unit_dir: where units are installed

    **Examples:**

    .. code:: python

        gpu_node.unit_absent(
            name="No ACS unit",
            unit=ACS_UNIT,
        )
    """
    path = f"{unit_dir}/{unit}"
    if host.get_fact(File, path=path) is None:
        host.noop(f"{unit} not installed")
        return
    yield f"systemctl disable --now {shlex.quote(unit)}"
    yield f"rm -f {shlex.quote(path)}"
    yield "systemctl daemon-reload"
