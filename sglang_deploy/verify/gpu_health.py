"""GPU and PCIe health of a serving node, judged from its hardware passport (node/passport.py,
the one reading of the node's hardware: node/lib/gpu_topology.py and node/acs.py read their
parts of it on the node). Each verdict is a Check (sglang_deploy.verify.verdict) whose state is
"ok", "warning", "failed" or "not checked (<tool> missing)":

    gpus_check      the GPUs nvidia-smi lists, and the driver
    topology_check  the links between them, against the profile's NCCL tuning
    acs_check       ACS on the PCI bridges
    iommu_check     the IOMMU (/sys/class/iommu, the kernel command line) -> iommu_state
A part the passport could not read ({"not_checked": why}) is never "ok": a missing tool makes
its check "not checked (<tool> missing)", anything else says why.

Also the nvidia-smi CSV parsers bench/gpu_env_proof.py reads GPUs and their processes with
(parse_gpus, parse_compute_apps).
"""

import csv
import re
from collections.abc import Mapping
from dataclasses import dataclass

from sglang_deploy.node import acs
from sglang_deploy.node.lib import compute_apps, gpu_topology
from sglang_deploy.node.lib.nvidia_smi_q import is_checked
from sglang_deploy.profile.nccl_vars import PCIE_TUNING, tunes_for_pcie
from sglang_deploy.verify.verdict import FAILED, OK, WARNING, Check


class ParseError(ValueError):
    """Command output in a shape the parser does not know."""


# ---------------------------------------------------------------------------------- nvidia-smi CSV

_NA = {"[n/a]", "n/a", "[not supported]", "[unknown error]", "[insufficient permissions]"}
_NO_DEVICES = ("no devices were found", "no running processes found", "no running compute processes found")


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    memory_mib: int | None  # None when nvidia-smi says [N/A]
    driver: str


@dataclass(frozen=True)
class ComputeApp:
    pid: int
    used_memory_mib: int | None  # None when nvidia-smi says [N/A] (e.g. no permission to see it)


def _rows(text: str, width: int, what: str) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.lower().rstrip(".") in _NO_DEVICES:
            return []
        cells = next(csv.reader([stripped], skipinitialspace=True))
        if len(cells) != width:
            raise ParseError("%s: expected %d fields, got %d in %r" % (what, width, len(cells), line))
        rows.append([c.strip() for c in cells])
    return rows


def _mib(value: str, what: str, line: list[str]) -> int | None:
    """'143771', '2566 MiB' -> int; '[N/A]' -> None."""
    if value.lower() in _NA:
        return None
    number = re.sub(r"\s*MiB$", "", value, flags=re.IGNORECASE)
    if not number.isdigit():
        raise ParseError("%s: not a MiB figure %r in %r" % (what, value, ", ".join(line)))
    return int(number)


def parse_gpus(text: str) -> list[Gpu]:
    """Lines 'index, name, memory.total, driver_version' (noheader, nounits or MiB units)."""
    gpus = []
    for cells in _rows(text, 4, "query-gpu"):
        if not cells[0].isdigit():
            raise ParseError("query-gpu: not a GPU index %r" % cells[0])
        gpus.append(Gpu(int(cells[0]), cells[1], _mib(cells[2], "query-gpu", cells), cells[3]))
    return gpus


def parse_compute_apps(text: str) -> list[ComputeApp]:
    """Lines 'pid, used_memory'; empty output or 'No running processes found' -> []."""
    try:
        return [ComputeApp(*app) for app in compute_apps.parse_compute_apps(text, strict=True)]
    except compute_apps.Unparsed as exc:
        raise ParseError("query-compute-apps: %s" % exc) from None


# ---------------------------------------------------------------------------------- the passport

_MISSING = re.compile(r"^(\S+) not found\b")


def _unread(name, part, otherwise=FAILED):
    """The Check of a passport part that could not be read ({"not_checked": why}): "not checked
    (<tool> missing)" where a tool is not installed, else ``otherwise`` saying why."""
    why = part["not_checked"]
    missing = _MISSING.match(why)
    if missing:
        return Check.not_checked(name, missing.group(1))
    return Check(name, otherwise, why)


def _part(passport, key, name):
    """The passport's ``key``, or "not checked" saying that the node's passport.py has none."""
    if key in passport:
        return passport[key]
    return {"not_checked": f"the node's passport.py collects no {name}: deploy"}


# ---------------------------------------------------------------------------------- topology


def is_pcie_tuned(env: Mapping[str, str]) -> bool:
    """Whether a profile's environment carries PCIe-only NCCL tuning (the set from the incident:
    NCCL_P2P_LEVEL past NVLink, or a forced NCCL_PROTO / NCCL_ALGO / NCCL_MAX_NCHANNELS: the
    `pcie_tuning` column of nccl_vars)."""
    return any(tunes_for_pcie(name, env.get(name, "")) for name in PCIE_TUNING)


def topology_warnings(kind: str, pcie_tuned: bool = True) -> list[str]:
    """What is wrong with running a profile tuned (or not) for PCIe on this kind of topology."""
    if kind == "nvlink" and pcie_tuned:
        return [
            "GPUs are connected by NVLink, but the profile is tuned for PCIe-only GPUs (NCCL_PROTO/"
            "NCCL_ALGO/NCCL_P2P_LEVEL...): the forced settings may be slower than NCCL's own choice here"
        ]
    if kind == "pcie" and not pcie_tuned:
        return [
            "GPUs are PCIe-only (no NVLink), but the profile carries no PCIe tuning: every tensor-parallel "
            "all-reduce goes through NCCL over PCIe; use a profile tuned and measured for PCIe"
        ]
    if kind == "mixed":
        return [
            "some GPU pairs are NVLink-connected and others only PCIe: tensor-parallel ranks should be "
            "placed on one kind, and a PCIe tuning measured on this box before it is trusted"
        ]
    return []


def topology_check(passport, pcie_tuned_profile: bool = True) -> Check:
    found = _part(passport, "topology", "topology")
    if not is_checked(found):
        return _unread("gpu topology", found)
    kind = gpu_topology.link_kind(gpu_topology.matrix(found["links"]))
    warnings = topology_warnings(kind, pcie_tuned_profile)
    if warnings:
        return Check("gpu topology", WARNING, "%s: %s" % (kind, "; ".join(warnings)))
    return Check("gpu topology", OK, kind)


# ---------------------------------------------------------------------------------- ACS


def _acs_flags(control):
    """'SrcValid+ TransBlk- ...' (lspci's ACSCtl line) of a control register, else its value."""
    try:
        return " ".join(name + ("+" if on else "-") for name, on in acs.flags(control).items())
    except ValueError:
        return control


def acs_check(passport) -> Check:
    """ACS on the PCI bridges: a bridge whose ACS control register is set redirects GPU
    peer-to-peer traffic up to the root complex (and the IOMMU): a known cause of NCCL hangs and
    slow P2P on PCIe boxes (NVIDIA/nccl#631, #2079). A register that could not be read (not
    root) is a warning: not ok."""
    found = _part(passport, "acs", "ACS controls")
    if not is_checked(found):
        return _unread("pcie acs", found, WARNING)
    controls = [bridge for bridge in found.get("bridges") or [] if bridge.get("control") is not None]
    enabled = [bridge for bridge in controls if not acs.is_clear(bridge["control"])]
    if enabled:
        where = ", ".join("%s (ACSCtl %s)" % (b["bdf"], _acs_flags(b["control"])) for b in enabled)
        return Check(
            "pcie acs",
            WARNING,
            "ACS enabled on %d device%s: %s; GPU peer-to-peer traffic is redirected through the root "
            "complex (NCCL hangs or slow P2P): disable ACS in the BIOS or with setpci"
            % (len(enabled), "" if len(enabled) == 1 else "s", where),
        )
    return Check(
        "pcie acs",
        OK,
        "ACS disabled on %d device%s" % (len(controls), "" if len(controls) == 1 else "s")
        if controls
        else "no device exposes ACS controls",
    )


# ---------------------------------------------------------------------------------- IOMMU

_DMESG_ON = re.compile(
    r"DMAR: IOMMU enabled|AMD-Vi: (Found IOMMU|Interrupt remapping enabled)|"
    r"AMD-Vi: IOMMU performance counters supported|Adding to iommu group",
    re.IGNORECASE,
)
_DMESG_OFF = re.compile(
    r"DMAR: IOMMU disabled|AMD-Vi: AMD IOMMUv2 functionality not available|"
    r"IOMMU not enabled",
    re.IGNORECASE,
)
_SYSFS_NAME = re.compile(r"^[A-Za-z0-9_.:-]+$")


def cmdline_iommu(cmdline: str) -> dict[str, str]:
    """The IOMMU-related parameters of a kernel command line: {'intel_iommu': 'on', 'iommu': 'pt', ...}."""
    params = {}
    for token in cmdline.split():
        if token == "--":
            break  # what follows is for init, not the kernel
        key, _, value = token.partition("=")
        if key in ("intel_iommu", "amd_iommu", "iommu", "iommu.passthrough", "iommu.strict"):
            params[key] = value
    return params


def iommu_state(cmdline: str, dmesg_or_sysfs: str | None) -> str:
    """'on', 'off' or 'unknown'.

    cmdline: /proc/cmdline. dmesg_or_sysfs: `ls /sys/class/iommu` (one name per line: dmar0, ivhd0,
    ...; empty when no IOMMU registered), or dmesg lines; None when neither could be read.
    /sys/class/iommu, when given, is the truth; then dmesg; then the command line
    (intel_iommu=on, amd_iommu=on, iommu=pt / iommu.passthrough=1 -> on; intel_iommu=off,
    amd_iommu=off, iommu=off -> off).
    """
    params = cmdline_iommu(cmdline or "")
    evidence = None
    if dmesg_or_sysfs is not None:
        lines = [line.strip() for line in dmesg_or_sysfs.splitlines() if line.strip()]
        if all(_SYSFS_NAME.match(line) for line in lines):  # a /sys/class/iommu listing
            return "on" if lines else "off"
        text = "\n".join(lines)
        if _DMESG_ON.search(text):
            evidence = "on"
        elif _DMESG_OFF.search(text):
            evidence = "off"
    if evidence:
        return evidence
    if params.get("intel_iommu") == "off" or params.get("amd_iommu") == "off" or params.get("iommu") == "off":
        return "off"
    if (
        params.get("intel_iommu", "").startswith("on")
        or params.get("amd_iommu") in ("on", "force_isolation")
        or params.get("iommu") in ("pt", "on", "force")
        or params.get("iommu.passthrough") == "1"
    ):
        return "on"
    return "unknown"


def iommu_passthrough(cmdline: str) -> bool:
    params = cmdline_iommu(cmdline or "")
    return params.get("iommu") == "pt" or params.get("iommu.passthrough") in ("1", "y", "Y")


def iommu_inputs(passport):
    """(the kernel command line's IOMMU parameters, the /sys/class/iommu listing) the passport
    holds, each None where it could not be read."""
    found = passport.get("iommu")
    if not isinstance(found, dict):
        return None, None
    sysfs, cmdline = found.get("sysfs"), found.get("cmdline")
    return (
        cmdline if isinstance(cmdline, str) else None,
        "\n".join(sysfs) if isinstance(sysfs, list) else None,
    )


def iommu_check(passport) -> Check:
    cmdline, listing = iommu_inputs(passport)
    if cmdline is None and listing is None:
        return Check.not_checked("iommu", "/proc/cmdline and /sys/class/iommu")
    state = iommu_state(cmdline or "", listing)
    if state == "off":
        return Check("iommu", OK, "off")
    if state == "unknown":
        return Check("iommu", WARNING, "could not tell whether the IOMMU translates DMA")
    if iommu_passthrough(cmdline or ""):
        return Check("iommu", OK, "on, passthrough (iommu=pt)")
    return Check(
        "iommu",
        WARNING,
        "on and translating: GPU peer-to-peer goes through the IOMMU (slow P2P or NCCL "
        "hangs); use iommu=pt on the kernel command line",
    )


# ---------------------------------------------------------------------------------- GPUs


def gpus_check(passport, expected_count: int | None = None) -> Check:
    gpus = _part(passport, "gpus", "GPU list")
    if not is_checked(gpus):
        return _unread("gpus", gpus)
    if not gpus:
        return Check("gpus", FAILED, "no GPU found")
    names = sorted({gpu["name"] if isinstance(gpu.get("name"), str) else "?" for gpu in gpus})
    driver = passport.get("driver_version")
    detail = "%d x %s, driver %s" % (len(gpus), " / ".join(names), driver if isinstance(driver, str) else "?")
    if expected_count is not None and len(gpus) != expected_count:
        return Check("gpus", FAILED, "%s; expected %d GPUs" % (detail, expected_count))
    return Check("gpus", OK, detail)
