"""node/passport.py and its parsers (lib/nvidia_smi_q.py, lib/pci_sysfs.py, lib/xid.py,
lib/gpu_links.py) on real captures of an H200 (tests/unit/captured/, sources in each header),
and variations of them for what the captures cannot show (a degraded link, an old driver)."""

import csv
import json
import os

import pytest

from sglang_deploy.node import passport
from sglang_deploy.node.lib import gpu_links, nvidia_smi_q, pci_sysfs, result, status, xid
from tests.unit.test_gpu_health import captured

SMI_Q = "nvidia_smi_q_h200.txt"
SMI_Q_REFERENCE = "nvidia_smi_q_h200_reference.txt"
NC = nvidia_smi_q.not_checked


def csv_rows(name):
    return list(csv.DictReader(captured(name).splitlines(), skipinitialspace=True))


# ---------------------------------------------------------------------------------- nvidia-smi -q


@pytest.mark.parametrize("name", [SMI_Q, SMI_Q_REFERENCE])
def test_the_h200_captures_read_as_one_gpu_at_gen5_x16(name):
    gpus = nvidia_smi_q.passport_gpus(captured(name))
    assert [gpu["index"] for gpu in gpus] == [0]
    gpu = gpus[0]
    assert gpu["name"] == "NVIDIA H200" and gpu["bus_id"] == "00000000:00:06.0"
    assert gpu["vbios"] == "96.00.A5.00.1A" and gpu["performance_state"] == "P0"
    assert gpu["pcie"] == {
        "gen_current": 5,
        "gen_max": 5,
        "gen_device_current": 5,
        "gen_device_max": 5,
        "gen_host_max": NC("nvidia-smi -q: PCIe Generation > Host Max is N/A"),
        "width_current": 16,
        "width_max": 16,
    }
    assert gpu["clocks_event_reasons"] == ["Idle"]
    assert gpu["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
    # Hopper remaps rows instead of retiring pages: N/A, so "not checked", never 0.
    assert gpu["retired_pages"] == {
        "single_bit_ecc": NC("nvidia-smi -q: Retired Pages > Single Bit ECC is N/A"),
        "double_bit_ecc": NC("nvidia-smi -q: Retired Pages > Double Bit ECC is N/A"),
        "pending": NC("nvidia-smi -q: Retired Pages > Pending Page Blacklist is N/A"),
    }
    assert nvidia_smi_q.versions(captured(name)) == {"driver_version": "580.159.04", "cuda_version": "13.0"}


@pytest.mark.parametrize(
    "q, query", [(SMI_Q, "query_gpu_pcie_h200.csv"), (SMI_Q_REFERENCE, "query_gpu_h200_reference.csv")]
)
def test_q_agrees_with_the_query_csv_of_the_same_machine(q, query):
    gpu = nvidia_smi_q.passport_gpus(captured(q))[0]
    row = csv_rows(query)[0]
    assert gpu["bus_id"] == row["pci.bus_id"]
    assert gpu["pcie"]["gen_current"] == int(row["pcie.link.gen.current"])
    assert gpu["pcie"]["gen_max"] == int(row["pcie.link.gen.max"])
    assert gpu["pcie"]["width_current"] == int(row["pcie.link.width.current"])
    assert gpu["pcie"]["width_max"] == int(row["pcie.link.width.max"])
    # 0x...01 is "GPU idle" in clocks_event_reasons.active: -q's only active reason.
    assert int(row["clocks_event_reasons.active"], 16) == 1 and gpu["clocks_event_reasons"] == ["Idle"]


@pytest.mark.parametrize(
    "section, field",
    [
        ("nvidia_smi_q_d_row_remapper_h200.txt", "remapped_rows"),
        ("nvidia_smi_q_d_page_retirement_h200.txt", "retired_pages"),
        ("nvidia_smi_q_d_performance_h200.txt", "clocks_event_reasons"),
    ],
)
def test_a_single_section_reads_as_in_the_full_output(section, field):
    alone = nvidia_smi_q.passport_gpus(captured(section))[0]
    assert alone[field] == nvidia_smi_q.passport_gpus(captured(SMI_Q))[0][field]


def test_several_sections_at_once_are_refused_by_this_driver():
    # Why the passport runs one full -q: `-q -d PCIE` (and several sections) is refused.
    assert captured("nvidia_smi_q_d_pcie_h200.txt").strip() == "Failed to parse --display/-d flags"
    assert nvidia_smi_q.passport_gpus(captured("nvidia_smi_q_d_pcie_h200.txt")) == []


def test_an_old_driver_says_clocks_throttle_reasons():
    text = captured(SMI_Q).replace("Clocks Event Reasons", "Clocks Throttle Reasons")
    text = text.replace(
        "            HW Thermal Slowdown                        : Not Active",
        "            HW Thermal Slowdown                        : Active",
    )
    assert nvidia_smi_q.passport_gpus(text)[0]["clocks_event_reasons"] == ["HW Thermal Slowdown", "Idle"]


def test_a_gpu_before_ampere_has_no_remapped_rows():
    text = captured(SMI_Q)
    start = text.index("    Remapped Rows")
    end = text.index("    Temperature")
    old = text[:start] + "    Remapped Rows                                      : N/A\n" + text[end:]
    assert nvidia_smi_q.passport_gpus(old)[0]["remapped_rows"] == NC("nvidia-smi -q: Remapped Rows is N/A")


def test_a_value_that_is_not_a_number_is_refused():
    text = captured(SMI_Q).replace(
        "                Current                                : 16x", "                Current    : sixteen"
    )
    with pytest.raises(nvidia_smi_q.Unparsed, match="sixteen"):
        nvidia_smi_q.passport_gpus(text)


def eight_gpus():
    """The H200 capture as eight GPUs (nvidia-smi's index order is the listing's)."""
    text = captured(SMI_Q)
    head, gpu = text.split("GPU 00000000:00:06.0\n", 1)
    return head + "".join("GPU 00000000:%02X:00.0\n%s" % (0x18 + 0x10 * i, gpu) for i in range(8))


def test_eight_gpus_keep_their_order():
    gpus = nvidia_smi_q.passport_gpus(eight_gpus())
    assert [(g["index"], g["bus_id"]) for g in gpus][:2] == [(0, "00000000:18:00.0"), (1, "00000000:28:00.0")]
    assert len(gpus) == 8


# ---------------------------------------------------------------------------------- sysfs


def sysfs_from_capture(root):
    """/sys/bus/pci/devices rebuilt under ``root`` from the captured listing."""
    for line in captured("sys_pci_devices_h200.txt").splitlines():
        path, _, content = line.partition(": ")
        if content == "(absent)":
            continue
        target = root / os.path.relpath(path, pci_sysfs.DEVICES)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content + "\n")
    return str(root)


def test_the_h200_in_sysfs(tmp_path):
    devices = sysfs_from_capture(tmp_path)
    assert pci_sysfs.nvidia_gpus(devices) == ["0000:00:06.0"]
    assert pci_sysfs.device("0000:00:06.0", devices) == {
        "bdf": "0000:00:06.0",
        "link": {"gen_current": 5, "gen_max": 5, "width_current": 16, "width_max": 16},
        "numa_node": -1,
    }


def test_a_device_without_link_files_is_not_checked(tmp_path):
    devices = sysfs_from_capture(tmp_path)
    for name in ("current_link_speed", "max_link_width"):
        os.remove(os.path.join(devices, "0000:00:06.0", name))
    link = pci_sysfs.link("0000:00:06.0", devices)
    assert link["gen_current"]["not_checked"].endswith("current_link_speed: No such file or directory")
    assert link["width_max"]["not_checked"].endswith("max_link_width: No such file or directory")
    assert link["gen_max"] == 5 and link["width_current"] == 16


@pytest.mark.parametrize(
    "speed, gen",
    [("32.0 GT/s PCIe", 5), ("16.0 GT/s PCIe", 4), ("8.0 GT/s PCIe", 3), ("2.5 GT/s PCIe", 1), ("8 GT/s", 3)],
)
def test_link_speed_as_generation(speed, gen):
    assert pci_sysfs.generation(speed) == gen


def test_an_unknown_speed_is_not_a_generation(tmp_path):
    devices = sysfs_from_capture(tmp_path)
    (tmp_path / "0000:00:06.0" / "current_link_speed").write_text("Unknown\n")
    assert "speed 'Unknown'" in pci_sysfs.link("0000:00:06.0", devices)["gen_current"]["not_checked"]


def test_nvidia_smi_bus_ids_as_sysfs_addresses():
    assert pci_sysfs.sysfs_bdf("00000000:3B:00.0") == "0000:3b:00.0"
    assert pci_sysfs.sysfs_bdf("00000001:00:06.0") == "0001:00:06.0"


# ---------------------------------------------------------------------------------- Xid


def test_xid_lines_from_public_reports():
    found = xid.events(captured("kernel_log_xid_public_reports.txt").splitlines())
    assert found["count"] == 5
    assert found["by_code"] == {"13": 2, "109": 1, "45": 2}
    assert found["by_device"] == {"PCI:0000:cb:00": 3, "PCI:0000:dc:00": 1, "PCI:0000:ed:00": 1}
    assert found["last"][-1].startswith("NVRM: Xid (PCI:0000:ed:00): 45, pid=1818992")


def test_a_healthy_h200s_dmesg_has_no_xid():
    lines = captured("dmesg_h200_no_xid.txt").splitlines()
    assert len(lines) > 300
    assert xid.events(lines) == {"count": 0, "by_code": {}, "by_device": {}, "last": []}


# ---------------------------------------------------------------------------------- link verdicts


def passport_of(q_text, sysfs_link=None, pstate=None):
    gpus = nvidia_smi_q.passport_gpus(q_text)
    for gpu in gpus:
        gpu["sysfs"] = {"bdf": pci_sysfs.sysfs_bdf(gpu["bus_id"]), "link": sysfs_link or NC("absent")}
        if pstate:
            gpu["performance_state"] = pstate
    return {"gpus": gpus}


def with_link(gen=None, width=None):
    text = captured(SMI_Q)
    if gen is not None:
        text = text.replace(
            "                Current                                : 5",
            "                Current                                : %d" % gen,
        )
    if width is not None:
        text = text.replace(
            "                Current                                : 16x",
            "                Current                                : %dx" % width,
        )
    return text


def test_the_captured_h200s_link_is_not_degraded():
    assert passport.degraded_links(passport_of(captured(SMI_Q))) == {0: False}
    assert gpu_links.problems(passport_of(captured(SMI_Q))) == []


def test_a_link_trained_to_x8_is_degraded():
    doc = passport_of(with_link(width=8))
    assert passport.degraded_links(doc) == {0: True}
    assert gpu_links.problems(doc) == ["GPU 0 (00000000:00:06.0): PCIe link at x8 of x16 (nvidia-smi)"]


def test_gen3_at_p0_is_degraded():
    doc = passport_of(with_link(gen=3))
    assert passport.degraded_links(doc) == {0: True}
    assert "Gen3 of Gen5 (nvidia-smi)" in gpu_links.problems(doc)[0]


def test_a_lower_speed_below_p0_is_power_saving_not_degradation():
    assert passport.degraded_links(passport_of(with_link(gen=1), pstate="P8")) == {0: False}
    # ... but fewer lanes are never power saving.
    assert passport.degraded_links(passport_of(with_link(gen=1, width=8), pstate="P8")) == {0: True}


def test_sysfs_alone_can_say_a_link_is_degraded():
    link = {"gen_current": 5, "gen_max": 5, "width_current": 8, "width_max": 16}
    doc = passport_of(captured(SMI_Q), sysfs_link=link)
    assert passport.degraded_links(doc) == {0: True}
    assert gpu_links.problems(doc)[0].endswith("x8 of x16 (sysfs)")


def test_without_nvidia_smi_the_sysfs_gpus_are_judged():
    doc = {
        "gpus": NC("nvidia-smi not found"),
        "pci_gpus": [
            {
                "bdf": "0000:3b:00.0",
                "link": {"gen_current": 3, "gen_max": 4, "width_current": 16, "width_max": 16},
            },
            {"bdf": "0000:5e:00.0", "link": {key: NC("absent") for key in ("gen_current", "gen_max")}},
        ],
    }
    # The second GPU's link could not be read: left out, not called healthy.
    assert passport.degraded_links(doc) == {0: True}


def test_a_passport_without_gpus_judges_none():
    assert passport.degraded_links({"gpus": NC("nvidia-smi not found"), "pci_gpus": []}) == {}


# ---------------------------------------------------------------------------------- collect


class Tools:
    """A node's tools: argv[0] -> (exit status, stdout, stderr); absent ones are not installed."""

    def __init__(self, **tools):
        self.tools, self.calls = tools, []

    def __call__(self, argv):
        self.calls.append(argv)
        found = self.tools.get(argv[0].replace("-", "_"))
        return found(argv) if callable(found) else found


def test_a_sandbox_node_without_nvidia_smi_still_collects_what_exists(tmp_path):
    (tmp_path / "iommu").mkdir()
    cmdline = tmp_path / "cmdline"
    cmdline.write_text("BOOT_IMAGE=/vmlinuz root=/dev/vda1 intel_iommu=on iommu=pt quiet\n")
    doc = passport.collect(
        Tools(dmesg=(0, "[0.0] Linux version 6.1\n", "")),
        devices=str(tmp_path / "devices-absent"),
        iommu_dir=str(tmp_path / "iommu"),
        cmdline=str(cmdline),
        is_root=True,
    )
    for field in ("nvidia_smi", "driver_version", "cuda_version", "gpu_count", "gpus", "topology"):
        assert doc[field] == NC("nvidia-smi not found"), field
    assert doc["pci_gpus"]["not_checked"].startswith(str(tmp_path / "devices-absent"))
    assert doc["iommu"] == {"sysfs": [], "cmdline": "intel_iommu=on iommu=pt"}
    assert doc["acs"] == NC("lspci not found (Debian package pciutils)")
    assert doc["xid"]["count"] == 0 and doc["xid"]["source"] == "dmesg"
    assert doc["passport_version"] == passport.VERSION and doc["took_s"] >= 0


def test_an_h200_node_collects_its_gpus_with_their_sysfs_links(tmp_path):
    devices = sysfs_from_capture(tmp_path / "devices")
    doc = passport.collect(
        Tools(nvidia_smi=(0, captured(SMI_Q), ""), dmesg=(0, captured("dmesg_h200_no_xid.txt"), "")),
        devices=devices,
        iommu_dir=str(tmp_path / "no-iommu-class"),
        cmdline=str(tmp_path / "no-cmdline"),
        is_root=False,
    )
    assert doc["nvidia_smi"] == "ok" and doc["gpu_count"] == 1
    assert (doc["driver_version"], doc["cuda_version"]) == ("580.159.04", "13.0")
    gpu = doc["gpus"][0]
    assert gpu["numa_node"] == -1
    assert gpu["sysfs"] == {
        "bdf": "0000:00:06.0",
        "link": {"gen_current": 5, "gen_max": 5, "width_current": 16, "width_max": 16},
    }
    assert doc["pci_gpus"] == [dict(gpu["sysfs"], numa_node=-1)]
    assert doc["iommu"]["sysfs"]["not_checked"].endswith("No such file or directory")
    assert doc["iommu"]["cmdline"]["not_checked"].endswith("No such file or directory")
    assert doc["acs"] == NC("not root: setpci cannot read the bridges' ACS registers")
    assert passport.degraded_links(doc) == {0: False}


def test_a_failing_nvidia_smi_is_not_checked_with_its_message(tmp_path):
    doc = passport.collect(
        Tools(
            nvidia_smi=(
                9,
                "",
                "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
            )
        ),
        devices=str(tmp_path),
        is_root=False,
    )
    assert doc["gpus"] == NC(
        "nvidia-smi -q exited 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    )


def test_an_empty_journal_falls_back_to_dmesg_and_neither_is_not_checked(tmp_path):
    tools = Tools(
        journalctl=(0, "", ""), dmesg=(1, "", "dmesg: read kernel buffer failed: Operation not permitted")
    )
    found = passport.xid_events(tools)
    assert found == NC(
        "journalctl -k -b --no-pager -q -o short-iso: no kernel messages at all (a container sees none); "
        "dmesg exited 1: dmesg: read kernel buffer failed: Operation not permitted"
    )
    lines = captured("kernel_log_xid_public_reports.txt")
    found = passport.xid_events(Tools(journalctl=(0, lines, "")))
    assert found["count"] == 5 and found["source"].startswith("journalctl -k -b")


def test_acs_registers_of_the_bridges():
    registers = {"0000:00:01.0": "0011", "0000:00:1e.0": None}

    def setpci(argv):
        if argv[1] == "--version":
            return 0, "setpci version 3.9.0", ""
        value = registers[argv[2]]
        return (0, value + "\n", "") if value else (1, "", "setpci: Capability ECAP_ACS not found")

    tools = Tools(lspci=(0, captured("lspci_Dn_intel_bridges.txt"), ""), setpci=setpci)
    assert passport.acs_controls(tools, is_root=True) == {
        "bridges": [{"bdf": "0000:00:01.0", "control": "0011"}, {"bdf": "0000:00:1e.0", "control": None}]
    }
    no_setpci = Tools(lspci=(0, captured("lspci_Dn_intel_bridges.txt"), ""))
    assert passport.acs_controls(no_setpci, is_root=True) == NC("setpci not found (Debian package pciutils)")


# ---------------------------------------------------------------------------------- write


def test_the_write_is_a_noop_when_only_the_collection_time_changed(tmp_path):
    path = str(tmp_path / "state" / "passport.json")
    doc = {"gpus": NC("nvidia-smi not found"), "collected_at": "2026-12-01T00:00:00Z", "took_s": 0.2}
    assert passport.write(doc, path) is True
    before = os.stat(path)
    again = dict(doc, collected_at="2026-12-02T00:00:00Z", took_s=0.3)
    assert passport.write(again, path) is False
    assert os.stat(path).st_mtime_ns == before.st_mtime_ns
    assert json.load(open(path))["collected_at"] == "2026-12-01T00:00:00Z"
    assert passport.write(dict(again, gpu_count=1), path) is True
    assert json.load(open(path))["gpu_count"] == 1
    assert os.listdir(tmp_path / "state") == ["passport.json"]  # no temporary file left
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"


def test_main_writes_once_then_reports_unchanged(tmp_path, capsys, monkeypatch):
    doc = {"gpus": NC("nvidia-smi not found"), "collected_at": "t", "took_s": 0.1}
    monkeypatch.setattr(passport, "collect", lambda: dict(doc))
    path = str(tmp_path / "passport.json")
    assert passport.main(["collect", "--write", path]) == status.READY
    first = result.parse(capsys.readouterr().out.splitlines())
    assert first["written"] is True and first["passport"]["gpus"] == doc["gpus"]
    assert passport.main(["collect", "--write", path]) == status.READY
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "passport unchanged in %s" % path and result.parse(lines)["written"] is False


def test_main_says_why_it_could_not_write(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(passport, "collect", lambda: {"gpus": []})
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert passport.main(["collect", "--write", str(blocker / "passport.json")]) == status.UNEXPECTED
    found = result.parse(capsys.readouterr().out.splitlines())
    assert found["cause"].startswith("could not write %s" % (blocker / "passport.json"))


def test_the_command_line_quotes_its_paths():
    import shlex

    from sglang_deploy.plan.commands import passport_command

    command = passport_command("/opt/my dir/$(touch x)", "/var/lib/state dir/passport.json")
    assert shlex.split(command) == [
        "python3",
        "/opt/my dir/$(touch x)/passport.py",
        "collect",
        "--write",
        "/var/lib/state dir/passport.json",
    ]
