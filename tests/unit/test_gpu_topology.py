"""node/lib/gpu_topology.py: `nvidia-smi topo -m` on captured real output (tests/unit/captured/,
sources in each file's header), as the hardware passport keeps it."""

import pytest

from sglang_deploy.node import passport
from sglang_deploy.node.lib import gpu_topology
from tests.unit.test_gpu_health import captured


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
    matrix = gpu_topology.parse(captured(name))
    assert len(matrix) == pairs and set(matrix.values()) == links
    assert all(a < b for a, b in matrix)
    assert gpu_topology.link_kind(matrix) == kind
    assert gpu_topology.matrix(gpu_topology.as_links(matrix)) == matrix


def test_topology_pairs():
    pxb = gpu_topology.parse(captured("topo_pcie_4x_pxb_pix.txt"))
    assert pxb == {(0, 1): "PXB", (0, 2): "SYS", (0, 3): "SYS", (1, 2): "SYS", (1, 3): "SYS", (2, 3): "PIX"}
    assert gpu_topology.as_links(pxb) == {
        "0-1": "PXB",
        "0-2": "SYS",
        "0-3": "SYS",
        "1-2": "SYS",
        "1-3": "SYS",
        "2-3": "PIX",
    }
    dgx1 = gpu_topology.parse(captured("topo_mixed_8x_v100_dgx1.txt"))
    assert (dgx1[(0, 1)], dgx1[(0, 3)], dgx1[(0, 5)], dgx1[(3, 7)], dgx1[(6, 7)]) == (
        "NV2",
        "NV1",
        "SYS",
        "NV2",
        "NV1",
    )
    # the NIC columns (mlx5_*, NIC#) are not GPU pairs
    h100 = gpu_topology.parse(captured("topo_nvlink_8x_h100_nv18.txt"))
    assert set(h100) == {(a, b) for a in range(8) for b in range(a + 1, 8)}


def test_topology_without_leading_whitespace_and_errors():
    # vLLM's collect_env prints the matrix with the header's leading whitespace stripped
    text = "GPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV4\t0-31\nGPU1\tNV4\t X \t0-31\n"
    assert gpu_topology.parse(text) == {(0, 1): "NV4"}
    with pytest.raises(gpu_topology.Unparsed):
        gpu_topology.parse("GPU0\tGPU1\nGPU0\t X \tWAT\nGPU1\tWAT\t X \n")
    with pytest.raises(gpu_topology.Unparsed):
        gpu_topology.parse("Failed to initialize NVML: Driver/library version mismatch\n")


def test_the_passport_keeps_the_links_or_why_it_has_none():
    def tools(found):
        return lambda argv: found if argv[:3] == ["nvidia-smi", "topo", "-m"] else None

    nv18 = passport.topology(tools((0, captured("topo_nvlink_8x_h100_nv18.txt"), "")))
    assert len(nv18["links"]) == 28 and set(nv18["links"].values()) == {"NV18"}
    assert passport.topology(tools(None)) == {"not_checked": "nvidia-smi not found"}
    assert passport.topology(tools((0, "garbage\n", ""))) == {
        "not_checked": "topo -m: no header line with GPU0"
    }
    mismatch = "Failed to initialize NVML: Driver/library version mismatch"
    failed = passport.topology(tools((9, "", mismatch)))
    assert failed == {"not_checked": f"nvidia-smi topo -m exited 9: {mismatch}"}
