"""nvidia-smi's compute apps: which processes hold GPU memory, and how much. Parsed here once,
for restart.py on the node and for gpu_health on the controller (which imports node modules).

    nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader[,nounits]
"""

QUERY = ["--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]
NOT_AVAILABLE = ("[n/a]", "n/a", "[not supported]", "[unknown error]", "[insufficient permissions]")
NO_APPS = ("no devices were found", "no running processes found", "no running compute processes found")


class Unparsed(ValueError):
    """A line that is neither a compute app nor one of nvidia-smi's known messages (strict)."""


def parse_compute_apps(text, strict=False):
    """[(pid, used MiB or None)]; used memory with or without ' MiB', '[N/A]' and the like as
    None. Other lines (messages, a header) are skipped, or with ``strict`` raise Unparsed
    unless they are a known 'nothing running' message."""
    apps = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        fields = [field.strip() for field in line.split(",")]
        used = fields[1] if len(fields) > 1 else ""
        number = used[:-3].strip() if used.lower().endswith("mib") else used
        if len(fields) == 2 and fields[0].isdigit() and (number.isdigit() or used.lower() in NOT_AVAILABLE):
            apps.append((int(fields[0]), int(number) if number.isdigit() else None))
        elif strict and line.lower().rstrip(".") not in NO_APPS:
            raise Unparsed("not a compute app: %r" % line)
        elif not strict and fields[0].isdigit():
            apps.append((int(fields[0]), None))  # a pid whose memory this line does not say
    return apps
