"""GPU node settings: persistence mode, and (opt-in) ACS cleared on PCI bridges at every boot."""

import shlex

from pyinfra import host, logger
from pyinfra.api import operation
from pyinfra.facts.files import File

from sglang_deploy.facts.gpu import PERSISTENCED_UNIT, GpuPersistence
from sglang_deploy.facts.serving import UnitState
from sglang_deploy.node.lib import gpu_settings
from sglang_deploy.plan.settings import default


@operation()
def persistence_mode(enabled=True):
    """
    Keep the NVIDIA driver initialised between processes: nvidia-persistenced's unit enabled
    and running where the driver ships it, else ``nvidia-smi -pm 1`` (which a reboot undoes:
    said as a warning). No driver on the node: skipped, saying so.

    + enabled: the profile's ``gpu.persistence_mode``
    """
    found = host.get_fact(GpuPersistence)
    if found is None:
        host.noop("persistence mode: no NVIDIA driver (nvidia-smi not found): skipped")
        return
    if not enabled:
        host.noop("persistence mode: not asked for (gpu.persistence_mode: false)")
        return
    unit = found["unit"]
    if unit.get("LoadState") == "loaded":
        if unit.get("UnitFileState") not in ("enabled", "static"):
            yield f"systemctl enable {PERSISTENCED_UNIT}"
        if unit.get("ActiveState") != "active":
            yield f"systemctl start {PERSISTENCED_UNIT}"
        elif unit.get("UnitFileState") in ("enabled", "static"):
            host.noop(f"persistence mode: {PERSISTENCED_UNIT} enabled and running")
        return
    off = gpu_settings.persistence_off(found["gpus"])
    if not off:
        host.noop("persistence mode: on for every GPU")
        return
    host.log(
        f"no {PERSISTENCED_UNIT} on this node: `nvidia-smi -pm 1` lasts until the next reboot", logger.warning
    )
    yield "nvidia-smi -pm 1"


@operation()
def unit_active(unit):
    """
    A oneshot unit enabled at boot and run once now (active); re-running it when its file
    changed is the deploy's `_if=` on the unit file's operation.

    + unit: the unit's name
    """
    state = host.get_fact(UnitState, unit=unit)
    if state.get("UnitFileState") != "enabled":
        yield f"systemctl enable {shlex.quote(unit)}"
    if state.get("ActiveState") != "active":
        yield f"systemctl start {shlex.quote(unit)}"
    if state.get("UnitFileState") == "enabled" and state.get("ActiveState") == "active":
        host.noop(f"{unit} enabled and active")


@operation()
def unit_absent(unit, unit_dir=default("unit_dir")):
    """
    No such unit installed by us: disabled, stopped, its file removed (a setting turned off).

    + unit: the unit's name
    + unit_dir: where units are installed
    """
    path = f"{unit_dir}/{unit}"
    if host.get_fact(File, path=path) is None:
        host.noop(f"{unit} not installed")
        return
    yield f"systemctl disable --now {shlex.quote(unit)}"
    yield f"rm -f {shlex.quote(path)}"
    yield "systemctl daemon-reload"
