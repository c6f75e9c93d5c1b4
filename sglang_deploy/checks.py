"""What `make verify` looks at on a node, each as a Check ("ok", "warning", "failed", or
"not checked (<tool> missing)"): computed once here, asserted by tests/host and tabulated by
sglang_deploy.report.

Each function takes a testinfra host and the host's NodePlan (profile + paths). Every check's
detail passes through the profile's Redactor (`@_redacted`): node output (journal lines, a gate
report's cause, a script's message) never carries a secret value into a report.
"""

from __future__ import annotations

import functools
import json
import shlex

from .facts import Serving, WorkerEnvironment
from .gpu_health import (FAILED, OK, WARNING, Check, acs_check, gpus_check, iommu_check,
                         is_pcie_tuned, parse_gpus, topology_check)
from .nccl_confirm import confirm
from .node import status
from .redact import Redactor

NVIDIA_SMI_GPUS = "nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader,nounits"


def _redacted(check_function):
    @functools.wraps(check_function)
    def check(node, plan):
        redact = Redactor.for_profile(plan.profile)
        redact.add(values=plan.secret_values)
        found = check_function(node, plan)
        clean = lambda c: Check(c.name, c.state, redact.text(c.detail))  # noqa: E731
        return [clean(c) for c in found] if isinstance(found, list) else clean(found)
    return check


def _tool_output(node, tool, command):
    """A tool's stdout, or None when the tool is not on the node."""
    if node.run(f"command -v {tool}").rc != 0:
        return None
    return node.run(command).stdout


def _fact(node, fact_class, **kwargs):
    """A pyinfra fact of ours, gathered over testinfra: the same command, the same parsing."""
    fact = fact_class()
    return fact.process(node.run(fact.command(**kwargs)).stdout.splitlines())


@_redacted
def serving(node, plan) -> Check:
    profile = plan.profile
    found = _fact(node, Serving, port=profile.service.port,
                  served_name=profile.model.served_name) or {}
    detail = f"/health {found.get('health')}, /v1/models {found.get('models')}"
    if found.get("ready"):
        return Check("serving", OK, f"{profile.model.served_name} on :{profile.service.port}")
    return Check("serving", FAILED, detail)


@_redacted
def workers_env(node, plan) -> Check:
    report = _fact(node, WorkerEnvironment, scripts_dir=plan.scripts.directory, unit=plan.unit,
                   expect=plan.profile.hook_vars()) or {}
    if report.get("status") == status.READY:
        return Check("workers' env", OK, f"{len(report['workers'])} schedulers carry "
                     f"{len(plan.profile.hook_vars())} variables")
    return Check("workers' env", FAILED, report.get("message") or "our scripts are not on the node")


@_redacted
def nccl_confirmation(node, plan) -> Check:
    """NCCL's own "<VAR> set by environment to <value>" lines of the current start, per rank."""
    env = plan.profile.hook_vars()
    if env.get("NCCL_DEBUG", "").upper() != "INFO":
        return Check("nccl confirmation", WARNING,
                     "not requested: start once with NCCL_DEBUG=INFO in the profile's env")
    invocation = node.run(f"systemctl show -p InvocationID --value {plan.unit}").stdout.strip()
    journal = node.run(f"journalctl --no-pager -o cat _SYSTEMD_INVOCATION_ID={invocation}").stdout
    expected = {name: value for name, value in env.items() if name.startswith("NCCL_")}
    tp = int(plan.profile.server_args.get("tp-size") or 1)
    report = confirm(journal.splitlines(), expected, ranks_expected=tp)
    source = "stand-in's NCCL-format lines (simulated)" if _is_standin(node, plan) else "NCCL's log"
    if report.ok:
        return Check("nccl confirmation", OK, f"{tp} ranks confirm the profile's values ({source})")
    return Check("nccl confirmation", FAILED, f"{'; '.join(report.failures)} ({source})")


def _is_standin(node, plan):
    python = f"{plan.profile.engine.venv}/bin/python"
    version = node.run(f"{python} -c 'import sglang; print(sglang.__version__)'").stdout.strip()
    return version.endswith("+sandbox")


@_redacted
def drift(node, plan) -> Check:
    """Installed engine files against their wheels' RECORD, and versions against the pins."""
    names = plan.profile.engine.drift_check
    pins = plan.profile.engine.packages
    python = f"{plan.profile.engine.venv}/bin/python"
    result = node.run(f"{python} {plan.deploy_dir}/node/drift.py --json "
                      f"{' '.join(map(shlex.quote, names))} --pins {' '.join(map(shlex.quote, pins))}")
    report = json.loads(result.stdout or "{}")
    if report.get("status") == status.READY:
        files = sum(r["files_checked"] for r in report["distributions"].values())
        return Check("drift", OK, f"{len(report['distributions'])} distributions, {files} files "
                     f"match their RECORD")
    problems = [f"{name} not installed" for name in report.get("missing_distributions", [])]
    for name, found in report.get("distributions", {}).items():
        problems += [f"{name}: {verdict} {path}" for verdict in ("modified", "missing", "unexpected")
                     for path in found[verdict]]
        if found.get("version_mismatch"):
            problems.append(f"{name}: version {found['version']}, pinned "
                            f"{found['version_mismatch']['expected']}")
    verdict = WARNING if plan.profile.engine.allow_drift else FAILED
    return Check("drift", verdict, "; ".join(problems) or result.stderr.strip()[-200:])


@_redacted
def gpus(node, plan) -> list[Check]:
    """GPU count and model, link types, ACS on PCIe bridges, IOMMU: tools missing on a node
    make a check "not checked", never "ok"."""
    listing = _tool_output(node, "nvidia-smi", NVIDIA_SMI_GPUS)
    found = gpus_check(listing)
    needed = plan.scripts.gpus_needed()
    if found.ok and len(parse_gpus(listing)) < needed:
        found = Check(found.name, FAILED, f"{found.detail}; {needed} needed")
    iommu_dir = node.run("ls /sys/class/iommu 2>/dev/null")
    return [
        found,
        topology_check(_tool_output(node, "nvidia-smi", "nvidia-smi topo -m"),
                       pcie_tuned_profile=is_pcie_tuned(plan.profile.hook_vars())),
        acs_check(_tool_output(node, "lspci", "lspci -vvv")),
        iommu_check(node.run("cat /proc/cmdline").stdout, iommu_dir.stdout if iommu_dir.rc == 0 else None),
    ]


@_redacted
def last_start(node, plan) -> Check:
    """The readiness gate's account of the last start it gated: time per phase, or the cause."""
    found = node.run(f"cat {plan.scripts.gate_report}")
    if found.rc != 0:
        return Check("last start", WARNING, "no gate report on the node (started outside a deploy)")
    report = json.loads(found.stdout)
    if report["status"] != status.READY:
        return Check("last start", WARNING, f"{report['status_name']}: {report['cause_text']}")
    phases = ", ".join(f"{name} {seconds:.1f}s" for name, seconds in report["phases"].items()
                       if name != "ready")
    return Check("last start", OK, f"ready in {report['elapsed_s']:.1f}s ({phases})")


@_redacted
def last_good(node, plan) -> Check:
    """The profile the node last passed its readiness gate with (kept for rollback): after a
    rollback it is not the profile verify checks against."""
    found = node.run(f"cat {plan.scripts.last_good_dir}/manifest.json")
    if found.rc != 0:
        return Check("last good", WARNING, "no configuration has passed the gate here yet")
    manifest = json.loads(found.stdout)
    if manifest["profile"] != plan.profile.name:
        return Check("last good", WARNING, f"{manifest['profile']} (passed the gate at "
                     f"{manifest['saved_at']}; verified against {plan.profile.name}: rolled back?)")
    return Check("last good", OK, f"{manifest['profile']} (passed the gate at {manifest['saved_at']})")


def host_checks(node, plan) -> list[Check]:
    return [serving(node, plan), last_start(node, plan), last_good(node, plan), workers_env(node, plan),
            nccl_confirmation(node, plan), drift(node, plan), *gpus(node, plan)]
