"""GPU node settings of the profile (`gpu:`, `pcie:`) on the controller's side: the facts the
deploy reads and the boot-time ACS unit it installs. The node-side parsing is
node/lib/gpu_settings.py (nvidia-smi) and node/acs.py (lspci, setpci)."""

from __future__ import annotations

import shlex

import jinja2
from pyinfra.api import FactBase

from sglang_deploy.facts.serving import unit_show_command
from sglang_deploy.node.lib import gpu_settings, systemd
from sglang_deploy.plan.render import templates_dir
from sglang_deploy.plan.script_commands import acs_command

ACS_UNIT = "sglang-disable-acs.service"
PERSISTENCED_UNIT = "nvidia-persistenced.service"
_NO_DRIVER = "no-nvidia-driver"
_PERSISTENCED_PROPS = ("LoadState", "UnitFileState", "ActiveState")


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
    "UnitFileState", "ActiveState"} of nvidia-persistenced.service, "gpus": [nvidia-smi's
    query rows, node/lib/gpu_settings.py]}``.
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
        # systemctl's NAME=value lines, then nvidia-smi's CSV rows (which hold no "=").
        unit = systemd.parse_show("\n".join(line for line in output if "=" in line and "," not in line))
        rows = "\n".join(line for line in output if "=" not in line)
        return {"unit": unit, "gpus": gpu_settings.parse(rows)}
