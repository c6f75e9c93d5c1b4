"""`nvidia-smi -q` read into what a hardware passport keeps of each GPU (standard library only:
node/passport.py runs it on the node, the tests parse real captures).

The output is an indented tree of "Key   : value" lines and section headers:

    Driver Version                        : 580.159.04
    CUDA Version                          : 13.0
    GPU 00000000:00:06.0
        Product Name                      : NVIDIA H200
        PCI
            GPU Link Info
                PCIe Generation
                    Max                   : 5
                    Current               : 5
                Link Width
                    Max                   : 16x

One `-q` holds every section the passport needs (PCI, clocks-event reasons, retired pages,
remapped rows): `-q -d PCIE,PAGE_RETIREMENT,...` with several sections is refused by driver 580
("Failed to parse --display/-d flags"). GPUs are listed in nvidia-smi's index order.
Drivers before 530 call "Clocks Event Reasons" "Clocks Throttle Reasons"; both are read.
A value nvidia-smi gives as N/A (not supported by this GPU or driver) becomes "not checked".
"""

import re

NA = ("n/a", "[n/a]", "not supported", "[not supported]", "unknown error", "insufficient permissions")
_KEY_VALUE = re.compile(r"^(?P<key>\S.*?)\s+:(?: (?P<value>.*))?$")
_GPU_HEADER = re.compile(r"^GPU (?P<bus_id>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])$")
_REASON_SECTIONS = ("Clocks Event Reasons", "Clocks Throttle Reasons")


class Unparsed(ValueError):
    """nvidia-smi -q output in a shape this parser does not know."""


def not_checked(why):
    """What a passport holds where it could not look: never a guess."""
    return {"not_checked": why}


def is_checked(value):
    return not (isinstance(value, dict) and "not_checked" in value)


def parse_tree(text):
    """(top-level {key: value}, [per GPU {"bus_id": ..., key: value or {section}}]).

    A section is a line without " : "; its keys are the lines indented below it. A key with a
    value can have lines indented below it too (`HW Slowdown` and its kinds): they belong to
    the section it is in."""
    top, gpus = {}, []
    stack = [(-1, top)]
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip() or line.lstrip().startswith("==="):
            continue
        indent = len(line) - len(line.lstrip(" "))
        text_line = line.strip()
        while stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        pair = _KEY_VALUE.match(text_line)
        if pair:
            parent.setdefault(pair.group("key"), (pair.group("value") or "").strip())
            continue
        gpu = _GPU_HEADER.match(text_line) if indent == 0 else None
        section = {"bus_id": gpu.group("bus_id")} if gpu else {}
        if gpu:
            gpus.append(section)
        else:
            parent.setdefault(text_line, section)
        stack.append((indent, section))
    return top, gpus


def _value(section, *keys):
    """The string at ``keys`` under ``section``, or None where a key is absent."""
    for key in keys:
        if not isinstance(section, dict) or key not in section:
            return None
        section = section[key]
    return section if isinstance(section, str) else None


def _number(text, where):
    """'5' -> 5, '16x' -> 16, '0 us' -> 0; N/A and absent -> "not checked" saying so."""
    if text is None:
        return not_checked("nvidia-smi -q has no %s" % where)
    if text.strip().lower() in NA:
        return not_checked("nvidia-smi -q: %s is %s" % (where, text.strip()))
    found = re.match(r"^(\d+)\s*(?:x|us|bank\(s\))?$", text.strip(), re.IGNORECASE)
    if not found:
        raise Unparsed("nvidia-smi -q: %s is %r, not a number" % (where, text))
    return int(found.group(1))


def _yes_no(text, where):
    if text is None:
        return not_checked("nvidia-smi -q has no %s" % where)
    if text.strip().lower() in NA:
        return not_checked("nvidia-smi -q: %s is %s" % (where, text.strip()))
    if text.strip().lower() not in ("yes", "no"):
        raise Unparsed("nvidia-smi -q: %s is %r, not Yes/No" % (where, text))
    return text.strip().lower() == "yes"


def _section(gpu, name):
    found = gpu.get(name)
    return found if isinstance(found, dict) else None


def pcie(gpu):
    """{"gen_current", "gen_max", "gen_device_current", "gen_device_max", "gen_host_max",
    "width_current", "width_max"}: ints, or "not checked" each. ``gen_max`` is what this GPU in
    this slot can reach (the lower of the GPU's and the host's), the one a link is judged by."""
    link = (_section(gpu, "PCI") or {}).get("GPU Link Info")
    if not isinstance(link, dict):
        return not_checked("nvidia-smi -q has no PCI > GPU Link Info")
    gen = {
        "gen_current": ("PCIe Generation", "Current"),
        "gen_max": ("PCIe Generation", "Max"),
        "gen_device_current": ("PCIe Generation", "Device Current"),
        "gen_device_max": ("PCIe Generation", "Device Max"),
        "gen_host_max": ("PCIe Generation", "Host Max"),
        "width_current": ("Link Width", "Current"),
        "width_max": ("Link Width", "Max"),
    }
    return {field: _number(_value(link, *keys), " > ".join(keys)) for field, keys in gen.items()}


def clocks_event_reasons(gpu):
    """The names of the active clocks-event (throttle) reasons: ["Idle"] for an idle GPU."""
    for name in _REASON_SECTIONS:
        reasons = _section(gpu, name)
        if reasons is not None:
            return sorted(reason for reason, state in reasons.items() if state == "Active")
    return not_checked("nvidia-smi -q has no Clocks Event Reasons")


def remapped_rows(gpu):
    """Row remapping (Ampere and later): correctable/uncorrectable counts, pending, failure."""
    rows = _section(gpu, "Remapped Rows")
    if rows is None:
        value = gpu.get("Remapped Rows")
        return not_checked("nvidia-smi -q: Remapped Rows is %s" % (value or "absent"))
    return {
        "correctable": _number(rows.get("Correctable Error"), "Remapped Rows > Correctable Error"),
        "uncorrectable": _number(rows.get("Uncorrectable Error"), "Remapped Rows > Uncorrectable Error"),
        "pending": _yes_no(rows.get("Pending"), "Remapped Rows > Pending"),
        "failure": _yes_no(
            rows.get("Remapping Failure Occurred"), "Remapped Rows > Remapping Failure Occurred"
        ),
    }


def retired_pages(gpu):
    """Page retirement (before Ampere; N/A on Hopper, which remaps rows instead)."""
    pages = _section(gpu, "Retired Pages")
    if pages is None:
        value = gpu.get("Retired Pages")
        return not_checked("nvidia-smi -q: Retired Pages is %s" % (value or "absent"))
    single = pages.get("Single Bit ECC")
    double = pages.get("Double Bit ECC")
    if isinstance(single, dict):  # older drivers: a section with "Count" and addresses
        single = single.get("Count")
    if isinstance(double, dict):
        double = double.get("Count")
    return {
        "single_bit_ecc": _number(single, "Retired Pages > Single Bit ECC"),
        "double_bit_ecc": _number(double, "Retired Pages > Double Bit ECC"),
        "pending": _yes_no(pages.get("Pending Page Blacklist"), "Retired Pages > Pending Page Blacklist"),
    }


def _text(gpu, key):
    value = gpu.get(key)
    if not isinstance(value, str) or not value or value.lower() in NA:
        return not_checked("nvidia-smi -q: %s is %s" % (key, value or "absent"))
    return value


def passport_gpus(text):
    """Every GPU of `nvidia-smi -q`, in index order, as the passport keeps it."""
    _, gpus = parse_tree(text)
    return [
        {
            "index": index,
            "bus_id": gpu["bus_id"],
            "name": _text(gpu, "Product Name"),
            "vbios": _text(gpu, "VBIOS Version"),
            "performance_state": _text(gpu, "Performance State"),
            "pcie": pcie(gpu),
            "clocks_event_reasons": clocks_event_reasons(gpu),
            "remapped_rows": remapped_rows(gpu),
            "retired_pages": retired_pages(gpu),
        }
        for index, gpu in enumerate(gpus)
    ]


def versions(text):
    """{"driver_version", "cuda_version"} from the header of `nvidia-smi -q`."""
    top, _ = parse_tree(text)
    return {
        "driver_version": _text(top, "Driver Version"),
        "cuda_version": _text(top, "CUDA Version"),
    }
