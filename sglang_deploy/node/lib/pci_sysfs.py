"""A PCI device's link and NUMA node as Linux's sysfs says them (standard library only).

    /sys/bus/pci/devices/0000:3b:00.0/current_link_speed   "32.0 GT/s PCIe" (older kernels: "32 GT/s")
    /sys/bus/pci/devices/0000:3b:00.0/max_link_speed       "32.0 GT/s PCIe"
    /sys/bus/pci/devices/0000:3b:00.0/current_link_width   "16"
    /sys/bus/pci/devices/0000:3b:00.0/max_link_width       "16"
    /sys/bus/pci/devices/0000:3b:00.0/numa_node            "0" (-1: the platform names none)

A speed is read as its PCIe generation (GT/s per lane). A file that is absent (a VM's virtual
slot has no link files) is "not checked" saying which, never a guess. NVIDIA GPUs are the
devices of vendor 0x10de whose class is a display controller (0x03xxxx).
"""

import os

DEVICES = "/sys/bus/pci/devices"
NVIDIA_VENDOR = "0x10de"
DISPLAY_CLASS = "0x03"
# GT/s per lane -> PCIe generation.
GENERATIONS = {"2.5": 1, "5": 2, "8": 3, "16": 4, "32": 5, "64": 6, "128": 7}


def not_checked(why):
    return {"not_checked": why}


def sysfs_bdf(bus_id):
    """nvidia-smi's '00000000:3B:00.0' -> sysfs's '0000:3b:00.0' (a 4-digit domain, lower case)."""
    domain, _, rest = bus_id.strip().lower().partition(":")
    return "%04x:%s" % (int(domain, 16), rest)


def generation(speed):
    """'32.0 GT/s PCIe' -> 5; None for a speed it does not know ('Unknown', '')."""
    number = speed.strip().split(" ", 1)[0]
    if number.endswith(".0"):
        number = number[:-2]
    return GENERATIONS.get(number)


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError as exc:
        return OSError(exc.strerror or str(exc))


def link(bdf, devices=DEVICES):
    """{"gen_current", "gen_max", "width_current", "width_max"} of a device's link, each an int
    or "not checked" (the file absent or unreadable, a speed it does not know)."""
    found = {}
    for field, name in (
        ("gen_current", "current_link_speed"),
        ("gen_max", "max_link_speed"),
        ("width_current", "current_link_width"),
        ("width_max", "max_link_width"),
    ):
        path = os.path.join(devices, bdf, name)
        text = _read(path)
        if isinstance(text, OSError):
            found[field] = not_checked("%s: %s" % (path, text))
        elif field.startswith("gen"):
            gen = generation(text)
            found[field] = gen if gen is not None else not_checked("%s: speed %r" % (path, text))
        else:
            found[field] = int(text) if text.isdigit() else not_checked("%s: width %r" % (path, text))
    return found


def numa_node(bdf, devices=DEVICES):
    """The NUMA node the device hangs off (-1: the platform names none), or "not checked"."""
    path = os.path.join(devices, bdf, "numa_node")
    text = _read(path)
    if isinstance(text, OSError):
        return not_checked("%s: %s" % (path, text))
    try:
        return int(text)
    except ValueError:
        return not_checked("%s: %r" % (path, text))


def nvidia_gpus(devices=DEVICES):
    """The addresses of NVIDIA display-class devices, sorted (nvidia-smi's default order)."""
    found = []
    for bdf in sorted(os.listdir(devices)):
        vendor = _read(os.path.join(devices, bdf, "vendor"))
        klass = _read(os.path.join(devices, bdf, "class"))
        if vendor == NVIDIA_VENDOR and isinstance(klass, str) and klass.startswith(DISPLAY_CLASS):
            found.append(bdf)
    return found


def device(bdf, devices=DEVICES):
    """{"bdf", "link", "numa_node"} of one device."""
    return {"bdf": bdf, "link": link(bdf, devices), "numa_node": numa_node(bdf, devices)}
