"""`make verify`'s checks of what the server starts from and carries: the env file, the unit,
the start-up hook, every scheduler's environment, NCCL's confirmation of its variables."""

from __future__ import annotations

import difflib
import json
import shlex

from sglang_deploy.facts.serving import UnitState, WorkerEnvironment
from sglang_deploy.node.lib import status
from sglang_deploy.node.lib.envfile import parse_env_file
from sglang_deploy.node.workers import is_scheduler
from sglang_deploy.verify.nccl_confirm import confirm
from sglang_deploy.verify.registry import ownership, read_fact, redactor, tp_size, verify_check
from sglang_deploy.verify.verdict import FAILED, OK, Check

# Run by the venv's interpreter with an empty environment, so only the start-up hook sets variables.


HOOK_PROBE = (
    "import json, os, sys; "
    "hook = sys.modules.get('sglang_deploy_env'); "
    "print(json.dumps({'hook': hook and hook.__file__, 'env': dict(os.environ)}))"
)


SITE_DIRS_PROBE = "import json, site; print(json.dumps(site.getsitepackages()))"


@verify_check("env file")
def env_file(node, plan) -> Check:
    """Root's alone (0600 in a 0700 directory), every variable of the profile with its value,
    and every secret the operator exported (by name)."""
    redact = redactor(plan)
    problems = ownership(node, plan.settings.env_dir, "root", 0o700) + ownership(
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
    path = f"{plan.settings.unit_dir}/{plan.unit}"
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
    """tp-size schedulers, every one (and the detokenizer) carrying every variable of the
    profile, as each process's start-up hook recorded it (node/lib/env_records.py)."""
    report = (
        read_fact(
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
    schedulers = [worker for worker in report["workers"] if is_scheduler(worker)]
    if len(schedulers) != tp_size(plan):
        return Check("workers' env", FAILED, f"{len(schedulers)} schedulers, tp-size {tp_size(plan)}")
    others = len(report["workers"]) - len(schedulers)
    return Check(
        "workers' env",
        OK,
        f"{len(schedulers)} schedulers{f' and {others} more' if others else ''} carry "
        f"{len(plan.profile.hook_vars())} variables (their start-up hook's records)",
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
    invocation = read_fact(node, UnitState, unit=plan.unit, properties=("InvocationID",)).get(
        "InvocationID", ""
    )
    journal = node.run(
        f"journalctl --no-pager -o cat _SYSTEMD_INVOCATION_ID={shlex.quote(invocation)}"
    ).stdout
    expected = {name: value for name, value in env.items() if name.startswith("NCCL_")}
    tp = tp_size(plan)
    report = confirm(journal.splitlines(), expected, ranks_expected=tp)
    source = "stand-in's NCCL-format lines (simulated)" if _is_standin(node, plan) else "NCCL's log"
    if report.ok:
        return Check("nccl confirmation", OK, f"{tp} ranks confirm the profile's values ({source})")
    return Check("nccl confirmation", FAILED, f"{'; '.join(report.failures)} ({source})")


def _is_standin(node, plan):
    python = f"{plan.profile.engine.venv}/bin/python"
    version = node.run(f"{python} -c 'import sglang; print(sglang.__version__)'").stdout.strip()
    return version.endswith("+sandbox")
