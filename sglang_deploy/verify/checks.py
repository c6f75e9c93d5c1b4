"""Every check `make verify` makes on a node, and the one list of them: REGISTRY.

A check is a function (testinfra host, the host's NodePlan) -> Check or [Check, ...], registered
by its `@verify_check(...)` line, which also says how it shows in the per-host table. From
REGISTRY come tests/host (one test per host and check), the table and reports/verify.json
(sglang_deploy.verify.summary). The registration order is the table's column order.

To add a check: write the function here, with its `@verify_check("name")` line above it.

Every check's detail passes through the profile's Redactor: node output (journal lines, a gate
report's cause, a script's message, a file's values) never carries a secret value into a
report.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass

from sglang_deploy.facts.gpu import ACS_UNIT, PERSISTENCED_UNIT, GpuPersistence, acs_unit_text
from sglang_deploy.facts.serving import Serving, WorkerEnvironment
from sglang_deploy.node.lib import gpu_settings, status
from sglang_deploy.node.lib.result import parse as parse_result
from sglang_deploy.plan.envfile import parse_env_file
from sglang_deploy.plan.script_commands import model_check_command
from sglang_deploy.plan.venv_names import venv_name, wheel_digests
from sglang_deploy.verify.gpu_health import (
    acs_check,
    gpus_check,
    iommu_check,
    is_pcie_tuned,
    parse_gpus,
    topology_check,
)
from sglang_deploy.verify.nccl_confirm import confirm
from sglang_deploy.verify.redact import Redactor
from sglang_deploy.verify.verdict import FAILED, OK, WARNING, Check

NVIDIA_SMI_GPUS = (
    "nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader,nounits"
)
# Run by the venv's interpreter with an empty environment, so only the start-up hook sets variables.
HOOK_PROBE = (
    "import json, os, sys; "
    "hook = sys.modules.get('sglang_deploy_env'); "
    "print(json.dumps({'hook': hook and hook.__file__, 'env': dict(os.environ)}))"
)
SITE_DIRS_PROBE = "import json, site; print(json.dumps(site.getsitepackages()))"


def state_of(name):
    """The table cell of most checks: the state of the check called ``name``."""
    return lambda by_name: by_name[name]["state"] if name in by_name else "-"


@dataclass(frozen=True)
class VerifyCheck:
    name: str  # the Check's name: its line in the output, its entry in the JSON
    function: Callable  # (testinfra host, NodePlan) -> Check or [Check, ...], redacted
    column: str | None  # its header in the table (None: not a column of its own)
    cell: Callable  # {check name: JSON form of the check} -> what the table shows
    warning_fails: bool  # whether a warning fails tests/host (a failure always does)

    @property
    def id(self) -> str:
        """The check's name as a pytest id: `test_check[node1-workers-env]`."""
        return re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")

    def run(self, node, plan) -> list[Check]:
        found = self.function(node, plan)
        return found if isinstance(found, list) else [found]


REGISTRY: list[VerifyCheck] = []


def redactor(plan) -> Redactor:
    redact = Redactor.for_profile(plan.profile)
    redact.add(values=plan.secret_values)
    return redact


def verify_check(name, column=None, cell=None, warning_fails=True):
    """Registers the decorated check under ``name``, shown in the table under ``column``
    (default: ``name``; False: no column of its own) by ``cell`` (default: its state)."""

    def register(check_function):
        @functools.wraps(check_function)
        def check(node, plan):
            redact = redactor(plan)
            found = check_function(node, plan)
            clean = lambda c: dataclasses.replace(c, detail=redact.text(c.detail))  # noqa: E731
            return [clean(c) for c in found] if isinstance(found, list) else clean(found)

        REGISTRY.append(
            VerifyCheck(
                name, check, name if column is None else column or None, cell or state_of(name), warning_fails
            )
        )
        return check

    return register


def host_checks(node, plan) -> list[Check]:
    return [found for entry in REGISTRY for found in entry.run(node, plan)]


def _tool_output(node, tool, command):
    """A tool's stdout, or None when the tool is not on the node."""
    if node.run(f"command -v {tool}").rc != 0:
        return None
    return node.run(command).stdout


def _fact(node, fact_class, **kwargs):
    """A pyinfra fact of ours, gathered over testinfra: the same command, the same parsing."""
    fact = fact_class()
    return fact.process(node.run(fact.command(**kwargs)).stdout.splitlines())


def _tp_size(plan) -> int:
    """Schedulers on this node: tp-size, shared by the nodes of a serving group."""
    return plan.profile.tp_size // plan.profile.nnodes


def _ownership(node, path, want_user, want_mode, want_group=None):
    """ "<path> is <mode> <user>[:<group>], not ..." when a file or directory is not as wanted."""
    found = node.file(path)
    if not found.exists:
        return [f"{path} is missing"]
    have = (found.user, found.group if want_group else None, found.mode)
    if have == (want_user, want_group, want_mode):
        return []
    owner = lambda user, group: user + (f":{group}" if group else "")  # noqa: E731
    return [f"{path} is {have[2]:o} {owner(*have[:2])}, not {want_mode:o} {owner(want_user, want_group)}"]


def last_passed(by_name) -> str:
    """The table's "last passed gate": the profile the node last passed its gate with, or "none"."""
    found = by_name.get("last good")
    if found is None:
        return "-"
    if found["detail"].startswith("no configuration"):
        return "none"
    return found["detail"].split(" (", 1)[0]


def _last_start_cell(by_name):
    start = by_name.get("last start", {"state": "-"})
    return start["detail"] if start["state"] == OK else start["state"]


@verify_check("last good", column="last passed gate", cell=last_passed, warning_fails=False)
def last_good(node, plan) -> Check:
    """The profile the node last passed its readiness gate with (kept for rollback: after a
    rollback it is not the profile verify checks against), and that its copy of the env file
    (secrets included) is as private as the original."""
    directory = plan.scripts.last_good_dir
    if not node.file(directory).exists:
        return Check.nothing_to_check("last good", "no configuration has passed the gate here yet")
    private = _ownership(node, directory, "root", 0o700) + _ownership(
        node, f"{directory}/env", "root", 0o600, want_group="root"
    )
    state_dir = node.file(directory.rsplit("/", 1)[0])
    if state_dir.user != "root" or state_dir.mode & 0o022:
        private.append(f"{state_dir.path} is {state_dir.mode:o} {state_dir.user}: not root's alone")
    found = node.run(f"cat {shlex.quote(directory)}/manifest.json")
    if found.rc != 0:
        check = Check.nothing_to_check("last good", "no configuration has passed the gate here yet")
    else:
        manifest = json.loads(found.stdout)
        passed = f"{manifest['profile']} (passed the gate at {manifest['saved_at']}"
        if manifest["profile"] != plan.profile.name:
            check = Check(
                "last good", WARNING, f"{passed}; verified against {plan.profile.name}: rolled back?)"
            )
        else:
            check = Check("last good", OK, f"{passed})")
    if private:
        return Check("last good", FAILED, f"{check.detail}; not private: {'; '.join(private)}")
    return check


@verify_check("serving")
def serving(node, plan) -> Check:
    """The port listens on every address, /health answers 200 and /v1/models lists the name."""
    profile = plan.profile
    found = _fact(node, Serving, port=profile.service.port, served_name=profile.model.served_name) or {}
    listening = node.socket(f"tcp://0.0.0.0:{profile.service.port}").is_listening
    if plan.group and not plan.group.is_leader and found.get("health") == 200 and listening:
        # A follower serves no API: its /health is a dummy (always 200 once its schedulers run).
        return Check(
            "serving",
            OK,
            f"follower: dummy /health on :{profile.service.port}; rank 0 {plan.group.leader} serves the API",
        )
    if found.get("ready") and listening:
        return Check("serving", OK, f"{profile.model.served_name} on :{profile.service.port}")
    detail = f"/health {found.get('health')}, /v1/models {found.get('models')}"
    if not listening:
        detail = f"nothing listens on 0.0.0.0:{profile.service.port}; {detail}"
    return Check("serving", FAILED, detail)


def _group_cell(by_name):
    """The table's "serving group": '-' alone, else the member's rank and the verdict."""
    found = by_name.get("serving group")
    rank = re.search(r"group (\S+) node-rank (\d+) of (\d+)", found["detail"]) if found else None
    if not rank:
        return found["state"] if found and found["state"] == FAILED else "-"
    return f"{rank.group(1)} rank {rank.group(2)}/{rank.group(3)}: {found['state']}"


@verify_check("serving group", cell=_group_cell)
def serving_group(node, plan) -> Check:
    """A serving group member: its rank, and the group's verdict as rank 0's API answers it,
    asked from this node at rank 0's cluster address."""
    member = plan.group
    if member is None:
        return Check("serving group", OK, "serves alone (no serving_group)")
    where = f"{member.leader_address}:{member.leader_port}"
    found = (
        _fact(
            node,
            Serving,
            port=member.leader_port,
            health_path="/ping",
            served_name=plan.profile.model.served_name,
            host=member.leader_address,
        )
        or {}
    )
    if found.get("ready"):
        return Check(
            "serving group",
            OK,
            f"{member.label()}: rank 0 {member.leader} serves {plan.profile.model.served_name} at {where}",
        )
    return Check(
        "serving group",
        FAILED,
        f"{member.label()}: rank 0 {member.leader} does not "
        f"serve at {where} (/ping {found.get('health')}, /v1/models {found.get('models')})",
    )


@verify_check("last start", cell=_last_start_cell)
def last_start(node, plan) -> Check:
    """The readiness gate's account of the last start it gated: time per phase, or the cause."""
    found = node.run(f"cat {plan.scripts.gate_report}")
    if found.rc != 0:
        return Check.nothing_to_check("last start", "no gate report on the node (started outside a deploy)")
    report = json.loads(found.stdout)
    if report["status"] != status.READY:
        return Check("last start", WARNING, f"{report['status_name']}: {report['cause_text']}")
    phases = ", ".join(
        f"{name} {seconds:.1f}s" for name, seconds in report["phases"].items() if name != "ready"
    )
    return Check("last start", OK, f"ready in {report['elapsed_s']:.1f}s ({phases})")


@verify_check("env file")
def env_file(node, plan) -> Check:
    """Root's alone (0600 in a 0700 directory), every variable of the profile with its value,
    and every secret the operator exported (by name)."""
    redact = redactor(plan)
    problems = _ownership(node, plan.env_dir, "root", 0o700) + _ownership(
        node, plan.env_path, "root", 0o600, want_group="root"
    )
    if not node.file(plan.env_path).exists:
        return Check("env file", FAILED, "; ".join(problems))
    on_node = redact.mapping(parse_env_file(node.file(plan.env_path).content_string))
    expected = redact.mapping(parse_env_file(plan.env_text))
    hook_vars = plan.profile.hook_vars()
    problems += [
        f"{name} is {on_node.get(name)!r}, expected {expected.get(name)!r}"
        for name in hook_vars
        if on_node.get(name) != expected.get(name)
    ]
    problems += [
        f"secret {name} missing" for name in plan.profile.secrets if name in expected and name not in on_node
    ]
    if problems:
        return Check("env file", FAILED, f"{plan.env_path}: {'; '.join(problems)}")
    return Check("env file", OK, f"{len(hook_vars)} variables as the profile has them")


@verify_check("unit")
def unit(node, plan) -> Check:
    """The installed unit is the profile's rendering, `systemd-analyze verify` accepts it, and
    the service is enabled and running."""
    path = f"{plan.unit_dir}/{plan.unit}"
    installed = node.file(path)
    if not installed.exists:
        return Check("unit", FAILED, f"{path} is missing")
    problems = []
    if installed.content_string != plan.unit_text:
        changed = [
            line
            for line in difflib.unified_diff(
                installed.content_string.splitlines(), plan.unit_text.splitlines(), n=0, lineterm=""
            )
            if line[:1] in "+-" and line[:3] not in ("+++", "---")
        ]
        difference = changed[0] if changed else "line endings"
        problems.append(
            f"{path} differs from the profile's rendering (- on the node, + rendered; first: {difference})"
        )
    verified = node.run(f"systemd-analyze verify {shlex.quote(path)}")
    if verified.rc != 0:
        problems.append(f"systemd-analyze verify: {verified.stderr.strip()[-300:]}")
    service = node.service(plan.profile.service.name)
    problems += [
        f"{plan.unit} is not {what}"
        for what, yes in (("enabled", service.is_enabled), ("running", service.is_running))
        if not yes
    ]
    if problems:
        return Check("unit", FAILED, "; ".join(problems))
    return Check("unit", OK, f"{plan.unit} as rendered, enabled, running")


@verify_check("hook")
def hook(node, plan) -> Check:
    """The venv's interpreter really imports the start-up hook, from a site directory, and it
    sets every variable of the profile, leaving one the caller already set alone."""
    redact = redactor(plan)
    python = f"{plan.profile.engine.venv}/bin/python"
    hook_vars = redact.mapping(plan.profile.hook_vars())

    def fresh(env=""):
        """(the hook's file or None, the environment) of a fresh interpreter, or (None, error)."""
        found = node.run(f"env -i {env} {shlex.quote(python)} -c {shlex.quote(HOOK_PROBE)}")
        if found.rc != 0:
            return None, f"{python}: {found.stderr.strip()[-300:]}"
        probe = json.loads(found.stdout)
        return probe["hook"], redact.mapping(probe["env"])

    imported, env = fresh()
    if isinstance(env, str):
        return Check("hook", FAILED, env)
    if not imported:
        return Check("hook", FAILED, "the venv interpreter did not import sglang_deploy_env at start-up")
    problems = []
    site_dirs = json.loads(node.run(f"{shlex.quote(python)} -c {shlex.quote(SITE_DIRS_PROBE)}").stdout)
    if imported.rsplit("/", 1)[0] not in site_dirs:
        problems.append(f"{imported} is not in a site directory ({', '.join(site_dirs)})")
    problems += [
        f"fresh {python}: {name} is {env.get(name)!r}, expected {value!r}"
        for name, value in hook_vars.items()
        if env.get(name) != value
    ]
    name = next(iter(hook_vars), None)
    if name:
        _, env = fresh(f"{name}=set-by-caller")
        if not isinstance(env, dict) or env.get(name) != "set-by-caller":
            problems.append(f"the hook overrides {name} that the caller set")
    if problems:
        return Check("hook", FAILED, "; ".join(problems))
    return Check("hook", OK, f"{imported} sets {len(hook_vars)} variables, none the caller set")


@verify_check("workers' env")
def workers_env(node, plan) -> Check:
    """tp-size schedulers, every one carrying every variable of the profile."""
    report = (
        _fact(
            node,
            WorkerEnvironment,
            scripts_dir=plan.scripts.directory,
            unit=plan.unit,
            expect=plan.profile.hook_vars(),
        )
        or {}
    )
    if not report:
        return Check("workers' env", FAILED, "our scripts are not on the node")
    if report["status"] != status.READY:
        return Check(
            "workers' env",
            FAILED,
            report.get("message")
            or "; ".join(
                f"pid {worker['pid']}: {worker['error'] or _mismatches(worker['mismatches'])}"
                for worker in report["workers"]
                if not worker["ok"]
            ),
        )
    if len(report["workers"]) != _tp_size(plan):
        return Check("workers' env", FAILED, f"{len(report['workers'])} schedulers, tp-size {_tp_size(plan)}")
    return Check(
        "workers' env",
        OK,
        f"{len(report['workers'])} schedulers carry {len(plan.profile.hook_vars())} variables",
    )


def _mismatches(mismatches):
    return ", ".join(
        f"{m['var']} is {m['actual']!r}, expected {m['expected']!r}"
        if m["actual"] is not None
        else f"{m['var']} is missing"
        for m in mismatches
    )


@verify_check("nccl confirmation")
def nccl_confirmation(node, plan) -> Check:
    """NCCL's own "<VAR> set by environment to <value>" lines of the current start, per rank."""
    env = plan.profile.hook_vars()
    if env.get("NCCL_DEBUG", "").upper() != "INFO":
        return Check.nothing_to_check(
            "nccl confirmation", "not requested: start once with NCCL_DEBUG=INFO in the profile's env"
        )
    invocation = node.run(f"systemctl show -p InvocationID --value {plan.unit}").stdout.strip()
    journal = node.run(f"journalctl --no-pager -o cat _SYSTEMD_INVOCATION_ID={invocation}").stdout
    expected = {name: value for name, value in env.items() if name.startswith("NCCL_")}
    tp = _tp_size(plan)
    report = confirm(journal.splitlines(), expected, ranks_expected=tp)
    source = "stand-in's NCCL-format lines (simulated)" if _is_standin(node, plan) else "NCCL's log"
    if report.ok:
        return Check("nccl confirmation", OK, f"{tp} ranks confirm the profile's values ({source})")
    return Check("nccl confirmation", FAILED, f"{'; '.join(report.failures)} ({source})")


def _is_standin(node, plan):
    python = f"{plan.profile.engine.venv}/bin/python"
    version = node.run(f"{python} -c 'import sglang; print(sglang.__version__)'").stdout.strip()
    return version.endswith("+sandbox")


@verify_check("drift")
def drift(node, plan) -> Check:
    """Installed engine files against their wheels' RECORD, and every pinned distribution's
    installed version against its pin."""
    result = node.run(plan.scripts.drift())
    report = json.loads(result.stdout or "{}")
    if report.get("status") == status.READY:
        files = sum(r["files_checked"] for r in report["distributions"].values())
        return Check(
            "drift", OK, f"{len(report['distributions'])} distributions, {files} files match their RECORD"
        )
    problems = [f"{name} not installed" for name in report.get("missing_distributions", [])]
    for name, found in report.get("distributions", {}).items():
        problems += [
            f"{name}: {verdict} {path}"
            for verdict in ("modified", "missing", "unexpected")
            for path in found[verdict]
        ]
        if found.get("version_mismatch"):
            problems.append(
                f"{name}: version {found['version']}, pinned {found['version_mismatch']['expected']}"
            )
    verdict = WARNING if plan.profile.engine.allow_drift else FAILED
    return Check("drift", verdict, "; ".join(problems) or result.stderr.strip()[-200:])


@verify_check("engine venv")
def engine_venv(node, plan) -> Check:
    """The server runs the venv of the profile's pin set: the unit's link (engine.venv) points at
    it, and the main process's interpreter is that venv's own copy (/proc/<pid>/exe names the
    venv it started from, whatever the link says now)."""
    engine = plan.profile.engine
    version = node.run(
        f"{shlex.quote(engine.python)} -c {shlex.quote('import platform; print(platform.python_version())')}"
    )
    wanted = (
        f"{plan.venvs_dir}/{venv_name(engine.packages, wheel_digests(plan.wheels), version.stdout.strip())}"
    )
    target = node.run(f"readlink -f {shlex.quote(engine.venv)}").stdout.strip()
    pid = node.run(f"systemctl show -p MainPID --value {shlex.quote(plan.unit)}").stdout.strip()
    if not pid or pid == "0":
        return Check("engine venv", FAILED, f"{plan.unit} is not running ({engine.venv} -> {target})")
    exe = node.run(f"readlink /proc/{int(pid)}/exe").stdout.strip()
    problems = []
    if target != wanted:
        problems.append(f"{engine.venv} points at {target or 'nothing'}, not {wanted} (the profile's pins)")
    if not exe.startswith(wanted + "/"):
        problems.append(
            f"the server (pid {pid}) runs {exe or '?'}, not {wanted}: "
            f"a switch that did not restart it, or a rollback?"
        )
    if problems:
        return Check("engine venv", FAILED, "; ".join(problems))
    return Check("engine venv", OK, f"pid {pid} runs {wanted.rsplit('/', 1)[1]}")


def _model_dirs(plan) -> list[str]:
    dirs = [plan.profile.model.path, plan.profile.draft_path]
    return [d for i, d in enumerate(dirs) if d and d not in dirs[:i]]


@verify_check("model files")
def model_files(node, plan) -> Check:
    """Every model directory's files against its manifest: sizes each run, sha256 too with
    `make verify DEEP=1` (SGLANG_DEPLOY_VERIFY_DEEP=1; bench/model_hash.py says what it costs)."""
    deep = os.environ.get("SGLANG_DEPLOY_VERIFY_DEEP", "") not in ("", "0")
    problems, notes, unmanaged = [], [], []
    for directory in _model_dirs(plan):
        found = parse_result(
            node.run(model_check_command(plan.scripts.directory, directory, deep=deep)).stdout.splitlines()
        )
        if found is None:
            problems.append(f"{directory}: the check printed no result")
        elif found["cause"]:
            problems.append(found["cause"])
        elif not found["manifest"]:
            unmanaged.append(directory)
        else:
            notes.append(
                f"{directory}: {found['files']} files, {found['bytes'] / 1e9:.2f} GB "
                f"match their manifest ({'sha256' if deep else 'sizes'})"
            )
    if problems:
        return Check("model files", FAILED, "; ".join(problems))
    if not notes:
        return Check.nothing_to_check(
            "model files", f"no manifest in {', '.join(unmanaged)} (source: path, staged by hand)"
        )
    return Check("model files", OK, "; ".join(notes))


@verify_check("gpus", warning_fails=False)
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
        topology_check(
            _tool_output(node, "nvidia-smi", "nvidia-smi topo -m"),
            pcie_tuned_profile=is_pcie_tuned(plan.profile.hook_vars()),
        ),
        acs_check(_tool_output(node, "lspci", "lspci -vvv")),
        iommu_check(node.run("cat /proc/cmdline").stdout, iommu_dir.stdout if iommu_dir.rc == 0 else None),
    ]


_NODE_SETTINGS = ("os packages", "persistence mode", "acs unit")


def _node_settings_cell(by_name):
    """The table's "node settings": failed if any of its checks failed, else ok."""
    states = [by_name[name]["state"] for name in _NODE_SETTINGS if name in by_name]
    return FAILED if FAILED in states else OK if states else "-"


@verify_check("os packages", column="node settings", cell=_node_settings_cell)
def node_settings(node, plan) -> list[Check]:
    """What the node itself needs: the OS packages, GPU persistence mode (with the driver and
    model the profile asks for) and, opt-in, the boot-time ACS unit."""
    return [os_packages(node, plan), persistence(node, plan), acs_unit(node, plan)]


def os_packages(node, plan) -> Check:
    """Every package the recipe needs (group_data/all.py os_packages) is installed."""
    if not plan.os_packages:
        return Check.nothing_to_check("os packages", "none asked for (os_packages is empty)")
    names = " ".join(shlex.quote(name) for name in plan.os_packages)
    found = node.run(f"dpkg-query -W -f '${{Package}} ${{db:Status-Status}}\\n' {names}")
    installed = {line.split()[0] for line in found.stdout.splitlines() if line.split()[1:] == ["installed"]}
    missing = [name for name in plan.os_packages if name not in installed]
    if missing:
        return Check("os packages", FAILED, f"not installed: {', '.join(missing)}")
    return Check("os packages", OK, f"{len(plan.os_packages)} installed")


def persistence(node, plan) -> Check:
    """Persistence mode on for every GPU, and nvidia-persistenced's unit enabled where the
    driver ships it (gpu.persistence_mode); the driver version and model the profile asks for."""
    found = _fact(node, GpuPersistence)
    if found is None:
        return Check.nothing_to_check("persistence mode", "no GPU: nvidia-smi not found")
    gpu = plan.profile.gpu
    problems = gpu_settings.problems(found["gpus"], min_driver=gpu.min_driver, model=gpu.model)
    if gpu.persistence_mode:
        off = gpu_settings.persistence_off(found["gpus"])
        if off:
            problems.append(f"persistence mode off on GPU {', '.join(off)}")
        unit = found["unit"]
        if unit.get("LoadState") == "loaded" and unit.get("UnitFileState") not in ("enabled", "static"):
            problems.append(f"{PERSISTENCED_UNIT} is {unit.get('UnitFileState')}, not enabled")
    if problems:
        return Check("persistence mode", FAILED, "; ".join(problems))
    return Check(
        "persistence mode",
        OK,
        gpu_settings.summary(found["gpus"]) + (", persistence mode on" if gpu.persistence_mode else ""),
    )


def acs_unit(node, plan) -> Check:
    """With pcie.disable_acs: the boot-time unit as rendered, enabled, and its run succeeded
    (its last line: what it cleared, or that the node has no PCI bridge)."""
    path = f"{plan.unit_dir}/{ACS_UNIT}"
    if not plan.profile.pcie.disable_acs:
        if node.file(path).exists:
            return Check("acs unit", FAILED, f"{path} is installed, pcie.disable_acs is false")
        return Check.nothing_to_check("acs unit", "not asked for (pcie.disable_acs: false)")
    installed = node.file(path)
    if not installed.exists:
        return Check("acs unit", FAILED, f"{path} is missing")
    problems = []
    if installed.content_string != acs_unit_text(plan.scripts.directory, plan.unit):
        problems.append(f"{path} differs from its rendering")
    state = dict(
        line.split("=", 1)
        for line in node.run(
            f"systemctl show -p UnitFileState,ActiveState,Result {ACS_UNIT}"
        ).stdout.splitlines()
        if "=" in line
    )
    if state.get("UnitFileState") != "enabled":
        problems.append(f"{ACS_UNIT} is {state.get('UnitFileState')}, not enabled")
    if (state.get("ActiveState"), state.get("Result")) != ("active", "success"):
        problems.append(f"{ACS_UNIT} is {state.get('ActiveState')} ({state.get('Result')})")
    said = [
        line
        for line in node.run(f"journalctl --no-pager -o cat -u {ACS_UNIT}").stdout.splitlines()
        if line.strip() and not line.startswith("{")
    ]
    last = said[-1] if said else "no output in the journal"
    if problems:
        return Check("acs unit", FAILED, f"{'; '.join(problems)}; last: {last}")
    return Check("acs unit", OK, f"enabled, ran at boot or deploy: {last}")


# Checks defined in modules of their own register on import (their order: the table's).
from sglang_deploy.verify import lock_exactness  # noqa: E402, F401
