"""Whether a GPU's PCIe link trained below what it and its slot can do, from a hardware passport
(node/passport.py): the deploy's check, `make verify` and the node's textfile metric
(`sglang_deploy_gpu_pcie_link_degraded{gpu="<index>"}`) judge by this one rule.

A link is degraded when its width is below its maximum (a riser or slot with fewer lanes, a
lane that failed to train), or its generation is below its maximum while the GPU runs at P0.
Below P0 (P8 idle on most GeForce and workstation boards) the driver lowers the link's speed
itself to save power, and raises it under load: that is not judged. Width is always judged.
Both nvidia-smi's view (the link as the driver reports it, with the lower of the GPU's and
the host's maximum) and sysfs's (the GPU's upstream link) are read; either one degraded is
enough. A GPU whose link could not be read is left out, never called healthy.
"""

FULL_SPEED_STATE = "P0"


def _int(value):
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _views(gpu):
    """(source, link) pairs of one passport GPU: nvidia-smi's `pcie`, sysfs's `sysfs.link`."""
    views = []
    if isinstance(gpu.get("pcie"), dict) and "not_checked" not in gpu["pcie"]:
        views.append(("nvidia-smi", gpu["pcie"]))
    sysfs = gpu.get("sysfs") if isinstance(gpu.get("sysfs"), dict) else gpu
    if isinstance(sysfs.get("link"), dict):
        views.append(("sysfs", sysfs["link"]))
    return views


def figures(gpu):
    """{gen_current, gen_max, width_current, width_max} of the first view (nvidia-smi's, then
    sysfs's) that has all four, or None."""
    for _, link in _views(gpu):
        found = {key: _int(link.get(key)) for key in ("gen_current", "gen_max", "width_current", "width_max")}
        if None not in found.values():
            return found
    return None


def gpus(passport):
    """The passport's GPUs: nvidia-smi's list, else the NVIDIA devices sysfs lists (no driver)."""
    listed = passport.get("gpus")
    if isinstance(listed, list):
        return listed
    pci = passport.get("pci_gpus")
    return [dict(device, index=i) for i, device in enumerate(pci)] if isinstance(pci, list) else []


def judge(gpu):
    """(degraded: True/False, or None when nothing could be judged; [why, one per view])."""
    state = gpu.get("performance_state")
    state = state if isinstance(state, str) else None
    judged, why = False, []
    for source, link in _views(gpu):
        gen, gen_max = _int(link.get("gen_current")), _int(link.get("gen_max"))
        width, width_max = _int(link.get("width_current")), _int(link.get("width_max"))
        low = []
        if width is not None and width_max is not None:
            judged = True
            if width < width_max:
                low.append("x%d of x%d" % (width, width_max))
        if gen is not None and gen_max is not None and state in (None, FULL_SPEED_STATE):
            judged = True
            if gen < gen_max:
                low.append("Gen%d of Gen%d" % (gen, gen_max))
        if low:
            why.append("%s (%s)" % (", ".join(low), source))
    return (bool(why) if judged else None), why


def degraded(passport):
    """{GPU index: True when its PCIe link is degraded, False when it is not}; GPUs whose link
    could not be judged are left out."""
    found = {}
    for gpu in gpus(passport):
        verdict, _ = judge(gpu)
        if verdict is not None:
            found[gpu["index"]] = verdict
    return found


def problems(passport):
    """One line per degraded GPU: 'GPU 1 (0000:3b:00.0): PCIe link at x8 of x16 (sysfs)'."""
    lines = []
    for gpu in gpus(passport):
        verdict, why = judge(gpu)
        if verdict:
            where = gpu.get("bus_id") or gpu.get("bdf")
            lines.append("GPU %s (%s): PCIe link at %s" % (gpu["index"], where, "; ".join(why)))
    return lines
