"""Clear PCIe Access Control Services (ACS) on every PCI bridge, so GPUs talk peer to peer.

    python3 acs.py disable      # as root; run at every boot by the sglang-disable-acs unit

With ACS on, a bridge redirects GPU peer-to-peer traffic up to the root complex: NCCL's P2P is
slow or hangs (NCCL's troubleshooting guide, "PCI Access Control Services (ACS)"). Its recipe,
for each PCI bridge: `setpci -s BDF ECAP_ACS+0x6.w=0000` (the ACS control register), skipping
bridges without an ACS capability (reading the register fails). The register is reset at every
boot, hence a boot-time unit. Bridges are PCI class 0604 in `lspci -D -n`. A node with no PCI
bridge (a VM, a container) has nothing to clear: it says so and succeeds. Then the result line
(result.py).
"""

import argparse
import re
import shutil
import subprocess
import sys

if __package__:
    from .lib import result, status
else:  # run as a script: our scripts' directory is on sys.path
    from lib import result, status

PCI_BRIDGE_CLASS = "0604"
ACS_CONTROL = "ECAP_ACS+0x6.w"
CLEAR = "0000"
# The ACS control register's bits, lowest first, as `lspci -vvv` names them on its ACSCtl line.
FLAGS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")
# `lspci -D -n`: "0000:00:01.0 0604: 8086:3341 (rev 03)" (domain:bus:device.function class: ids)
_LINE = re.compile(r"^([0-9a-fA-F]{4,}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+([0-9a-fA-F]{4}):")


def bridges(lspci_text):
    """The addresses of the PCI bridges in `lspci -D -n` output, in its order."""
    found = []
    for line in lspci_text.splitlines():
        match = _LINE.match(line.strip())
        if match and match.group(2).lower() == PCI_BRIDGE_CLASS:
            found.append(match.group(1))
    return found


def _setpci(*args):
    done = subprocess.run(["setpci", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return done.returncode, (done.stdout or done.stderr).strip()


def control(bdf, setpci=_setpci):
    """A bridge's ACS control register as setpci prints it ("0000": clear), or None when the
    bridge has no ACS capability (reading it fails)."""
    code, value = setpci("-s", bdf, ACS_CONTROL)
    return value if code == 0 else None


def is_clear(value):
    """Whether a control register as setpci prints it ("0000") has every ACS control off: the
    one rule for "ACS is on" (this unit clears what is not, the passport's readers judge by it)."""
    return value.lower() == CLEAR


def flags(value):
    """{flag: on} of a control register as setpci prints it: "001d" -> SrcValid, ReqRedir,
    CmpltRedir and UpstreamFwd on (lspci's `ACSCtl: SrcValid+ TransBlk- ReqRedir+ ...`)."""
    bits = int(value, 16)
    return {name: bool(bits & (1 << i)) for i, name in enumerate(FLAGS)}


def clear(bdf, setpci=_setpci):
    """(verdict, text) for one bridge: "cleared", "clear" (already), "no-acs" or "failed"."""
    value = control(bdf, setpci)
    if value is None:
        return "no-acs", "%s: no ACS capability" % bdf
    if is_clear(value):
        return "clear", "%s: ACS already clear" % bdf
    code, out = setpci("-s", bdf, ACS_CONTROL + "=" + CLEAR)
    if code != 0:
        return "failed", "%s: setpci failed (ACS control %s): %s" % (bdf, value, out)
    code, after = setpci("-s", bdf, ACS_CONTROL)
    if code != 0 or not is_clear(after):
        return "failed", "%s: ACS control still %s after writing 0000" % (bdf, after)
    return "cleared", "%s: ACS cleared (was %s)" % (bdf, value)


def disable(lspci_text, setpci=_setpci):
    """Clear ACS on every bridge of the listing; returns the exit status (and prints)."""
    found = bridges(lspci_text)
    if not found:
        print("no PCI bridges: nothing to clear")
        return result.emit(status.READY, bridges=[])
    outcomes = [(bdf,) + clear(bdf, setpci) for bdf in found]
    for _, _, text in outcomes:
        print(text)
    failed = [text for _, verdict, text in outcomes if verdict == "failed"]
    return result.emit(
        status.ACS_NOT_CLEARED if failed else status.READY,
        "; ".join(failed) or None,
        bridges=[{"bdf": bdf, "verdict": verdict} for bdf, verdict, _ in outcomes],
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["disable"])
    parser.parse_args(argv)
    missing = [tool for tool in ("lspci", "setpci") if shutil.which(tool) is None]
    if missing:
        return result.emit(
            status.ACS_NOT_CLEARED, "%s not found (Debian package pciutils)" % " and ".join(missing)
        )
    listing = subprocess.run(["lspci", "-D", "-n"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if listing.returncode != 0:
        return result.emit(status.ACS_NOT_CLEARED, "lspci -D -n failed: %s" % listing.stderr.strip())
    return disable(listing.stdout)


if __name__ == "__main__":
    sys.exit(main())
