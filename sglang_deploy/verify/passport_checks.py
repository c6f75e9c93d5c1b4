"""`make verify`'s "hardware passport" check: the passport the deploy keeps on the node
(node/passport.py), judged alone and against its peers of the same GPU model, whose copies are
on the controller (reports/passport/, report/passports.py).

Fails on a missing or unreadable passport and on a degraded PCIe link; warns on hardware error
signs (Xid events, rows pending remapping, slowdowns) and on differences from its peers; a
passport without nvidia-smi's GPUs (a sandbox node) passes on what it holds, its detail saying
the GPUs were not checked. The detail says the passport's summary first.

``collect``: a passport collected on the node now and kept nowhere, for the GPU checks
(verify/gpu_checks.py) to judge the hardware as it is.
"""

from __future__ import annotations

import json

from sglang_deploy.node.lib import gpu_links, result
from sglang_deploy.plan.commands.builder import script
from sglang_deploy.report import passports
from sglang_deploy.verify import passport_compare
from sglang_deploy.verify.registry import verify_check
from sglang_deploy.verify.verdict import FAILED, OK, WARNING, Check

NAME = "hardware passport"
THIS_NODE = "(this node)"


def read(node, path):
    """(passport, None) from the node's file, or (None, why there is none)."""
    found = node.file(path)
    if not found.exists:
        return None, f"no passport at {path} (the deploy's Hardware passport step writes it)"
    try:
        passport = json.loads(found.content_string)
    except ValueError as exc:
        return None, f"{path} is not JSON: {exc}"
    if not isinstance(passport, dict):
        return None, f"{path} holds no passport"
    return passport, None


def collect(node, scripts_dir):
    """(passport, None) collected on the node now by its passport.py (written nowhere), or
    (None, why there is none)."""
    run = node.run(script("python3", scripts_dir, "passport.py", "collect"))
    found = result.parse(run.stdout.splitlines())
    if found is None or not isinstance(found.get("passport"), dict):
        return None, f"passport.py collect printed no passport: {run.stderr.strip()[-200:]}"
    return found["passport"], None


def with_peers(passport, copies) -> dict:
    """{host: passport}: the controller's copies of the other nodes (told apart by the hostname
    each passport names) and this node's own, as read from it now."""
    peers = {
        host: other for host, other in copies.items() if other.get("hostname") != passport.get("hostname")
    }
    return {**peers, THIS_NODE: passport}


def verdict(passport, copies) -> Check:
    """The check of one node's ``passport``, ``copies`` the controller's ({host: passport})."""
    differences = passport_compare.peer_differences(with_peers(passport, copies))[THIS_NODE]
    failures, warnings = passport_compare.own_findings(passport)
    warnings += [f"differs from its peers: {difference.text()}" for difference in differences]
    detail = "; ".join([passport_compare.summary(passport), *failures, *warnings])
    # A node without a driver (a sandbox node) still has its passport checked: it is there,
    # collected, and its PCI, ACS and IOMMU parts read; the detail says its GPUs were not.
    state = FAILED if failures else WARNING if warnings else OK
    data = {
        "degraded_links": {str(index): bad for index, bad in gpu_links.degraded(passport).items()},
        "differences": [difference.text() for difference in differences],
        "collected_at": passport.get("collected_at"),
    }
    return Check(NAME, state, detail, data=data)


@verify_check(NAME, column="passport", warning_fails=False)
def hardware_passport(node, plan) -> Check:
    passport, why = read(node, plan.scripts.passport_path)
    if passport is None:
        return Check(NAME, FAILED, why)
    return verdict(passport, passports.read_all())
