"""`make verify`'s checks of the engine and the model: installed files against their wheels'
RECORD, the venv of the profile's pin set actually running, the model files against their
manifest."""

from __future__ import annotations

import json
import os
import shlex

from sglang_deploy.facts.serving import UnitState
from sglang_deploy.node.lib import status
from sglang_deploy.node.lib.result import parse as parse_result
from sglang_deploy.plan.commands import model_check_command
from sglang_deploy.verify.registry import read_fact, verify_check
from sglang_deploy.verify.verdict import FAILED, OK, WARNING, Check


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
    wanted = plan.venv_for(version.stdout.strip())
    target = node.run(f"readlink -f {shlex.quote(engine.venv)}").stdout.strip()
    pid = read_fact(node, UnitState, unit=plan.unit, properties=("MainPID",)).get("MainPID", "")
    if not pid.isdigit() or pid == "0":
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
