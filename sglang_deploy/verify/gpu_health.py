"""GPU and PCIe health of a serving node, as pure functions over command output.

Parsers (each takes the command's stdout as text):
    parse_gpus          nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader,nounits
    parse_compute_apps  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits
    parse_topology      nvidia-smi topo -m                      -> {(gpu_a, gpu_b): link type}
    parse_acs           lspci -vvv  (or `lspci -vvv | grep ACSCtl`) -> devices with ACSCtl SrcValid+
    iommu_state         /proc/cmdline and `ls /sys/class/iommu` (or dmesg lines) -> on / off / unknown
and the verdicts built on them, each a Check (sglang_deploy.verify.verdict) whose state is "ok", "warning", "failed" or
"not checked (<tool> missing)". Pass None for the output of a tool that is not installed:
a check that could not look is never "ok".

Link types in `nvidia-smi topo -m`: NV# (a bonded set of # NVLinks); PIX, PXB, PHB, NODE, SYS
(PCIe paths, from one bridge to across the CPU sockets; SOC is SYS's old name).
"""

import csv
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from sglang_deploy.node.lib import compute_apps
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


# ---------------------------------------------------------------------------------- topology

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PCIE_TYPES = {"PIX", "PXB", "PHB", "NODE", "SYS", "SOC"}
_NVLINK = re.compile(r"^NV\d+$")
_GPU = re.compile(r"^GPU(\d+)$")

Matrix = dict[tuple[int, int], str]


def parse_topology(text: str) -> Matrix:
    """`nvidia-smi topo -m` -> {(a, b): link} for every GPU pair a < b, e.g. {(0, 1): 'NV18'}.

    Tolerates tabs or spaces, NIC/mlx5 columns, the affinity columns, the legend and the ANSI
    underline nvidia-smi puts around the header. One GPU -> {}.
    """
    lines = [_ANSI.sub("", line).rstrip() for line in text.splitlines()]
    header = None
    for i, line in enumerate(lines):
        tokens = line.split()
        if "GPU0" in tokens and "X" not in tokens:  # column names only; every GPU row has its X
            header = i
            break
    if header is None:
        raise ParseError("topo -m: no header line with GPU0")
    columns = []
    for token in lines[header].split():
        if token == "CPU":  # "CPU Affinity": the device columns end here
            break
        columns.append(token)
    gpu_columns = {i: int(_GPU.match(c).group(1)) for i, c in enumerate(columns) if _GPU.match(c)}
    rows: dict[int, list[str]] = {}
    for line in lines[header + 1 :]:
        tokens = line.split()
        if not tokens:
            if rows:
                break  # the blank line before the legend
            continue
        m = _GPU.match(tokens[0])
        if not m:
            continue  # NIC rows
        cells = tokens[1 : 1 + len(columns)]
        if len(cells) < len(columns):
            raise ParseError(
                "topo -m: row %s has %d cells for %d columns" % (tokens[0], len(cells), len(columns))
            )
        rows[int(m.group(1))] = cells
    if not rows:
        raise ParseError("topo -m: no GPU rows")
    matrix: Matrix = {}
    for a, cells in rows.items():
        for col, b in gpu_columns.items():
            link = cells[col]
            if a == b:
                if link != "X":
                    raise ParseError("topo -m: GPU%d to itself is %r, not X" % (a, link))
                continue
            if link not in _PCIE_TYPES and not _NVLINK.match(link):
                raise ParseError("topo -m: unknown link type %r between GPU%d and GPU%d" % (link, a, b))
            if a < b:
                matrix[(a, b)] = link
    return matrix


def link_kind(matrix: Matrix) -> str:
    """'nvlink' (every GPU pair NV#), 'pcie' (none), 'mixed', or 'none' (fewer than two GPUs)."""
    if not matrix:
        return "none"
    nvlink = [bool(_NVLINK.match(link)) for link in matrix.values()]
    if all(nvlink):
        return "nvlink"
    if not any(nvlink):
        return "pcie"
    return "mixed"


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


def topology_check(text: str | None, pcie_tuned_profile: bool = True) -> Check:
    if text is None:
        return Check.not_checked("gpu topology", "nvidia-smi")
    try:
        kind = link_kind(parse_topology(text))
    except ParseError as exc:
        return Check("gpu topology", FAILED, str(exc))
    warnings = topology_warnings(kind, pcie_tuned_profile)
    if warnings:
        return Check("gpu topology", WARNING, "%s: %s" % (kind, "; ".join(warnings)))
    return Check("gpu topology", OK, kind)


# ---------------------------------------------------------------------------------- ACS

_DEVICE = re.compile(r"^(?P<addr>(?:[0-9a-fA-F]{4,}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<desc>.*)$")
_ACSCTL = re.compile(r"^\s*ACSCtl:\s*(?P<flags>.*)$")
_FLAG = re.compile(r"([A-Za-z0-9]+)([+-])")


@dataclass(frozen=True)
class AcsControl:
    address: str | None  # None for `lspci -vvv | grep ACSCtl` output (no device lines)
    description: str | None  # "PCI bridge: ..." from the device line
    flags: dict[str, bool] = field(default_factory=dict, hash=False)

    @property
    def enabled(self) -> bool:
        """ACS redirects peer-to-peer traffic up to the root complex (and the IOMMU)."""
        return self.flags.get("SrcValid", False)

    @property
    def is_bridge(self) -> bool:
        return bool(self.description and "bridge" in self.description.lower())


def parse_acs_controls(text: str) -> list[AcsControl]:
    """Every ACSCtl line, with the device it belongs to when lspci printed device lines."""
    found = []
    address = description = None
    for line in text.splitlines():
        m = _DEVICE.match(line)
        if m:
            address, description = m.group("addr"), m.group("desc")
            continue
        m = _ACSCTL.match(line)
        if m:
            flags = {name: sign == "+" for name, sign in _FLAG.findall(m.group("flags"))}
            found.append(AcsControl(address, description, flags))
    return found


def parse_acs(text: str) -> list[AcsControl]:
    """Devices (in practice bridges: root and switch downstream ports) with ACSCtl SrcValid+.

    ACS enabled on the path between two GPUs sends their peer-to-peer traffic through the root
    complex: a known cause of NCCL hangs and slow P2P on PCIe boxes (NVIDIA/nccl#631, #2079)."""
    return [c for c in parse_acs_controls(text) if c.enabled]


def capabilities_hidden(text: str) -> bool:
    """lspci ran without root: capabilities (ACS among them) print as '<access denied>'."""
    return "Capabilities: <access denied>" in text


def acs_check(text: str | None) -> Check:
    if text is None:
        return Check.not_checked("pcie acs", "lspci")
    enabled = parse_acs(text)
    if enabled:
        addresses = [c.address for c in enabled if c.address]
        where = ", ".join(addresses) if addresses else "device addresses not in the output"
        return Check(
            "pcie acs",
            WARNING,
            "ACS enabled (ACSCtl SrcValid+) on %d device%s: %s; GPU peer-to-peer "
            "traffic is redirected through the root complex (NCCL hangs or slow P2P): disable ACS in the "
            "BIOS or with setpci" % (len(enabled), "" if len(enabled) == 1 else "s", where),
        )
    if capabilities_hidden(text):
        return Check(
            "pcie acs", WARNING, "lspci could not read capabilities ('<access denied>'): run it as root"
        )
    controls = parse_acs_controls(text)
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


def iommu_check(cmdline: str | None, dmesg_or_sysfs: str | None) -> Check:
    if cmdline is None and dmesg_or_sysfs is None:
        return Check.not_checked("iommu", "/proc/cmdline and /sys/class/iommu")
    state = iommu_state(cmdline or "", dmesg_or_sysfs)
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


def gpus_check(text: str | None, expected_count: int | None = None) -> Check:
    if text is None:
        return Check.not_checked("gpus", "nvidia-smi")
    try:
        gpus = parse_gpus(text)
    except ParseError as exc:
        return Check("gpus", FAILED, str(exc))
    if not gpus:
        return Check("gpus", FAILED, "no GPU found")
    names = sorted({g.name for g in gpus})
    drivers = sorted({g.driver for g in gpus})
    detail = "%d x %s, driver %s" % (len(gpus), " / ".join(names), " / ".join(drivers))
    if expected_count is not None and len(gpus) != expected_count:
        return Check("gpus", FAILED, "%s; expected %d GPUs" % (detail, expected_count))
    return Check("gpus", OK, detail)
