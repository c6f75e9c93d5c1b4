"""node/acs.py: PCI bridges from `lspci -D -n` (captured formats) and the setpci recipe."""

import json
from pathlib import Path

from sglang_deploy.node import acs
from sglang_deploy.node.lib import result, status

CAPTURED = Path(__file__).parent / "captured"


def test_bridges_from_a_listing_with_two():
    text = (CAPTURED / "lspci_Dn_intel_bridges.txt").read_text()
    assert acs.bridges(text) == ["0000:00:01.0", "0000:00:1e.0"]


def test_no_bridges_on_the_sandbox_vm():
    assert acs.bridges((CAPTURED / "lspci_Dn_vm_no_bridges.txt").read_text()) == []


def test_no_bridges_logs_and_succeeds(capsys):
    code = acs.disable(
        (CAPTURED / "lspci_Dn_vm_no_bridges.txt").read_text(),
        setpci=lambda *a: (_ for _ in ()).throw(AssertionError("no setpci")),
    )
    out = capsys.readouterr().out.splitlines()
    assert code == status.READY
    assert out[0] == "no PCI bridges: nothing to clear"
    assert result.parse(out)["bridges"] == []


class FakeSetpci:
    """setpci on bridges whose ACS control register holds `registers[bdf]` (None: no ACS)."""

    def __init__(self, registers, stuck=()):
        self.registers, self.stuck, self.calls = dict(registers), set(stuck), []

    def __call__(self, *args):
        self.calls.append(args)
        _, bdf, reg = args
        value = self.registers.get(bdf)
        if value is None:
            return 1, "setpci: Capability ECAP_ACS not found"
        if reg.endswith("=0000"):
            if bdf not in self.stuck:
                self.registers[bdf] = "0000"
            return 0, ""
        return 0, value


def test_clears_acs_with_the_nccl_recipe_and_skips_bridges_without_it(capsys):
    setpci = FakeSetpci({"0000:00:01.0": "001d", "0000:00:1e.0": None})
    code = acs.disable((CAPTURED / "lspci_Dn_intel_bridges.txt").read_text(), setpci)
    assert code == status.READY
    assert ("-s", "0000:00:01.0", "ECAP_ACS+0x6.w=0000") in setpci.calls
    assert not any(call[-1].endswith("=0000") for call in setpci.calls if call[1] == "0000:00:1e.0")
    out = capsys.readouterr().out
    assert "0000:00:01.0: ACS cleared (was 001d)" in out
    assert "0000:00:1e.0: no ACS capability" in out


def test_already_clear_writes_nothing():
    setpci = FakeSetpci({"0000:00:01.0": "0000"})
    assert acs.clear("0000:00:01.0", setpci)[0] == "clear"
    assert len(setpci.calls) == 1


def test_a_register_that_does_not_clear_fails(capsys):
    setpci = FakeSetpci({"0000:00:01.0": "001d", "0000:00:1e.0": "0000"}, stuck={"0000:00:01.0"})
    code = acs.disable((CAPTURED / "lspci_Dn_intel_bridges.txt").read_text(), setpci)
    assert code == status.ACS_NOT_CLEARED
    found = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert "0000:00:01.0: ACS control still 001d" in found["cause"]
