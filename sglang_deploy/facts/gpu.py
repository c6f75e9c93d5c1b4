"""GPU node settings of the profile (`gpu:`, `pcie:`) on the controller's side: the facts the
deploy reads and the boot-time ACS unit it installs. The node-side parsing is
node/lib/gpu_settings.py (nvidia-smi) and node/acs.py (lspci, setpci)."""

from __future__ import annotations

import re
import shlex

import jinja2
from pyinfra.api import FactBase

from sglang_deploy.facts.serving import unit_show_command
from sglang_deploy.node.lib import gpu_settings, systemd
from sglang_deploy.plan.commands import acs_command
from sglang_deploy.plan.render import systemd_exec_quote, templates_dir

ACS_UNIT = "sglang-disable-acs.service"
PERSISTENCED_UNIT = "nvidia-persistenced.service"
_NO_DRIVER = "no-nvidia-driver"
_PERSISTENCED_PROPS = ("LoadState", "UnitFileState", "ActiveState", "ExecStart")
NO_PERSISTENCE = "--no-persistence-mode"
PERSISTENCED_DROPIN = f"{PERSISTENCED_UNIT}.d/sglang-deploy.conf"  # under unit_dir


def acs_unit_text(scripts_dir: str, *service_units: str) -> str:
    """The oneshot unit that runs node/acs.py at every boot, before the servers' units (every
    service of the node: it has one ACS unit)."""
    template = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    return template.get_template(f"{ACS_UNIT}.j2").render(
        command=acs_command(scripts_dir), before=" ".join(sorted(service_units))
    )


def acs_unit_services(text: str) -> list:
    """The service units an installed ACS unit's text orders itself before."""
    before = next((line for line in text.splitlines() if line.startswith("Before=")), "Before=")
    return [unit for unit in before.partition("=")[2].split() if unit != "multi-user.target"]


class GpuPersistence(FactBase):
    """
    ``None`` without an NVIDIA driver (no nvidia-smi); else ``{"unit": {"LoadState",
    "UnitFileState", "ActiveState", "ExecStart"} of nvidia-persistenced.service, "gpus":
    [nvidia-smi's query rows, node/lib/gpu_settings.py]}``. ``persistence_problems`` judges it.
    """

    def command(self):
        query = " ".join(shlex.quote(arg) for arg in gpu_settings.QUERY)
        return (
            f"command -v nvidia-smi >/dev/null || {{ echo {_NO_DRIVER}; exit 0; }}; "
            f"{unit_show_command(PERSISTENCED_UNIT, _PERSISTENCED_PROPS)}; "
            f"nvidia-smi {query}"
        )

    def process(self, output):
        if list(output) == [_NO_DRIVER]:
            return None
        # systemctl's NAME=value lines, then nvidia-smi's CSV rows.
        shown = [line for line in output if line.partition("=")[0] in _PERSISTENCED_PROPS]
        unit = systemd.parse_show("\n".join(shown))
        rows = "\n".join(line for line in output if line not in shown)
        return {"unit": unit, "gpus": gpu_settings.parse(rows)}


def persistenced_argv(unit) -> list:
    """The command line nvidia-persistenced's unit runs (the ExecStart property's ``argv[]=``)."""
    found = re.search(r"argv\[\]=(.*?) ;", unit.get("ExecStart") or "")
    return found.group(1).split() if found else []


def persistence_problems(found) -> list:
    """What keeps persistence mode from being on, and staying on, for every GPU: the one reading
    of it, for the deploy's step and for `make verify` alike ([] when it is on). Where the
    driver ships nvidia-persistenced, the daemon decides (at every boot), so its unit must be
    enabled, running, and without Ubuntu's `--no-persistence-mode`."""
    problems = []
    off = gpu_settings.persistence_off(found["gpus"])
    if off:
        problems.append(f"persistence mode off on GPU {', '.join(off)}")
    unit = found["unit"]
    if unit.get("LoadState") == "loaded":
        if unit.get("UnitFileState") not in ("enabled", "static"):
            problems.append(f"{PERSISTENCED_UNIT} is {unit.get('UnitFileState')}, not enabled")
        if unit.get("ActiveState") != "active":
            problems.append(f"{PERSISTENCED_UNIT} is {unit.get('ActiveState')}, not running")
        if NO_PERSISTENCE in persistenced_argv(unit):
            problems.append(f"{PERSISTENCED_UNIT} runs with {NO_PERSISTENCE} (Ubuntu's packaging)")
    return problems


def persistenced_dropin(unit) -> str:
    """The drop-in that runs the packaged daemon's own command line without
    ``--no-persistence-mode`` (Ubuntu's unit passes it: the daemon then leaves persistence off)."""
    argv = [arg for arg in persistenced_argv(unit) if arg != NO_PERSISTENCE]
    return (
        "# Written by sglang-deploy (gpu.persistence_mode): the packaged unit runs the daemon with\n"
        f"# {NO_PERSISTENCE}; the same command line without it keeps every GPU in persistence mode.\n"
        "[Service]\nExecStart=\n"
        f"ExecStart={' '.join(systemd_exec_quote(arg) for arg in argv)}\n"
    )
