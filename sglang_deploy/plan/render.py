"""Rendering a profile into the files a node gets: unit, env file and start-up hook.

Pure functions of the profile; nothing here touches a host. Quoting follows systemd's own
parsers, so every value reaches the server byte-exact with no shell in between.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path

import jinja2

from sglang_deploy.errors import DeployError
from sglang_deploy.node.lib import env_records
from sglang_deploy.plan.commands import secret_args_argv
from sglang_deploy.plan.settings import default
from sglang_deploy.profile.engine_flags import pinned_version
from sglang_deploy.profile.schema import Profile

ENV_DIR = default("env_dir")  # the deploy passes its own `env_dir`
SCRIPTS_DIR = f"{default('sglang_deploy_dir')}/node"  # the deploy passes its `sglang_deploy_dir`/node
HOOK_MODULE = "sglang_deploy_env"  # <site-packages>/sglang_deploy_env.{py,pth}

_ENV_SPECIAL = re.compile(r'([\\"`$])')
_EXEC_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")
_PLAIN_PATH = re.compile(r"(/[A-Za-z0-9._+@-]+)+")
# SGLang before 0.5.23 ends even a drained stop by SIGKILL of itself (0.5.17: exit status 137
# 3-4 s after the SIGTERM; docs/sglang.md "Stopping"); 0.5.23 exits 0 (docs/sglang-shutdown.md).
CLEAN_STOP_SINCE = (0, 5, 23)


def templates_dir() -> Path:
    """templates/ at the repository root."""
    return Path(__file__).resolve().parents[2] / "templates"


def systemd_env_quote(value: str) -> str:
    """`value` as a double-quoted EnvironmentFile= value that systemd reads back unchanged.

    systemd's env-file parser (src/basic/env-file.c) turns \\" \\\\ \\` \\$ back into the
    character and keeps everything else inside double quotes as is (`#`, `;`, `'`, spaces);
    EnvironmentFile= expands no variables. A newline cannot be written: escaped, it is a line
    continuation, so it is refused.
    """
    if any(c in value for c in "\n\r\x00"):
        raise DeployError("an env file value must be one line (no newline, carriage return or NUL)")
    return '"' + _ENV_SPECIAL.sub(r"\\\1", value) + '"'


def systemd_exec_quote(arg: str) -> str:
    """One ExecStart= word that systemd turns back into exactly `arg` (systemd.service(5),
    "Command lines"): `%` is doubled (specifiers), `$` is doubled (variable expansion), and a
    word with anything beyond [A-Za-z0-9_@%+=:,./-] goes in double quotes with C escapes, which
    also keeps a lone `;` from being read as a command separator.
    """
    if "\x00" in arg:
        raise DeployError("a command-line argument cannot contain NUL")
    arg = arg.replace("%", "%%").replace("$", "$$")
    if _EXEC_PLAIN.fullmatch(arg):
        return arg
    return '"' + "".join(_c_escape(c) for c in arg) + '"'


def _c_escape(c: str) -> str:
    if c in '\\"':
        return "\\" + c
    if ord(c) < 0x20 or c == "\x7f":
        return f"\\x{ord(c):02x}"
    return c


def exec_start(profile: Profile) -> str:
    """ExecStart=: the venv's interpreter running sglang.launch_server with the profile's argv."""
    argv = [f"{profile.engine.venv}/bin/python", "-m", "sglang.launch_server", *profile.argv()]
    return " ".join(systemd_exec_quote(arg) for arg in argv)


def exec_start_pre(profile: Profile, scripts_dir: str = SCRIPTS_DIR) -> str | None:
    """ExecStartPre=: node/secret_args.py writing the secret server arguments (the env file's
    variables, by name) into the file the argv's --config names; None without any."""
    if not profile.secret_server_args:
        return None
    path = env_records.secret_args_path(profile.service.name)
    argv = secret_args_argv(scripts_dir, path, profile.secret_server_args)
    return " ".join(systemd_exec_quote(arg) for arg in argv)


def stop_kills_itself(profile: Profile) -> bool:
    """Whether the pinned SGLang ends a stop by SIGKILL of itself (a release before
    CLEAN_STOP_SINCE); an engine not pinned is taken for a current one."""
    version = pinned_version(profile.engine.packages)
    release = re.match(r"\d+(\.\d+)*", version or "")
    return bool(release) and tuple(int(part) for part in release.group(0).split(".")) < CLEAN_STOP_SINCE


def render_unit(profile: Profile, env_dir: str = ENV_DIR, scripts_dir: str = SCRIPTS_DIR) -> str:
    """The systemd unit, /etc/systemd/system/<service.name>.service; ``scripts_dir``: our node
    scripts' directory on the node (secret_args.py, for secret server arguments)."""
    if not _PLAIN_PATH.fullmatch(env_dir):
        raise DeployError(f"env_dir {env_dir!r}: must be an absolute path of letters, digits and ._+@-")
    return _render(
        "sglang.service.j2",
        profile,
        exec_start=exec_start(profile),
        exec_start_pre=exec_start_pre(profile, scripts_dir),
        env_file=f"{env_dir}/{profile.service.name}.env",
        records_var=env_records.RECORDS_VAR,
        records_dir=env_records.records_dir(profile.service.name),
        runtime_directory=env_records.runtime_directory(profile.service.name),
        stop_kills_itself=stop_kills_itself(profile),
    )


def render_env_file(profile: Profile, operator_env: Mapping[str, str]) -> str:
    """The env file (mode 0600): env, then the secrets set in `operator_env`, each by name."""
    variables = profile.env_file_vars(operator_env)
    env = {name: value for name, value in variables.items() if name not in profile.secrets}
    secrets = {name: value for name, value in variables.items() if name in profile.secrets}
    return _render("sglang.env.j2", profile, variables={**canonical_order(env), **canonical_order(secrets)})


def render_hook_module(profile: Profile) -> str:
    """sglang_deploy_env.py: setdefault of every `env` variable (never secrets), by name."""
    return _render(
        "sglang_env_hook.py.j2",
        profile,
        variables=canonical_order(profile.hook_vars()),
        records_var=env_records.RECORDS_VAR,
    )


def canonical_order(variables: Mapping[str, str]) -> dict:
    """`variables` sorted by name. Environment variables have no order (none refers to another:
    neither EnvironmentFile= nor the hook expands anything), so the files a node gets depend
    only on what the variables are: reordering `env:` in a profile rewrites nothing and
    restarts nothing."""
    return dict(sorted(variables.items()))


def render_hook_pth(profile: Profile) -> str:
    """sglang_deploy_env.pth: imports the hook at interpreter start-up. A .pth runs from
    site-packages even where the distro's sitecustomize.py shadows a venv's own."""
    return _render("sglang_env_hook.pth.j2", profile)


def _render(template: str, profile: Profile, **context) -> str:
    return (
        _jinja()
        .get_template(template)
        .render(profile=profile, service=profile.service, module=HOOK_MODULE, **context)
    )


@cache
def _jinja() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates_dir()),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        env_quote=systemd_env_quote, pyrepr=repr, unit_specifiers=lambda text: text.replace("%", "%%")
    )
    return env
