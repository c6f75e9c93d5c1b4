"""Hardware passports (node/passport.py) judged on the controller, pure: what is wrong with one
node on its own, and where a node differs from its peers of the same GPU model.

On its own: a degraded PCIe link (node/lib/gpu_links.py's rule) is a failure; Xid events this
boot, rows pending remapping or a remapping failure, pages pending retirement and hardware
slowdowns among the active clocks-event reasons are warnings.

Against peers: nodes are grouped by GPU model (the set of product names nvidia-smi lists; a
node without a GPU list is compared with no one). For each field below, the value most nodes
of the group hold (more than half) is the peers' value, and a node holding another is flagged
with both; where no value has a majority every node is flagged with how the group splits.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass

from sglang_deploy.node.acs import is_clear
from sglang_deploy.node.lib import gpu_links
from sglang_deploy.verify.gpu_health import iommu_inputs, iommu_state

NOT_CHECKED = "not checked"
LINK_FIELDS = ("gen_current", "gen_max", "width_current", "width_max")
# Active clocks-event reasons that mean the hardware is holding the GPU back (not idle, not a
# setting, not the power cap a loaded GPU reaches by design).
SLOWDOWNS = ("HW Slowdown", "HW Thermal Slowdown", "HW Power Brake Slowdown", "SW Thermal Slowdown")


def _checked(value):
    return not (isinstance(value, dict) and "not_checked" in value)


def _plain(value):
    return value if _checked(value) else NOT_CHECKED


def _gpu_list(passport):
    gpus = passport.get("gpus")
    return gpus if isinstance(gpus, list) else []


def model_of(passport) -> str | None:
    """'NVIDIA H200' (several models: joined by ' + '); None without a GPU list."""
    names = sorted({gpu["name"] for gpu in _gpu_list(passport) if isinstance(gpu.get("name"), str)})
    return " + ".join(names) or None


def acs_state(passport) -> str:
    """'on' (some bridge's ACS control register is set), 'off', 'no ACS capability',
    'no PCI bridges' or 'not checked'."""
    acs = passport.get("acs")
    if not isinstance(acs, dict) or not _checked(acs):
        return NOT_CHECKED
    bridges = acs.get("bridges") or []
    if not bridges:
        return "no PCI bridges"
    controls = [bridge.get("control") for bridge in bridges if bridge.get("control") is not None]
    if not all(is_clear(control) for control in controls):
        return "on"
    return "off" if controls else "no ACS capability"


def iommu(passport) -> str:
    """'on', 'off' or 'unknown' (verify/gpu_health.py's reading), or 'not checked'."""
    cmdline, listing = iommu_inputs(passport)
    if cmdline is None and listing is None:
        return NOT_CHECKED
    return iommu_state(cmdline or "", listing)


def comparable(passport) -> dict:
    """The fields compared between peers, by name ('gpu 1 pcie width_current': 16)."""
    fields = {
        "gpu count": _plain(passport.get("gpu_count")),
        "driver": _plain(passport.get("driver_version")),
        "cuda": _plain(passport.get("cuda_version")),
        "acs": acs_state(passport),
        "iommu": iommu(passport),
    }
    for gpu in _gpu_list(passport):
        link = gpu.get("pcie") if _checked(gpu.get("pcie")) else (gpu.get("sysfs") or {}).get("link")
        for field in LINK_FIELDS:
            value = link.get(field) if isinstance(link, dict) else None
            fields[f"gpu {gpu['index']} pcie {field}"] = _plain(value) if value is not None else NOT_CHECKED
    return fields


@dataclass(frozen=True)
class Difference:
    field: str
    value: object  # this node's
    peers: object  # the group's majority, None when there is none
    held_by: int  # how many of the group hold ``peers``
    group: int  # nodes of this GPU model
    split: dict  # value (as text) -> how many nodes hold it

    def text(self) -> str:
        if self.peers is None:
            return "%s %s (peers disagree: %s)" % (
                self.field,
                self.value,
                ", ".join(f"{value} on {n}" for value, n in self.split.items()),
            )
        return "%s %s (peers: %s on %d of %d)" % (
            self.field,
            self.value,
            self.peers,
            self.held_by,
            self.group,
        )

    def as_json(self) -> dict:
        return asdict(self)


def peer_differences(passports: dict) -> dict:
    """{host: [Difference, ...]} for every host of ``passports`` ({host: passport}); a host
    alone with its GPU model, or without GPUs, has none."""
    groups: dict = {}
    for host, passport in passports.items():
        model = model_of(passport)
        if model:
            groups.setdefault(model, []).append(host)
    found = {host: [] for host in passports}
    for hosts in groups.values():
        if len(hosts) < 2:
            continue
        fields = {host: comparable(passports[host]) for host in hosts}
        names = list(dict.fromkeys(name for host in hosts for name in fields[host]))
        for name in names:
            values = {host: fields[host].get(name, "absent") for host in hosts}
            counts = Counter(values.values())
            if len(counts) == 1:
                continue
            top, held_by = counts.most_common(1)[0]
            majority = top if held_by * 2 > len(hosts) else None
            split = {str(value): n for value, n in counts.most_common()}
            for host in hosts:
                if majority is None or values[host] != majority:
                    found[host].append(
                        Difference(
                            name,
                            values[host],
                            majority,
                            held_by if majority is not None else 0,
                            len(hosts),
                            split,
                        )
                    )
    return found


def own_findings(passport) -> tuple[list, list]:
    """(failures, warnings) of one node's passport, without its peers."""
    failures = gpu_links.problems(passport)
    warnings = []
    events = passport.get("xid")
    if isinstance(events, dict) and events.get("count"):
        codes = ", ".join(f"{code} ×{n}" for code, n in sorted(events["by_code"].items()))
        warnings.append(f"{events['count']} Xid event(s) this boot (Xid {codes}): {events['last'][-1]}")
    for gpu in _gpu_list(passport):
        rows, pages = gpu.get("remapped_rows"), gpu.get("retired_pages")
        if isinstance(rows, dict) and rows.get("failure") is True:
            warnings.append(f"GPU {gpu['index']}: a row remapping failed (the GPU needs service)")
        if isinstance(rows, dict) and rows.get("pending") is True:
            warnings.append(f"GPU {gpu['index']}: rows pending remapping (reset the GPU)")
        if isinstance(pages, dict) and pages.get("pending") is True:
            warnings.append(f"GPU {gpu['index']}: pages pending retirement (reset the GPU)")
        reasons = gpu.get("clocks_event_reasons")
        slow = [reason for reason in reasons if reason in SLOWDOWNS] if isinstance(reasons, list) else []
        if slow:
            warnings.append(f"GPU {gpu['index']}: clocks held back by {', '.join(slow)}")
    return failures, warnings


def _link_text(link):
    if not isinstance(link, dict) or not all(isinstance(link.get(f), int) for f in LINK_FIELDS):
        return None
    return "Gen%d x%d (max Gen%d x%d)" % (
        link["gen_current"],
        link["width_current"],
        link["gen_max"],
        link["width_max"],
    )


def summary(passport) -> str:
    """'1 × NVIDIA H200, driver 580.159.04, CUDA 13.0; PCIe Gen5 x16 (max Gen5 x16); ACS not
    checked; IOMMU off; no Xid' (links listed once per distinct state)."""
    gpus = _gpu_list(passport)
    if gpus:
        head = "%d × %s, driver %s, CUDA %s" % (
            len(gpus),
            model_of(passport),
            _plain(passport.get("driver_version")),
            _plain(passport.get("cuda_version")),
        )
    else:
        head = "GPUs %s: %s" % (NOT_CHECKED, (passport.get("gpus") or {}).get("not_checked", "none listed"))
    links = Counter(
        _link_text(gpu.get("pcie")) or _link_text((gpu.get("sysfs") or {}).get("link")) or "link not checked"
        for gpu in gpus
    )
    parts = [head]
    if links:
        parts.append("PCIe " + ", ".join(text if n == 1 else f"{n} × {text}" for text, n in links.items()))
    parts.append(f"ACS {acs_state(passport)}")
    parts.append(f"IOMMU {iommu(passport)}")
    events = passport.get("xid")
    parts.append(
        f"Xid {NOT_CHECKED}"
        if not _checked(events)
        else f"{events['count']} Xid"
        if events["count"]
        else "no Xid"
    )
    return "; ".join(parts)
