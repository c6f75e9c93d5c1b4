"""GPU and PCIe health judged from a hardware passport, its parts read from captured real command
output (tests/unit/captured/, sources in each file's header); the nvidia-smi CSV parsers."""

import re
from pathlib import Path

import pytest

from sglang_deploy.node import acs
from sglang_deploy.node import passport as node_passport
from sglang_deploy.node.lib import gpu_topology
from sglang_deploy.verify import gpu_health as gh
from sglang_deploy.verify.gpu_health import Check, ParseError

CAPTURED = Path(__file__).parent / "captured"


def captured(name):
    """A captured file's text, without the '# ' provenance header."""
    return "".join(
        line for line in (CAPTURED / name).read_text().splitlines(True) if not line.startswith("# ")
    )


def test_every_captured_file_names_its_source():
    for path in CAPTURED.iterdir():
        if path.suffix in (".txt", ".csv", ".log"):
            first = path.read_text().splitlines()[0]
            assert (
                first.startswith("# Source: http")
                or first.startswith("# Source: shared/")
                or first.startswith("# Captured with capture_on_gpu_node.sh")
                or first.startswith("# Captured with capture_torch_rendezvous.sh")
                or first.startswith("# Captured with capture_sglang_metrics.py")
                or first.startswith("# Captured with capture_smg_metrics.py")
                or first.startswith("# Captured on the sandbox host")
            ), path.name


# ------------------------------------------------------------------------------------------ Check


def test_check_states():
    assert Check("x", "ok").ok
    for state in ("warning", "failed"):
        assert not Check("x", state).ok and Check("x", state).checked
    missing = Check.not_checked("gpus", "nvidia-smi")
    assert missing.state == "not checked (nvidia-smi missing)"
    assert not missing.ok and not missing.checked
    assert missing.line() == "gpus: not checked (nvidia-smi missing)"
    assert Check("gpus", "failed", "no GPU found").line() == "gpus: failed - no GPU found"
    with pytest.raises(ValueError):
        Check("x", "fine")
    with pytest.raises(ValueError):
        Check("x", "not checked")


def unread(why):
    return {"not_checked": why}


def passport(**parts):
    """A passport as node/passport.py collects it on a sandbox node, with ``parts`` instead."""
    found = {
        "gpus": unread("nvidia-smi not found"),
        "driver_version": unread("nvidia-smi not found"),
        "topology": unread("nvidia-smi not found"),
        "acs": unread("lspci not found (Debian package pciutils)"),
        "iommu": {
            "sysfs": unread("/sys/class/iommu: No such file"),
            "cmdline": unread("/proc/cmdline: gone"),
        },
    }
    return {**found, **parts}


def topology(name):
    return {"links": gpu_topology.as_links(gpu_topology.parse(captured(name)))}


def test_a_missing_tool_is_never_ok():
    found = passport()
    checks = [gh.gpus_check(found), gh.topology_check(found), gh.acs_check(found), gh.iommu_check(found)]
    assert [c.state for c in checks] == [
        "not checked (nvidia-smi missing)",
        "not checked (nvidia-smi missing)",
        "not checked (lspci missing)",
        "not checked (/proc/cmdline and /sys/class/iommu missing)",
    ]
    assert not any(c.ok for c in checks)
    setpci = gh.acs_check(passport(acs=unread("setpci not found (Debian package pciutils)")))
    assert setpci.state == "not checked (setpci missing)"


def test_a_part_an_older_passport_py_does_not_collect_is_not_ok():
    found = gh.topology_check({"gpus": []})
    assert found.line() == "gpu topology: failed - the node's passport.py collects no topology: deploy"


# ------------------------------------------------------------------------------------------ GPUs


H200 = {"name": "NVIDIA H200", "index": 0, "bus_id": "00000000:00:06.0"}


def test_gpus_of_a_real_h200_passport():
    found = passport(gpus=[H200], driver_version="580.159.04")
    assert gh.gpus_check(found).line() == "gpus: ok - 1 x NVIDIA H200, driver 580.159.04"
    assert gh.gpus_check(found, expected_count=8).state == "failed"


def test_no_gpu_or_a_failing_nvidia_smi_fails():
    assert gh.gpus_check(passport(gpus=[])).line() == "gpus: failed - no GPU found"
    failing = "nvidia-smi -q exited 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    assert gh.gpus_check(passport(gpus=unread(failing))).line() == f"gpus: failed - {failing}"
    several = [dict(H200, index=i, name="NVIDIA RTX PRO 6000 Blackwell Server Edition") for i in range(2)]
    found = gh.gpus_check(passport(gpus=several, driver_version="580.95.05"))
    assert found.detail == "2 x NVIDIA RTX PRO 6000 Blackwell Server Edition, driver 580.95.05"


def test_parse_gpus_real_h200():
    assert gh.parse_gpus(captured("query_gpu_h200.csv")) == [gh.Gpu(0, "NVIDIA H200", 143771, "580.159.04")]


def test_parse_gpus_several_and_odd_values():
    text = (
        "0, NVIDIA RTX PRO 6000 Blackwell Server Edition, 97887, 580.95.05\n"
        "1, NVIDIA RTX PRO 6000 Blackwell Server Edition, [N/A], 580.95.05\n\n"
    )
    gpus = gh.parse_gpus(text)
    assert [g.index for g in gpus] == [0, 1] and gpus[1].memory_mib is None
    assert gh.parse_gpus("No devices were found\n") == []
    with pytest.raises(ParseError):
        gh.parse_gpus("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")
    with pytest.raises(ParseError):
        gh.parse_gpus("0, H200\n")


def test_parse_compute_apps_real_h200():
    assert gh.parse_compute_apps(captured("compute_apps_h200_idle.csv")) == []
    assert gh.parse_compute_apps(captured("compute_apps_h200_busy.csv")) == [gh.ComputeApp(508, 2566)]
    assert gh.parse_compute_apps(captured("compute_apps_h200_busy_units.csv")) == [gh.ComputeApp(508, 2566)]


def test_parse_compute_apps_other_shapes():
    assert gh.parse_compute_apps("No running processes found\n") == []
    assert gh.parse_compute_apps("1234, [N/A]\n5678, 81000\n") == [
        gh.ComputeApp(1234, None),
        gh.ComputeApp(5678, 81000),
    ]
    with pytest.raises(ParseError):
        gh.parse_compute_apps("[N/A], 10\n")


# ------------------------------------------------------------------------------------------ topology


def test_topology_warnings():
    assert gh.topology_warnings("pcie", pcie_tuned=True) == []
    assert gh.topology_warnings("nvlink", pcie_tuned=False) == []
    assert gh.topology_warnings("none") == []
    [w] = gh.topology_warnings("nvlink", pcie_tuned=True)
    assert "NVLink" in w and "tuned for PCIe" in w
    [w] = gh.topology_warnings("pcie", pcie_tuned=False)
    assert "PCIe-only" in w
    assert gh.topology_warnings("mixed", pcie_tuned=True)
    check = gh.topology_check(
        passport(topology=topology("topo_nvlink_8x_h100_nv18.txt")), pcie_tuned_profile=True
    )
    assert check.state == "warning" and check.detail.startswith("nvlink: ")
    found = passport(topology=topology("topo_pcie_8x_4090_sys.txt"))
    assert gh.topology_check(found).line() == "gpu topology: ok - pcie"


def test_a_topology_nvidia_smi_could_not_give_fails_saying_why():
    why = "topo -m: no header line with GPU0"
    assert gh.topology_check(passport(topology=unread(why))).line() == f"gpu topology: failed - {why}"


def test_is_pcie_tuned():
    incident = {
        "NCCL_PROTO": "LL",
        "NCCL_ALGO": "Ring",
        "NCCL_P2P_LEVEL": "SYS",
        "NCCL_MAX_NCHANNELS": "16",
        "NCCL_BUFFSIZE": "16777216",
        "NCCL_NTHREADS": "512",
    }
    assert gh.is_pcie_tuned(incident)
    assert gh.is_pcie_tuned({"NCCL_P2P_LEVEL": "PHB"})
    assert not gh.is_pcie_tuned({"NCCL_P2P_LEVEL": "NVL"})
    assert not gh.is_pcie_tuned({"NCCL_CUMEM_ENABLE": "0"})


# ------------------------------------------------------------------------------------------ ACS


def acs_bridges(*controls):
    return {"bridges": [{"bdf": f"0000:03:0{i}.0", "control": c} for i, c in enumerate(controls)]}


def lspci_flags(line):
    """{flag: on} of an `ACSCtl:` line of lspci -vvv."""
    return {name: sign == "+" for name, sign in re.findall(r"([A-Za-z]+)([+-])", line.split("ACSCtl:")[1])}


def test_lspci_names_the_control_registers_bits_in_their_order():
    lines = [line for line in captured("lspci_acsctl_grep_nccl606.txt").splitlines() if "ACSCtl:" in line]
    lines += [line for line in captured("lspci_vvv_amd_matisse_acs_on.txt").splitlines() if "ACSCtl:" in line]
    assert len(lines) == 10
    for line in lines:
        flags = lspci_flags(line)
        assert tuple(flags) == acs.FLAGS
        register = "%04x" % sum(1 << i for i, on in enumerate(flags.values()) if on)
        assert acs.flags(register) == flags


def test_acs_enabled_on_a_real_bridge():
    matisse = next(
        line for line in captured("lspci_vvv_amd_matisse_acs_on.txt").splitlines() if "ACSCtl:" in line
    )
    assert acs.flags("001d") == lspci_flags(matisse)
    assert acs.flags("001d") == {
        "SrcValid": True,
        "TransBlk": False,
        "ReqRedir": True,
        "CmpltRedir": True,
        "UpstreamFwd": True,
        "EgressCtrl": False,
        "DirectTrans": False,
    }
    check = gh.acs_check(passport(acs={"bridges": [{"bdf": "0000:03:02.0", "control": "001d"}]}))
    assert check.state == "warning" and "on 1 device: 0000:03:02.0" in check.detail
    assert (
        "(ACSCtl SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-)"
        in check.detail
    )
    several = gh.acs_check(passport(acs=acs_bridges("0001", "0000", None, "0011")))
    assert several.state == "warning" and "on 2 devices: 0000:03:00.0 (ACSCtl SrcValid+" in several.detail


def test_acs_disabled_unreadable_or_absent():
    assert gh.acs_check(passport(acs=acs_bridges("0000", "0000", None))).line() == (
        "pcie acs: ok - ACS disabled on 2 devices"
    )
    not_root = gh.acs_check(passport(acs=unread("not root: setpci cannot read the bridges' ACS registers")))
    assert not_root.line() == "pcie acs: warning - not root: setpci cannot read the bridges' ACS registers"
    assert (
        gh.acs_check(passport(acs={"bridges": []})).line() == "pcie acs: ok - no device exposes ACS controls"
    )
    assert (
        gh.acs_check(passport(acs=acs_bridges(None))).line()
        == "pcie acs: ok - no device exposes ACS controls"
    )


# ------------------------------------------------------------------------------------------ IOMMU


def iommu(tmp_path, cmdline, listing):
    """A passport's IOMMU part, read by node/passport.py from this /proc/cmdline and
    /sys/class/iommu (None: not there)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "cmdline").write_text(cmdline)
    if listing is not None:
        (tmp_path / "iommu").mkdir(exist_ok=True)
        for name in listing.split():
            (tmp_path / "iommu" / name).mkdir()
    found = node_passport.iommu(str(tmp_path / "iommu"), str(tmp_path / "cmdline"))
    return passport(iommu=found)


def test_iommu_real_vm_without_iommu(tmp_path):
    cmdline = captured("cmdline_h200.txt")
    assert gh.iommu_state(cmdline, captured("sys_class_iommu_h200.txt")) == "off"
    assert gh.iommu_state(cmdline, None) == "unknown"
    # that VM's dmesg says "iommu: Default domain type: Translated" although no IOMMU is registered
    assert gh.iommu_state(cmdline, "[    0.128648] iommu: Default domain type: Translated\n") == "unknown"
    found = iommu(tmp_path / "a", cmdline, captured("sys_class_iommu_h200.txt"))
    assert gh.iommu_check(found).line() == "iommu: ok - off"
    assert gh.iommu_check(iommu(tmp_path / "b", cmdline, None)).state == "warning"


@pytest.mark.parametrize(
    "cmdline, listing, state",
    [
        ("BOOT_IMAGE=/vmlinuz root=/dev/sda1 intel_iommu=on", None, "on"),
        ("BOOT_IMAGE=/vmlinuz intel_iommu=on iommu=pt", None, "on"),
        ("BOOT_IMAGE=/vmlinuz amd_iommu=off", None, "off"),
        ("BOOT_IMAGE=/vmlinuz iommu=off", None, "off"),
        ("BOOT_IMAGE=/vmlinuz quiet", None, "unknown"),
        ("BOOT_IMAGE=/vmlinuz quiet", "dmar0\ndmar1\n", "on"),
        ("BOOT_IMAGE=/vmlinuz quiet", "ivhd0\n", "on"),
        (
            "BOOT_IMAGE=/vmlinuz intel_iommu=on",
            "",
            "off",
        ),  # asked for, but nothing registered (VT-d off in BIOS)
        ("quiet", "[    0.0] DMAR: IOMMU enabled\n", "on"),
        ("quiet", "[    1.2] pci 0000:00:00.0: Adding to iommu group 0\n", "on"),
        ("quiet", "[    0.5] AMD-Vi: Interrupt remapping enabled\n", "on"),
        ("quiet -- intel_iommu=on", None, "unknown"),  # after '--' the words are init's, not the kernel's
    ],
)
def test_iommu_state(cmdline, listing, state):
    assert gh.iommu_state(cmdline, listing) == state


def test_iommu_check_passthrough(tmp_path):
    assert gh.iommu_check(iommu(tmp_path / "a", "intel_iommu=on iommu=pt", "dmar0\n")).line() == (
        "iommu: ok - on, passthrough (iommu=pt)"
    )
    check = gh.iommu_check(iommu(tmp_path / "b", "intel_iommu=on", "dmar0\n"))
    assert check.state == "warning" and "iommu=pt" in check.detail
