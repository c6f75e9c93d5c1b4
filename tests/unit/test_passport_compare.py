"""Hardware passports on the controller: peers of a GPU model compared (verify/passport_compare.py),
the controller's copies and `make status`'s view (report/passports.py), the verify check, the
deploy's step and its fact. Every passport is the real H200 capture collected by passport.py,
varied where a fleet would differ (a riser at x8, another driver, ACS left on)."""

import json

import pytest
from pyinfra.context import ctx_host, ctx_state

from sglang_deploy import operations
from sglang_deploy.facts.passport import HardwarePassport
from sglang_deploy.node import passport as node_passport
from sglang_deploy.node.lib import result
from sglang_deploy.report import passports
from sglang_deploy.verify import checks, passport_checks
from sglang_deploy.verify import passport_compare as compare
from sglang_deploy.verify.verdict import FAILED, OK, WARNING
from tests.unit.test_checks import File, Node
from tests.unit.test_gpu_health import captured
from tests.unit.test_node_passport import SMI_Q, Tools, eight_gpus, with_link
from tests.unit.test_operations import PLAN, FakeHost

LSPCI = captured("lspci_Dn_intel_bridges.txt")


def collected(q_text=None, hostname="node", driver=None, acs="0000", iommu_dir=None, tmp=None, xid_log=""):
    """passport.py's document for a node answering ``q_text`` (default: the H200 capture)."""
    q_text = q_text if q_text is not None else captured(SMI_Q)
    if driver:
        q_text = q_text.replace("580.159.04", driver)

    def setpci(argv):
        return (0, "setpci 3.9", "") if argv[1] == "--version" else (0, acs + "\n", "")

    tools = Tools(
        nvidia_smi=(0, q_text, "") if q_text else None,
        lspci=(0, LSPCI, ""),
        setpci=setpci,
        dmesg=(0, "[0.0] Linux version 6.1\n" + xid_log, ""),
    )
    doc = node_passport.collect(
        tools,
        devices=str(tmp / "no-sysfs"),
        iommu_dir=str(iommu_dir or tmp / "no-iommu"),
        cmdline=str(tmp / "no-cmdline"),
        is_root=True,
    )
    doc["hostname"] = hostname
    return doc


@pytest.fixture
def fleet(tmp_path):
    """Four H200 nodes collected from the capture; node3 with its GPU at x8."""
    return {
        "node1": collected(hostname="node1", tmp=tmp_path),
        "node2": collected(hostname="node2", tmp=tmp_path),
        "node3": collected(with_link(width=8), hostname="node3", tmp=tmp_path),
        "node4": collected(hostname="node4", tmp=tmp_path),
    }


def texts(found):
    return {host: [d.text() for d in differences] for host, differences in found.items()}


def test_identical_peers_differ_in_nothing(tmp_path):
    fleet = {f"node{i}": collected(hostname=f"node{i}", tmp=tmp_path) for i in range(3)}
    assert texts(compare.peer_differences(fleet)) == {"node0": [], "node1": [], "node2": []}


def test_the_node_with_a_narrower_link_is_flagged_with_the_difference(fleet):
    assert texts(compare.peer_differences(fleet)) == {
        "node1": [],
        "node2": [],
        "node3": ["gpu 0 pcie width_current 8 (peers: 16 on 3 of 4)"],
        "node4": [],
    }


def test_driver_cuda_count_acs_are_compared(tmp_path):
    fleet = {
        "a": collected(hostname="a", tmp=tmp_path),
        "b": collected(hostname="b", tmp=tmp_path),
        "c": collected(eight_gpus(), hostname="c", driver="575.57.08", acs="001d", tmp=tmp_path),
    }
    found = texts(compare.peer_differences(fleet))["c"]
    assert found[:4] == [
        "gpu count 8 (peers: 1 on 2 of 3)",
        "driver 575.57.08 (peers: 580.159.04 on 2 of 3)",
        "acs on (peers: off on 2 of 3)",
        "gpu 1 pcie gen_current 5 (peers: absent on 2 of 3)",
    ]
    assert texts(compare.peer_differences(fleet))["a"] == []


def test_two_peers_that_disagree_are_both_flagged(tmp_path):
    fleet = {
        "a": collected(hostname="a", tmp=tmp_path),
        "b": collected(hostname="b", driver="575.57.08", tmp=tmp_path),
    }
    found = texts(compare.peer_differences(fleet))
    assert found["a"] == ["driver 580.159.04 (peers disagree: 580.159.04 on 1, 575.57.08 on 1)"]
    assert found["b"] == ["driver 575.57.08 (peers disagree: 580.159.04 on 1, 575.57.08 on 1)"]


def test_another_gpu_model_is_not_a_peer(tmp_path):
    h100 = captured(SMI_Q).replace("NVIDIA H200", "NVIDIA H100 PCIe")
    fleet = {
        "h200": collected(hostname="h200", tmp=tmp_path),
        "h100": collected(
            with_link(gen=4).replace("NVIDIA H200", "NVIDIA H100 PCIe"), hostname="h100", tmp=tmp_path
        ),
        "h100b": collected(h100, hostname="h100b", tmp=tmp_path),
    }
    assert compare.model_of(fleet["h100"]) == "NVIDIA H100 PCIe"
    found = texts(compare.peer_differences(fleet))
    assert found["h200"] == []  # alone with its model
    assert found["h100"] == ["gpu 0 pcie gen_current 4 (peers disagree: 4 on 1, 5 on 1)"]


def test_nodes_without_gpus_are_compared_with_no_one(tmp_path):
    fleet = {name: collected("", hostname=name, tmp=tmp_path) for name in ("s1", "s2")}
    fleet["s2"]["acs"] = {"bridges": [{"bdf": "0000:00:01.0", "control": "001d"}]}
    assert compare.model_of(fleet["s1"]) is None
    assert texts(compare.peer_differences(fleet)) == {"s1": [], "s2": []}


def test_a_degraded_link_fails_without_any_peer(tmp_path):
    failures, warnings = compare.own_findings(collected(with_link(gen=3), tmp=tmp_path))
    assert failures == ["GPU 0 (00000000:00:06.0): PCIe link at Gen3 of Gen5 (nvidia-smi)"]
    assert warnings == []


def test_hardware_error_signs_are_warnings(tmp_path):
    text = captured(SMI_Q).replace(
        "        Pending                                        : No",
        "        Pending                                        : Yes",
    )
    text = text.replace(
        "            HW Thermal Slowdown                        : Not Active",
        "            HW Thermal Slowdown                        : Active",
    )
    xid_line = "[9.9] NVRM: Xid (PCI:0000:00:06): 79, pid=1234, name=python3, GPU has fallen off the bus.\n"
    failures, warnings = compare.own_findings(collected(text, xid_log=xid_line, tmp=tmp_path))
    assert failures == []
    assert warnings == [
        "1 Xid event(s) this boot (Xid 79 ×1): NVRM: Xid (PCI:0000:00:06): 79, pid=1234, name=python3, "
        "GPU has fallen off the bus.",
        "GPU 0: rows pending remapping (reset the GPU)",
        "GPU 0: clocks held back by HW Thermal Slowdown",
    ]


def test_iommu_read_as_verify_reads_it(tmp_path):
    (tmp_path / "iommu").mkdir()
    assert compare.iommu(collected(tmp=tmp_path, iommu_dir=tmp_path / "iommu")) == "off"
    (tmp_path / "iommu" / "dmar0").mkdir()
    assert compare.iommu(collected(tmp=tmp_path, iommu_dir=tmp_path / "iommu")) == "on"
    assert compare.iommu(collected(tmp=tmp_path)) == "not checked"


def test_summary_of_the_capture(tmp_path):
    assert compare.summary(collected(tmp=tmp_path)) == (
        "1 × NVIDIA H200, driver 580.159.04, CUDA 13.0; PCIe Gen5 x16 (max Gen5 x16); ACS off; "
        "IOMMU not checked; no Xid"
    )
    assert compare.summary(collected(eight_gpus(), tmp=tmp_path)).startswith(
        "8 × NVIDIA H200, driver 580.159.04, CUDA 13.0; PCIe 8 × Gen5 x16 (max Gen5 x16)"
    )
    assert compare.summary(collected("", tmp=tmp_path)).startswith("GPUs not checked: nvidia-smi not found;")


# ---------------------------------------------------------------------------------- the copies


def test_copies_round_trip_into_the_fleet_status(fleet, tmp_path):
    reports = tmp_path / "reports"
    for host, doc in fleet.items():
        passports.record(host, doc, reports)
    (reports / "torn.json").write_text("{")
    assert sorted(passports.read_all(reports)) == ["node1", "node2", "node3", "node4"]
    status = passports.fleet_status(reports)
    node3 = status["hosts"]["node3"]
    assert node3["degraded_links"] == {"0": True}
    assert node3["failures"] == ["GPU 0 (00000000:00:06.0): PCIe link at x8 of x16 (nvidia-smi)"]
    assert node3["differences"][0]["field"] == "gpu 0 pcie width_current"
    assert node3["differences"][0]["peers"] == 16
    assert status["hosts"]["node1"]["degraded_links"] == {"0": False}
    json.dumps(status)  # make status reads it as JSON
    lines = passports.lines(status)
    assert "    failed: GPU 0 (00000000:00:06.0): PCIe link at x8 of x16 (nvidia-smi)" in lines
    assert "    differs from peers: gpu 0 pcie width_current 8 (peers: 16 on 3 of 4)" in lines


def test_no_copies_yet(tmp_path):
    assert passports.lines(passports.fleet_status(tmp_path), tmp_path) == [
        f"no passports in {tmp_path} yet (the deploy's Hardware passport step writes them)"
    ]


# ---------------------------------------------------------------------------------- the check


def node_with(doc, path=PLAN.scripts.passport_path):
    return Node(files={path: File(path, content_string=json.dumps(doc))})


def test_the_check_is_registered():
    assert "hardware passport" in [entry.name for entry in checks.REGISTRY]


def test_a_missing_passport_fails(monkeypatch):
    monkeypatch.setattr(passports, "read_all", lambda: {})
    found = passport_checks.hardware_passport(Node(), PLAN)
    assert found.state == FAILED
    assert found.detail == (
        "no passport at /var/lib/sd/passport.json (the deploy's Hardware passport step writes it)"
    )
    path = PLAN.scripts.passport_path
    found = passport_checks.hardware_passport(Node(files={path: File(path, content_string="{")}), PLAN)
    assert found.state == FAILED and "is not JSON" in found.detail


def test_a_healthy_node_among_its_peers_is_ok(fleet, monkeypatch):
    monkeypatch.setattr(passports, "read_all", lambda: fleet)
    found = passport_checks.hardware_passport(node_with(fleet["node1"]), PLAN)
    assert found.state == OK, found.detail
    assert found.data["degraded_links"] == {"0": False} and found.data["differences"] == []


def test_a_degraded_link_fails_and_shows_the_difference_from_peers(fleet, monkeypatch):
    monkeypatch.setattr(passports, "read_all", lambda: fleet)
    found = passport_checks.hardware_passport(node_with(fleet["node3"]), PLAN)
    assert found.state == FAILED
    assert "GPU 0 (00000000:00:06.0): PCIe link at x8 of x16 (nvidia-smi)" in found.detail
    assert found.data["differences"] == ["gpu 0 pcie width_current 8 (peers: 16 on 3 of 4)"]


def test_the_node_read_now_replaces_its_own_older_copy(fleet, tmp_path, monkeypatch):
    # The controller's copy of node1 is from before its driver upgrade; its peers' are not.
    upgraded = collected(hostname="node1", driver="590.48.01", tmp=tmp_path)
    monkeypatch.setattr(passports, "read_all", lambda: fleet)
    found = passport_checks.hardware_passport(node_with(upgraded), PLAN)
    assert found.state == WARNING
    assert found.data["differences"] == ["driver 590.48.01 (peers: 580.159.04 on 3 of 4)"]


def test_a_sandbox_node_s_passport_passes_saying_its_gpus_were_not_checked(tmp_path, monkeypatch):
    monkeypatch.setattr(passports, "read_all", lambda: {})
    found = passport_checks.hardware_passport(node_with(collected("", tmp=tmp_path)), PLAN)
    assert found.state == OK and found.checked
    assert found.detail.startswith("GPUs not checked: nvidia-smi not found")


# ---------------------------------------------------------------------------------- deploy step


def test_the_step_records_the_copy_and_changes_nothing(tmp_path, monkeypatch):
    doc = collected(hostname="node1", tmp=tmp_path)
    line = json.dumps({"status": 0, "result": "READY", "cause": None, "passport": doc, "written": False})
    asked = {}

    def fact(**kwargs):
        asked.update(kwargs)
        return result.parse([line])

    monkeypatch.setattr(passports, "REPORTS", tmp_path / "reports")
    fake = FakeHost({HardwarePassport: fact})
    with ctx_state.use(type("Executing", (), {"is_executing": True})()), ctx_host.use(fake):
        commands = list(operations.passport_recorded._inner(scripts=PLAN.scripts))
    assert commands == []  # a fact and a controller file: nothing a re-run would count
    assert asked == {"scripts_dir": "/opt/sd/node", "command": PLAN.scripts.passport()}
    assert json.loads((tmp_path / "reports" / "node1.json").read_text())["gpus"] == doc["gpus"]
    assert fake.noops[0].startswith("hardware passport (1 × NVIDIA H200, driver 580.159.04")


def test_the_step_gathers_nothing_while_planning(monkeypatch):
    fake = FakeHost({HardwarePassport: lambda **kwargs: pytest.fail("gathered during --dry")})
    with ctx_host.use(fake):
        assert list(operations.passport_recorded._inner(scripts=PLAN.scripts)) == []


def test_the_fact_runs_the_uploaded_script_only_once_it_is_there():
    command = HardwarePassport().command("/opt/sd/node", PLAN.scripts.passport())
    assert command == (
        "! test -f /opt/sd/node/passport.py || "
        "python3 /opt/sd/node/passport.py collect --write /var/lib/sd/passport.json || true"
    )
    assert HardwarePassport().process([]) is None


def test_make_status_names_a_degraded_link(tmp_path):
    from sglang_deploy.status import render

    row = {"passport": {"age_s": 60.0, "passport": collected(with_link(width=8), tmp=tmp_path)}}
    assert render.passport_cell(row) == "present, 60s ago, 1 GPU(s), PCIe link degraded: GPU 0"
    row = {"passport": {"age_s": 60.0, "passport": collected(tmp=tmp_path)}}
    assert render.passport_cell(row) == "present, 60s ago, 1 GPU(s)"
