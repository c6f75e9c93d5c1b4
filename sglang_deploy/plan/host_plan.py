"""Everything one host's deploy needs, computed on the controller from host data + profile."""

from __future__ import annotations

import getpass
import os
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path

from sglang_deploy import run_state
from sglang_deploy.errors import DeployError
from sglang_deploy.plan.commands.unit import NodeScripts
from sglang_deploy.plan.hosts import REPO_ROOT
from sglang_deploy.plan.locked_engine import LockedEngine, locked_engine
from sglang_deploy.plan.model_sources import HubClient
from sglang_deploy.plan.model_sources import targets as staging_targets
from sglang_deploy.plan.render import render_env_file, render_hook_module, render_hook_pth, render_unit
from sglang_deploy.plan.serving_group import apply as apply_group
from sglang_deploy.plan.settings import Settings
from sglang_deploy.plan.venv_names import venv_name, wheel_digests
from sglang_deploy.profile.lint import finding_lines
from sglang_deploy.profile.schema import Profile, load_profile

NODE_SCRIPTS_DIR = Path(__file__).resolve().parents[1] / "node"


@dataclass
class NodePlan:
    profile: Profile
    unit: str
    unit_text: str
    env_path: str
    env_text: str = field(repr=False)  # may hold secret values: never in a repr
    secret_values: list = field(repr=False)
    hook_module: str
    hook_pth: str
    hook_python: str
    settings: Settings = field(repr=False)  # the host's settings (plan/settings/), read as they are
    wheels: list
    scripts: NodeScripts
    lock_path: str
    lock_holder: str
    repair: tuple | None
    lint_warnings: list  # the profile's lint warnings, one line each, naming its file
    venvs_dir: str = ""  # one engine venv per pin set: the setting, or the service's own
    venv: str | None = None  # this pin set's venv on the node: bind_venv() names it
    models: list = field(default_factory=list)  # model_staging.StagingTarget: what is staged
    hf_token: str | None = field(default=None, repr=False)  # the profile's HF_TOKEN secret
    group: object = None  # serving_group.Member of a multi-node server; None: serves alone
    rotation: object = None  # fleet_hosts.Rotation: the routers this node serves behind
    node_units: tuple = ()  # every service's unit on this node, its own among them (plan/shared_nodes.py)
    locked: LockedEngine | None = None  # the engine's lock and wheels; None: pip resolves

    def venv_for(self, python_version: str) -> str:
        """The venv of this plan's pin set on a node whose ``engine.python`` is
        ``python_version``: named after its lock, or after its pins and wheels."""
        engine = self.profile.engine
        if self.locked is not None:
            name = self.locked.venv_name(engine.packages, python_version)
        else:
            name = venv_name(engine.packages, wheel_digests(self.wheels), python_version)
        return f"{self.venvs_dir}/{name}"

    def bind_venv(self, python_version: str) -> str:
        """Name the venv of this plan's pin set on a node whose ``engine.python`` is
        ``python_version``: the engine step builds it, preflight runs its parser, the start-up
        hook goes into it, drift and the manifest read it. The unit runs through
        ``engine.venv``, the link the restart cycle points at it."""
        self.venv = self.venv_for(python_version)
        self.scripts.venv = self.venv
        if not self.profile.hook.system_wide:
            self.hook_python = f"{self.venv}/bin/python"
        return self.venv

    @property
    def wheels_dir(self):
        return self.scripts.wheels_dir

    @property
    def hf_venv(self):
        """The Hub client's venv, when a model comes from the Hub."""
        return f"{self.settings.sglang_deploy_dir}/hf-venv"

    @property
    def hub_client(self):
        """How the node downloads a Hub source: the client venv's python, the token."""
        return HubClient(
            python=f"{self.hf_venv}/bin/python", run_dir=self.settings.run_dir, token=self.hf_token
        )

    @property
    def node_scripts(self):
        """(local path, remote path) of every on-node script."""
        return node_script_files(self.settings.sglang_deploy_dir)


def node_script_files(deploy_dir):
    """(local path, remote path) of every on-node script under ``deploy_dir``/node: the
    entry points, and under lib/ the library they share (a package there, so its
    ``__init__.py`` goes too)."""
    scripts = [path for path in sorted(NODE_SCRIPTS_DIR.glob("*.py")) if path.name != "__init__.py"]
    library = sorted((NODE_SCRIPTS_DIR / "lib").glob("*.py"))
    return [(path, f"{deploy_dir}/node/{path.name}") for path in scripts] + [
        (path, f"{deploy_dir}/node/lib/{path.name}") for path in library
    ]


def plan_holder():
    """Who holds a lock this run takes: shown to whoever waits for it."""
    return f"{getpass.getuser()}@{socket.gethostname()} pid {os.getpid()}"


def plan_for(data, operator_env=None, member=None) -> NodePlan:
    """The plan for a host whose data is ``data`` (pyinfra host.data, a plain mapping or its
    Settings: every key checked, plan/settings/);
    ``member``: its place in a serving group (serving_group.resolve), whose flags it runs."""
    operator_env = os.environ if operator_env is None else operator_env
    settings = run_state.host_settings(data)
    overrides = settings.profile_overrides or None
    profile = load_profile(settings.profile, overrides=overrides)
    lint_warnings = _lint(profile, overrides)
    profile = apply_group(profile, member)
    service = profile.service.name
    unit = f"{service}.service"
    deploy_dir = settings.sglang_deploy_dir
    scripts_dir = f"{deploy_dir}/node"
    env_dir = settings.env_dir
    run_dir = settings.run_dir
    secrets = profile.env_file_vars(operator_env)
    venv_python = f"{profile.engine.venv}/bin/python"
    env_path = f"{env_dir}/{service}.env"
    unit_path = f"{settings.unit_dir}/{unit}"
    locked = locked_engine(profile, deploy_dir)
    # A locked engine installs from the lock's wheelhouse: find_links only made the lock.
    wheels = [] if locked else _wheel_files(profile.engine.find_links)
    wheels_dir = f"{deploy_dir}/wheels" if wheels else None
    drift_names = _drift_names(profile, locked)
    return NodePlan(
        profile=profile,
        unit=unit,
        unit_text=render_unit(profile, env_dir=env_dir, scripts_dir=scripts_dir),
        env_path=env_path,
        env_text=render_env_file(profile, operator_env),
        secret_values=[secrets[name] for name in profile.secrets if name in secrets],
        hook_module=render_hook_module(profile),
        hook_pth=render_hook_pth(profile),
        hook_python=profile.engine.python if profile.hook.system_wide else venv_python,
        settings=settings,
        wheels=wheels,
        scripts=NodeScripts(
            scripts_dir,
            unit,
            profile,
            files={"env": env_path, "unit": unit_path},
            last_good_dir=f"{settings.state_dir}/{service}/last-good",
            wheels_dir=wheels_dir,
            run_dir=run_dir,
            min_free_gib=float(settings.venv_min_free_gib),
            lock=locked.remote_lock if locked else None,
            passport_path=f"{settings.state_dir}/passport.json",
            drift_names=drift_names,
            exports_metrics=bool(settings.node_exporter),
        ),
        lock_path=f"{run_dir}/{service}.lock",
        lock_holder=plan_holder(),
        repair=((scripts_dir, drift_names) if settings.repair else None),
        lint_warnings=lint_warnings,
        venvs_dir=settings.engine_venvs_dir(service),
        models=staging_targets(profile),
        hf_token=secrets.get("HF_TOKEN"),
        group=member,
        locked=locked,
    )


def _drift_names(profile: Profile, locked) -> list:
    """The distributions checked for drift (preflight, verify, repair) and recorded in the
    manifest: a locked engine's venv is its lock, so every locked distribution, none sampled
    (for the baseline's ~180, every file of a venv of several GB hashed at each preflight); an
    unlocked one's engine.drift_check."""
    return (
        sorted(e.name for e in locked.lock.entries.values()) if locked else list(profile.engine.drift_check)
    )


def print_lint_warnings(plan: NodePlan, out=None) -> None:
    """Print the plan's lint warnings that this run has not printed yet (once, not once per
    host of the same profile: the run state remembers them)."""
    warned = run_state.of().warned
    for line in plan.lint_warnings:
        if line not in warned:
            warned.add(line)
            print(f"sglang-deploy: {line}", file=out or sys.stderr)


def _lint(profile: Profile, overrides) -> list:
    """The profile's lint (flag names, NCCL variables): its errors refuse the deploy, before
    any host is touched; its warnings are returned."""
    where = _display(profile.source[0]) + (" with profile_overrides" if overrides else "")
    errors, warnings = finding_lines(profile, where=where)
    if errors:
        raise DeployError(
            "\n".join(errors + ["the profile has lint errors (`make lint-profiles`): nothing was changed"])
        )
    return warnings


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def _wheel_files(find_links):
    wheels = []
    for entry in find_links:
        path = Path(entry) if Path(entry).is_absolute() else REPO_ROOT / entry
        found = sorted(path.glob("*.whl")) if path.is_dir() else [path] if path.is_file() else []
        if not found:
            raise DeployError(f"engine.find_links: no wheel at {path} (run `make wheels`)")
        wheels.extend(found)
    return wheels
