"""NVIDIA Xid events in the kernel log (standard library only): the driver's report of a GPU
fault, one line each, e.g.

    [Fri Aug 30 11:43:14 2024] NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, ...
    May 18 10:01:02 node kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 ...

Only lines holding `NVRM: Xid` count. Read from `journalctl -k -b` (this boot's kernel messages)
or `dmesg`; a kernel log that could not be read, or that holds no line at all (a container sees
none of the host's), is "not checked", never "no events".
"""

import re

_XID = re.compile(r"NVRM: Xid \((?P<device>[^)]*)\): (?P<code>\d+)(?:,\s*(?P<text>.*))?")
KEEP_LINES = 20  # the last lines kept verbatim; every event is counted


def events(lines):
    """{"count", "by_code": {code: n}, "by_device": {"PCI:0000:cb:00": n}, "last": [the last
    KEEP_LINES Xid lines]} of a kernel log."""
    by_code, by_device, kept = {}, {}, []
    for line in lines:
        found = _XID.search(line)
        if not found:
            continue
        code = found.group("code")
        by_code[code] = by_code.get(code, 0) + 1
        by_device[found.group("device")] = by_device.get(found.group("device"), 0) + 1
        kept.append(line[found.start() :].strip())
    return {
        "count": sum(by_code.values()),
        "by_code": by_code,
        "by_device": by_device,
        "last": kept[-KEEP_LINES:],
    }
