"""GPU and PCIe health parsers on captured real command output (tests/unit/captured/, sources
in each file's header)."""

from pathlib import Path

import pytest

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


def test_a_missing_tool_is_never_ok():
    checks = [gh.gpus_check(None), gh.topology_check(None), gh.acs_check(None), gh.iommu_check(None, None)]
    assert [c.state for c in checks] == [
        "not checked (nvidia-smi missing)",
        "not checked (nvidia-smi missing)",
        "not checked (lspci missing)",
        "not checked (/proc/cmdline and /sys/class/iommu missing)",
    ]
    assert not any(c.ok for c in checks)


# ------------------------------------------------------------------------------------------ GPUs


def test_parse_gpus_real_h200():
    assert gh.parse_gpus(captured("query_gpu_h200.csv")) == [gh.Gpu(0, "NVIDIA H200", 143771, "580.159.04")]
    assert (
        gh.gpus_check(captured("query_gpu_h200.csv")).line()
        == "gpus: ok - 1 x NVIDIA H200, driver 580.159.04"
    )
    assert gh.gpus_check(captured("query_gpu_h200.csv"), expected_count=8).state == "failed"


def test_parse_gpus_several_and_odd_values():
    text = (
        "0, NVIDIA RTX PRO 6000 Blackwell Server Edition, 97887, 580.95.05\n"
        "1, NVIDIA RTX PRO 6000 Blackwell Server Edition, [N/A], 580.95.05\n\n"
    )
    gpus = gh.parse_gpus(text)
    assert [g.index for g in gpus] == [0, 1] and gpus[1].memory_mib is None
    assert gh.parse_gpus("No devices were found\n") == []
    assert gh.gpus_check("No devices were found\n").line() == "gpus: failed - no GPU found"
    with pytest.raises(ParseError):
        gh.parse_gpus("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")
    assert gh.gpus_check("0, H200\n").state == "failed"


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


@pytest.mark.parametrize(
    "name, kind, pairs, links",
    [
        ("topo_pcie_4x_t4_sys_node.txt", "pcie", 6, {"SYS", "NODE"}),
        ("topo_pcie_4x_pxb_pix.txt", "pcie", 6, {"PXB", "PIX", "SYS"}),
        ("topo_pcie_8x_4090_sys.txt", "pcie", 28, {"SYS"}),
        ("topo_pcie_2x_5090_phb.txt", "pcie", 1, {"PHB"}),
        ("topo_nvlink_8x_h100_nv18.txt", "nvlink", 28, {"NV18"}),
        ("topo_mixed_8x_v100_dgx1.txt", "mixed", 28, {"NV1", "NV2", "SYS"}),
        ("topo_h200_one_gpu.txt", "none", 0, set()),
    ],
)
def test_topology_captures(name, kind, pairs, links):
    matrix = gh.parse_topology(captured(name))
    assert len(matrix) == pairs and set(matrix.values()) == links
    assert all(a < b for a, b in matrix)
    assert gh.link_kind(matrix) == kind


def test_topology_pairs():
    pxb = gh.parse_topology(captured("topo_pcie_4x_pxb_pix.txt"))
    assert pxb == {(0, 1): "PXB", (0, 2): "SYS", (0, 3): "SYS", (1, 2): "SYS", (1, 3): "SYS", (2, 3): "PIX"}
    dgx1 = gh.parse_topology(captured("topo_mixed_8x_v100_dgx1.txt"))
    assert (dgx1[(0, 1)], dgx1[(0, 3)], dgx1[(0, 5)], dgx1[(3, 7)], dgx1[(6, 7)]) == (
        "NV2",
        "NV1",
        "SYS",
        "NV2",
        "NV1",
    )
    # the NIC columns (mlx5_*, NIC#) are not GPU pairs
    h100 = gh.parse_topology(captured("topo_nvlink_8x_h100_nv18.txt"))
    assert set(h100) == {(a, b) for a in range(8) for b in range(a + 1, 8)}


def test_topology_without_leading_whitespace_and_errors():
    # vLLM's collect_env prints the matrix with the header's leading whitespace stripped
    text = "GPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV4\t0-31\nGPU1\tNV4\t X \t0-31\n"
    assert gh.parse_topology(text) == {(0, 1): "NV4"}
    with pytest.raises(ParseError):
        gh.parse_topology("GPU0\tGPU1\nGPU0\t X \tWAT\nGPU1\tWAT\t X \n")
    with pytest.raises(ParseError):
        gh.parse_topology("Failed to initialize NVML: Driver/library version mismatch\n")
    assert gh.topology_check("garbage\n").state == "failed"


def test_topology_warnings():
    assert gh.topology_warnings("pcie", pcie_tuned=True) == []
    assert gh.topology_warnings("nvlink", pcie_tuned=False) == []
    assert gh.topology_warnings("none") == []
    [w] = gh.topology_warnings("nvlink", pcie_tuned=True)
    assert "NVLink" in w and "tuned for PCIe" in w
    [w] = gh.topology_warnings("pcie", pcie_tuned=False)
    assert "PCIe-only" in w
    assert gh.topology_warnings("mixed", pcie_tuned=True)
    check = gh.topology_check(captured("topo_nvlink_8x_h100_nv18.txt"), pcie_tuned_profile=True)
    assert check.state == "warning" and check.detail.startswith("nvlink: ")
    assert gh.topology_check(captured("topo_pcie_8x_4090_sys.txt")).line() == "gpu topology: ok - pcie"


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


def test_acs_enabled_on_a_real_bridge():
    [bridge] = gh.parse_acs(captured("lspci_vvv_amd_matisse_acs_on.txt"))
    assert bridge.address == "03:02.0" and bridge.is_bridge and bridge.enabled
    assert bridge.description.startswith(
        "PCI bridge: Advanced Micro Devices, Inc. [AMD] Matisse PCIe GPP Bridge"
    )
    assert bridge.flags == {
        "SrcValid": True,
        "TransBlk": False,
        "ReqRedir": True,
        "CmpltRedir": True,
        "UpstreamFwd": True,
        "EgressCtrl": False,
        "DirectTrans": False,
    }
    check = gh.acs_check(captured("lspci_vvv_amd_matisse_acs_on.txt"))
    assert check.state == "warning" and "on 1 device: 03:02.0" in check.detail


def test_acs_grep_output_has_no_addresses():
    text = captured("lspci_acsctl_grep_nccl606.txt")
    controls = gh.parse_acs_controls(text)
    assert len(controls) == 9 and all(c.address is None for c in controls)
    assert [c.enabled for c in controls] == [True, True, False, False, False, False, False, True, True]
    assert len(gh.parse_acs(text)) == 4
    assert "device addresses not in the output" in gh.acs_check(text).detail


def test_acs_disabled_hidden_or_absent():
    disabled = "\n".join(
        line for line in captured("lspci_acsctl_grep_nccl606.txt").splitlines() if "SrcValid-" in line
    )
    assert gh.parse_acs(disabled) == []
    assert gh.acs_check(disabled).line() == "pcie acs: ok - ACS disabled on 5 devices"
    hidden = captured("lspci_vvv_access_denied.txt")
    assert gh.parse_acs(hidden) == [] and gh.capabilities_hidden(hidden)
    assert gh.acs_check(hidden).state == "warning"  # could not look: not ok
    assert gh.acs_check("").line() == "pcie acs: ok - no device exposes ACS controls"
    both = captured("lspci_vvv_access_denied.txt") + "\n" + captured("lspci_vvv_amd_matisse_acs_on.txt")
    assert [c.address for c in gh.parse_acs(both)] == ["03:02.0"]


# ------------------------------------------------------------------------------------------ IOMMU


def test_iommu_real_vm_without_iommu():
    cmdline = captured("cmdline_h200.txt")
    assert gh.iommu_state(cmdline, captured("sys_class_iommu_h200.txt")) == "off"
    assert gh.iommu_state(cmdline, None) == "unknown"
    # that VM's dmesg says "iommu: Default domain type: Translated" although no IOMMU is registered
    assert gh.iommu_state(cmdline, "[    0.128648] iommu: Default domain type: Translated\n") == "unknown"
    assert gh.iommu_check(cmdline, captured("sys_class_iommu_h200.txt")).line() == "iommu: ok - off"
    assert gh.iommu_check(cmdline, None).state == "warning"


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


def test_iommu_check_passthrough():
    assert (
        gh.iommu_check("intel_iommu=on iommu=pt", "dmar0\n").line()
        == "iommu: ok - on, passthrough (iommu=pt)"
    )
    check = gh.iommu_check("intel_iommu=on", "dmar0\n")
    assert check.state == "warning" and "iommu=pt" in check.detail
