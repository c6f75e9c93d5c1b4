"""A node's hardware passport: its GPUs (model, PCIe link current vs max, NUMA node,
clocks-event reasons, remapped rows, retired pages), the driver and CUDA versions, the links
between the GPUs, ACS on the PCI bridges, the IOMMU and this boot's Xid events, as one JSON
document: the one reading of the node's hardware, which `make verify`'s GPU, topology, ACS and
IOMMU checks judge (verify/gpu_health.py) as the passport check does.

    python3 passport.py collect [--write PATH]

Sources: `nvidia-smi -q` (lib/nvidia_smi_q.py), `nvidia-smi topo -m` (lib/gpu_topology.py),
/sys/bus/pci/devices (lib/pci_sysfs.py), `lspci -D -n` and setpci as root (acs.py's register),
/sys/class/iommu and /proc/cmdline, `journalctl -k -b` or else `dmesg` (lib/xid.py). What a
missing tool or file keeps from view is {"not_checked": why}, never a guess: without nvidia-smi
(a sandbox node) `gpus` says so and the rest is still collected. Whether a link is degraded is
lib/gpu_links.py's rule.

With --write the document goes to PATH atomically (a temporary file beside it, renamed over it),
and only when it differs from the one there beyond `collected_at` and `took_s`: an unchanged
node's file is left alone, and its `collected_at` is when the node first looked like this.
Ends with the result line (lib/result.py): {"passport": {...}, "path": PATH, "written": bool};
exit 0, or 1 when PATH could not be written.
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time

if __package__:
    from . import acs
    from .lib import gpu_links, gpu_topology, nvidia_smi_q, pci_sysfs, result, status, xid
else:  # run as a script: our scripts' directory is on sys.path
    import acs
    from lib import gpu_links, gpu_topology, nvidia_smi_q, pci_sysfs, result, status, xid

VERSION = 1
VOLATILE = ("collected_at", "took_s")  # not compared when deciding whether to write
TOOL_TIMEOUT_S = 60
IOMMU_DIR = "/sys/class/iommu"
CMDLINE = "/proc/cmdline"
not_checked = nvidia_smi_q.not_checked


def run_tool(argv):
    """(exit status, stdout, stderr) of a tool, or None when it is not installed."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=TOOL_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return 124, "", "timed out after %ds" % TOOL_TIMEOUT_S
    return done.returncode, done.stdout, done.stderr


def _failed(argv, found):
    if found is None:
        return "%s not found" % argv[0]
    lines = (found[2] or found[1]).strip().splitlines()
    return "%s exited %d: %s" % (" ".join(argv), found[0], lines[0] if lines else "no output")


def gpus(run, devices):
    """{"nvidia_smi", "driver_version", "cuda_version", "gpu_count", "gpus"} from nvidia-smi -q,
    each GPU with its sysfs link and NUMA node; "not checked" throughout without nvidia-smi."""
    argv = ["nvidia-smi", "-q"]
    found = run(argv)
    if found is None or found[0] != 0:
        why = not_checked(_failed(argv, found))
        return dict.fromkeys(("nvidia_smi", "driver_version", "cuda_version", "gpu_count", "gpus"), why)
    try:
        listed = nvidia_smi_q.passport_gpus(found[1])
        versions = nvidia_smi_q.versions(found[1])
    except nvidia_smi_q.Unparsed as exc:
        why = not_checked(str(exc))
        return dict.fromkeys(("nvidia_smi", "driver_version", "cuda_version", "gpu_count", "gpus"), why)
    for gpu in listed:
        device = pci_sysfs.device(pci_sysfs.sysfs_bdf(gpu["bus_id"]), devices)
        gpu["numa_node"] = device.pop("numa_node")
        gpu["sysfs"] = device
    return dict(versions, nvidia_smi="ok", gpu_count=len(listed), gpus=listed)


def topology(run):
    """{"links": {"0-1": link type}} of every GPU pair (lib/gpu_topology.py); "not checked"
    without nvidia-smi, or with output it cannot read (saying why)."""
    argv = ["nvidia-smi", "topo", "-m"]
    found = run(argv)
    if found is None or found[0] != 0:
        return not_checked(_failed(argv, found))
    try:
        return {"links": gpu_topology.as_links(gpu_topology.parse(found[1]))}
    except gpu_topology.Unparsed as exc:
        return not_checked(str(exc))


def pci_gpus(devices):
    """The NVIDIA GPUs sysfs lists, whatever the driver sees: bdf, link, NUMA node."""
    try:
        return [pci_sysfs.device(bdf, devices) for bdf in pci_sysfs.nvidia_gpus(devices)]
    except OSError as exc:
        return not_checked("%s: %s" % (devices, exc.strerror or exc))


def iommu(iommu_dir=IOMMU_DIR, cmdline=CMDLINE):
    """{"sysfs": the IOMMUs the kernel registered (empty: none), "cmdline": the kernel command
    line's IOMMU parameters}: verify/gpu_health.py's iommu_check judges them."""
    try:
        registered = sorted(os.listdir(iommu_dir))
    except OSError as exc:
        registered = not_checked("%s: %s" % (iommu_dir, exc.strerror or exc))
    try:
        with open(cmdline) as f:
            kernel = f.read().split(" -- ", 1)[0].split()  # after "--": init's arguments
        params = " ".join(token for token in kernel if "iommu" in token.partition("=")[0])
    except OSError as exc:
        params = not_checked("%s: %s" % (cmdline, exc.strerror or exc))
    return {"sysfs": registered, "cmdline": params}


def acs_controls(run, is_root):
    """{"bridges": [{"bdf", "control": ACS control register, "0000" clear; None: no ACS}]}."""
    if not is_root:
        return not_checked("not root: setpci cannot read the bridges' ACS registers")
    argv = ["lspci", "-D", "-n"]
    listing = run(argv)
    if listing is None or listing[0] != 0:
        return not_checked(_failed(argv, listing) + (" (Debian package pciutils)" if listing is None else ""))
    found = acs.bridges(listing[1])
    if found and run(["setpci", "--version"]) is None:
        return not_checked("setpci not found (Debian package pciutils)")

    def setpci(*args):
        done = run(["setpci", *args])
        return done[0], (done[1] or done[2]).strip()

    return {"bridges": [{"bdf": bdf, "control": acs.control(bdf, setpci)} for bdf in found]}


def xid_events(run):
    """lib/xid.py's count of this boot's Xid lines, with where they were read."""
    tried = []
    for argv in (["journalctl", "-k", "-b", "--no-pager", "-q", "-o", "short-iso"], ["dmesg"]):
        found = run(argv)
        if found is None or found[0] != 0:
            tried.append(_failed(argv, found))
        elif not found[1].strip():
            tried.append("%s: no kernel messages at all (a container sees none)" % " ".join(argv))
        else:
            return dict(xid.events(found[1].splitlines()), source=" ".join(argv))
    return not_checked("; ".join(tried))


def collect(run=run_tool, devices=pci_sysfs.DEVICES, iommu_dir=IOMMU_DIR, cmdline=CMDLINE, is_root=None):
    """The passport of the node this runs on."""
    started = time.monotonic()
    doc = {"passport_version": VERSION, "hostname": socket.gethostname()}
    doc.update(gpus(run, devices))
    doc["topology"] = topology(run)
    doc["pci_gpus"] = pci_gpus(devices)
    doc["iommu"] = iommu(iommu_dir, cmdline)
    doc["acs"] = acs_controls(run, os.geteuid() == 0 if is_root is None else is_root)
    doc["xid"] = xid_events(run)
    doc["collected_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    doc["took_s"] = round(time.monotonic() - started, 3)
    return doc


def degraded_links(passport):
    """{GPU index: whether its PCIe link is degraded} (lib/gpu_links.py's rule), for the node's
    `sglang_deploy_gpu_pcie_link_degraded{gpu="<index>"}` metric; GPUs whose link could not be
    read are left out."""
    return gpu_links.degraded(passport)


def _stable(doc):
    return {key: value for key, value in doc.items() if key not in VOLATILE}


def write(doc, path):
    """Write ``doc`` to ``path`` unless the file there holds the same passport; True if written."""
    try:
        with open(path) as f:
            if _stable(json.load(f)) == _stable(doc):
                return False
    except (OSError, ValueError):
        pass
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    temporary = "%s.tmp-%d" % (path, os.getpid())
    with open(temporary, "w") as f:
        f.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.chmod(temporary, 0o644)
    os.replace(temporary, path)
    return True


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["collect"])
    parser.add_argument("--write", metavar="PATH", help="keep the passport there (if it changed)")
    args = parser.parse_args(argv)
    doc = collect()
    for line in gpu_links.problems(doc):
        print(line)
    if not args.write:
        return result.emit(status.READY, passport=doc, path=None, written=False)
    try:
        written = write(doc, args.write)
    except OSError as exc:
        cause = "could not write %s: %s" % (args.write, exc.strerror or exc)
        return result.emit(status.UNEXPECTED, cause, passport=doc, path=args.write, written=False)
    print("passport %s %s" % ("written to" if written else "unchanged in", args.write))
    return result.emit(status.READY, passport=doc, path=args.write, written=written)


if __name__ == "__main__":
    sys.exit(main())
