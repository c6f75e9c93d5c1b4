"""`make verify`'s checks of the GPU node: GPUs, links, ACS and IOMMU, judged (verify/gpu_health.py)
from the node's hardware passport collected once for them, and the node's own settings: OS
packages, persistence mode, the boot-time ACS unit."""

from __future__ import annotations

import shlex

from sglang_deploy.facts.gpu import (
    ACS_UNIT,
    GpuPersistence,
    acs_unit_services,
    acs_unit_text,
    persistence_problems,
)
from sglang_deploy.facts.serving import UnitState
from sglang_deploy.node import preflight
from sglang_deploy.node.lib import gpu_settings, result
from sglang_deploy.verify.gpu_health import (
    acs_check,
    gpus_check,
    iommu_check,
    is_pcie_tuned,
    topology_check,
)
from sglang_deploy.verify.passport_checks import collect
from sglang_deploy.verify.registry import read_fact, verify_check
from sglang_deploy.verify.verdict import FAILED, OK, Check

HARDWARE = ("gpus", "gpu topology", "pcie acs", "iommu")


@verify_check("gpus", warning_fails=False)
def gpus(node, plan) -> list[Check]:
    """GPU count and model, link types, ACS on PCIe bridges, IOMMU, from one collection of the
    node's hardware passport: what it could not read (a tool missing on the node) makes a check
    "not checked", never "ok"."""
    passport, why = collect(node, plan.scripts.directory)
    if passport is None:
        return [Check.not_checked(name, "passport.py", why) for name in HARDWARE]
    found = gpus_check(passport)
    if found.ok:  # the profile's layout on these GPUs: preflight's own judgement
        verdict, layout = preflight.check_gpu_layout(
            plan.scripts.profile.argv(),
            plan.scripts.profile.env.get("CUDA_VISIBLE_DEVICES"),
            preflight.parse_gpu_list(node.run("nvidia-smi -L").stdout),
        )
        if verdict == "failed":
            found = Check(found.name, FAILED, f"{found.detail}; {layout}")
    pcie_tuned = is_pcie_tuned(plan.profile.hook_vars())
    return [found, topology_check(passport, pcie_tuned), acs_check(passport), iommu_check(passport)]


_NODE_SETTINGS = ("os packages", "persistence mode", "acs unit")


def _node_settings_cell(by_name):
    """The table's "node settings": failed if any of its checks failed, else ok."""
    states = [by_name[name]["state"] for name in _NODE_SETTINGS if name in by_name]
    return FAILED if FAILED in states else OK if states else "-"


@verify_check("os packages", column="node settings", cell=_node_settings_cell)
def node_settings(node, plan) -> list[Check]:
    """What the node itself needs: the OS packages, GPU persistence mode (with the driver and
    model the profile asks for) and, opt-in, the boot-time ACS unit."""
    return [os_packages(node, plan), persistence(node, plan), acs_unit(node, plan)]


def os_packages(node, plan) -> Check:
    """Every package the recipe needs (group_data/all.py os_packages) is installed."""
    if not plan.settings.os_packages:
        return Check.nothing_to_check("os packages", "none asked for (os_packages is empty)")
    names = " ".join(shlex.quote(name) for name in plan.settings.os_packages)
    found = node.run(f"dpkg-query -W -f '${{Package}} ${{db:Status-Status}}\\n' {names}")
    installed = {line.split()[0] for line in found.stdout.splitlines() if line.split()[1:] == ["installed"]}
    missing = [name for name in plan.settings.os_packages if name not in installed]
    if missing:
        return Check("os packages", FAILED, f"not installed: {', '.join(missing)}")
    return Check("os packages", OK, f"{len(plan.settings.os_packages)} installed")


def persistence(node, plan) -> Check:
    """Persistence mode on for every GPU, and nvidia-persistenced's unit enabled, running and
    without --no-persistence-mode where the driver ships it (gpu.persistence_mode; the deploy's
    step reads it the same way: facts/gpu.py persistence_problems); the driver version and
    model the profile asks for."""
    found = read_fact(node, GpuPersistence)
    if found is None:
        return Check.nothing_to_check("persistence mode", "no GPU: nvidia-smi not found")
    gpu = plan.profile.gpu
    problems = gpu_settings.problems(found["gpus"], min_driver=gpu.min_driver, model=gpu.model)
    if gpu.persistence_mode:  # as the deploy's step judges it
        problems += persistence_problems(found)
    if problems:
        return Check("persistence mode", FAILED, "; ".join(problems))
    return Check(
        "persistence mode",
        OK,
        gpu_settings.summary(found["gpus"]) + (", persistence mode on" if gpu.persistence_mode else ""),
    )


def acs_unit(node, plan) -> Check:
    """With pcie.disable_acs: the boot-time unit as rendered, enabled, and its run succeeded
    (its last line: what it cleared, or that the node has no PCI bridge)."""
    path = f"{plan.settings.unit_dir}/{ACS_UNIT}"
    if not plan.profile.pcie.disable_acs:
        if node.file(path).exists:
            return Check("acs unit", FAILED, f"{path} is installed, pcie.disable_acs is false")
        return Check.nothing_to_check("acs unit", "not asked for (pcie.disable_acs: false)")
    installed = node.file(path)
    if not installed.exists:
        return Check("acs unit", FAILED, f"{path} is missing")
    problems = []
    # Ordered before every service of the node (plan/shared_nodes.py), this one's among them.
    services = acs_unit_services(installed.content_string)
    rendered = acs_unit_text(plan.scripts.directory, *services)
    if plan.unit not in services or installed.content_string != rendered:
        problems.append(f"{path} differs from its rendering")
    state = read_fact(node, UnitState, unit=ACS_UNIT, properties=("UnitFileState", "ActiveState", "Result"))
    if state.get("UnitFileState") != "enabled":
        problems.append(f"{ACS_UNIT} is {state.get('UnitFileState')}, not enabled")
    if (state.get("ActiveState"), state.get("Result")) != ("active", "success"):
        problems.append(f"{ACS_UNIT} is {state.get('ActiveState')} ({state.get('Result')})")
    journal = node.run(f"journalctl --no-pager -o cat -u {ACS_UNIT}").stdout.splitlines()
    said = [line for line in result.progress(journal) if line.strip()]  # acs.py's lines, not its result
    last = said[-1] if said else "no output in the journal"
    if problems:
        return Check("acs unit", FAILED, f"{'; '.join(problems)}; last: {last}")
    return Check("acs unit", OK, f"enabled, ran at boot or deploy: {last}")
