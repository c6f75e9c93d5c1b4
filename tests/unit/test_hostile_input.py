"""Hostile values in a profile reach SGLang as literal data, never as code.

The server's argv goes to systemd's ExecStart= (no shell), variables to the env file
(EnvironmentFile=) and to the start-up hook (a Python module). Each is read back here the way
its consumer reads it (systemd's rules: sglang_deploy.node.lib.envfile and test_render's
ExecStart parser; the hook by Python itself) and executed where it can be, checking that nothing ran.
"""

import ast
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pyinfra.api import StringCommand
from pyinfra.api.command import FileUploadCommand
from pyinfra.context import ctx_host
from pyinfra.facts.files import File
from test_render import parse_exec_line

from sglang_deploy.errors import DeployError, ProfileError
from sglang_deploy.facts.serving import ModelState
from sglang_deploy.node import model_manifest, model_stage
from sglang_deploy.node.lib import result
from sglang_deploy.node.lib.envfile import parse_env_file
from sglang_deploy.operations import model as model_ops
from sglang_deploy.plan import model_sources as model_sources
from sglang_deploy.plan.model_sources import HubClient, StagingTarget
from sglang_deploy.plan.render import HOOK_MODULE, render_env_file, render_hook_module, render_unit
from sglang_deploy.profile.schema import Source, load_profile

PWNED = "/tmp/pwned"


def hostile(marker):
    """Values that would run `touch <marker>` (or expand something) if any shell, systemd
    specifier or variable expansion, template engine or eval saw them."""
    return [
        f"$(touch {marker})",
        f"`touch {marker}`",
        f"x; touch {marker}",
        f"x | touch {marker}",
        f"x && touch {marker}",
        f"x || touch {marker}",
        f"x & touch {marker} &",
        f"'; touch {marker}; '",
        f'"; touch {marker}; "',
        f"\\$(touch {marker})",
        f"> {marker}",
        f"$(touch {PWNED})",
        f"`touch {PWNED}`",
        "; touch /tmp/pwned",
        "%h",
        "%n %i %% %",
        "${HOME}",
        "$HOME",
        "$$",
        "$",
        "~",
        "*",
        "?",
        "[a-z]",
        "# not a comment",
        "a=b",
        "--port",
        "-",
        "",
        " ",
        "  padded  ",
        "a\tb",
        "back\\slash",
        "trailing\\",
        '"',
        "'",
        "\\x41",
        "\\n",
        "{{ 7 * 7 }}",
        "{% raw %}",
        "{{ profile }}",
        f"'); __import__('os').system('touch {marker}'); ('",
        f'"""; touch {marker}; """',
        "'''",
        "\u2028",
        "\x85",
        "\x0b\x0c",
        "\x1b[31mred",
        "ünïcødé",
    ]


@pytest.fixture
def marker(tmp_path):
    """A file nothing may create; /tmp/pwned may not appear either."""
    pwned_before = os.path.exists(PWNED)
    path = tmp_path / "pwned"
    yield str(path)
    assert not path.exists(), "a hostile value ran"
    assert pwned_before or not os.path.exists(PWNED), "a hostile value ran"


def exec_start_words(profile):
    """The rendered unit's ExecStart= as systemd splits it into argv. systemd ends a unit
    file line at \n or \r only (not at \v, \f, U+0085 or U+2028, as str.splitlines would)."""
    lines = [line for line in render_unit(profile).split("\n") if line.startswith("ExecStart=")]
    assert "\r" not in lines[0]
    assert len(lines) == 1
    return parse_exec_line(lines[0][len("ExecStart=") :])


# -- Flag values through ExecStart= ----------------------------------------------------------


def test_flag_values_are_single_literal_arguments(marker):
    values = hostile(marker)
    flags = {f"x{i}": value for i, value in enumerate(values)}
    profile = load_profile("baseline", overrides={"server_args": flags})
    words = exec_start_words(profile)
    assert words == ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server", *profile.argv()]
    for i, value in enumerate(values):
        position = words.index(f"--x{i}")
        assert words[position + 1] == value  # one argument, byte-exact


def test_list_values_stay_separate_literal_arguments(marker):
    values = hostile(marker)
    profile = load_profile("baseline", overrides={"server_args": {"many": values}})
    words = exec_start_words(profile)
    position = words.index("--many")
    assert words[position + 1 : position + 1 + len(values)] == values


def test_hostile_model_path_and_name_stay_literal(marker):
    profile = load_profile(
        "baseline",
        overrides={
            "model": {
                "path": f"/models/$(touch {marker}) ; `x` %h ${{HOME}}",
                "served_name": f"m;touch{marker}|$HOME%h`x`",
            }
        },
    )
    words = exec_start_words(profile)
    assert words[3:7] == [
        "--model-path",
        profile.model.path,
        "--served-model-name",
        profile.model.served_name,
    ]


def test_the_parsed_argv_runs_without_a_shell(marker, tmp_path):
    """Run the words systemd would exec (the interpreter swapped for one that prints its
    argv): every value arrives as given and nothing else happens."""
    values = hostile(marker)
    profile = load_profile("baseline", overrides={"server_args": {"v": values, "w": values[0]}})
    words = exec_start_words(profile)
    show = "import json, sys; print(json.dumps(sys.argv[1:]))"
    result = subprocess.run(
        [sys.executable, "-c", show, *words[3:]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(result.stdout) == profile.argv()


# -- What cannot be written is refused by the loader -----------------------------------------


@pytest.mark.parametrize("breaker", ["\n", "\r", "\r\n", "\x00"])
def test_env_values_that_break_lines_are_refused(breaker):
    with pytest.raises(ProfileError) as err:
        load_profile("baseline", overrides={"env": {"NCCL_DEBUG": f"INFO{breaker}NCCL_PROTO=Simple"}})
    assert str(err.value) == (
        "profile_overrides: env.NCCL_DEBUG: must be one line (no newline, carriage return or NUL)"
    )


@pytest.mark.parametrize(
    "overrides, where",
    [
        ({"description": "d\nExecStartPre=/bin/touch /tmp/pwned"}, "description"),
        ({"model": {"path": "/m\nExecStartPre=/bin/touch /tmp/pwned"}}, "model.path"),
        ({"model": {"served_name": "m\nExecStartPre=/bin/touch"}}, "model.served_name"),
        ({"service": {"host": "0.0.0.0\nExecStartPre=/bin/touch"}}, "service.host"),
        ({"service": {"user": "root\nExecStartPre=/bin/touch"}}, "service.user"),
        ({"service": {"name": "sglang\nExecStartPre=/bin/touch"}}, "service.name"),
        ({"engine": {"venv": "/opt/v\nExecStartPre=/bin/touch"}}, "engine.venv"),
        ({"server_args": {"chat-template": "a\x00b"}}, "server_args.chat-template"),
        ({"server_args": {"many": ["a", "b\x00"]}}, "server_args.many"),
        ({"env": {"X\nY": "1"}}, "env.X\nY"),
    ],
)
def test_unit_line_injection_is_refused(overrides, where):
    with pytest.raises(ProfileError) as err:
        load_profile("baseline", overrides=overrides)
    assert err.value.key == where


def test_a_newline_in_a_flag_value_stays_inside_one_argument():
    """Not refused: ExecStart= gets it C-escaped, and SGLang gets one argument with a
    newline in it (a chat template may well have one)."""
    profile = load_profile(
        "baseline", overrides={"server_args": {"chat-template": "line\nExecStartPre=/bin/touch /tmp/pwned"}}
    )
    unit = render_unit(profile)
    assert not any(line.startswith("ExecStartPre") for line in unit.splitlines())
    words = exec_start_words(profile)
    assert words[words.index("--chat-template") + 1] == "line\nExecStartPre=/bin/touch /tmp/pwned"


# -- Variables through the env file ----------------------------------------------------------


def test_env_values_round_trip_through_the_env_file(marker):
    env = {f"V{i}": value for i, value in enumerate(hostile(marker))}
    profile = load_profile("baseline", overrides={"env": env})
    text = render_env_file(profile, {})
    assert parse_env_file(text) == {**profile.env}
    assert {k: parse_env_file(text)[k] for k in env} == env


def test_secret_values_round_trip_through_the_env_file(marker):
    profile = load_profile("baseline")
    for value in hostile(marker):
        text = render_env_file(profile, {"HF_TOKEN": value})
        assert parse_env_file(text)["HF_TOKEN"] == value


# -- Variables through the start-up hook -----------------------------------------------------


def test_hook_values_are_literal_and_nothing_runs(marker, tmp_path):
    env = {f"V{i}": value for i, value in enumerate(hostile(marker))}
    profile = load_profile("baseline", overrides={"env": env})
    (tmp_path / f"{HOOK_MODULE}.py").write_text(render_hook_module(profile))
    show = (
        f"import {HOOK_MODULE}, json, os; "
        f"print(json.dumps({{k: os.environ.get(k) for k in {sorted(env)!r}}}))"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "V"))}
    result = subprocess.run(
        [sys.executable, "-c", show],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**clean, "PYTHONPATH": str(tmp_path)},
    )
    assert json.loads(result.stdout) == env
    assert result.stderr == ""


def test_hook_and_env_file_carry_the_same_values(marker, tmp_path):
    env = {f"V{i}": value for i, value in enumerate(hostile(marker))}
    profile = load_profile("baseline", overrides={"env": env})
    module = ast.parse(render_hook_module(profile))
    (assignment,) = [
        node
        for node in module.body
        if isinstance(node, ast.Assign) and [t.id for t in node.targets] == ["VARIABLES"]
    ]
    variables = ast.literal_eval(assignment.value)  # a plain literal: nothing to evaluate
    from_env_file = parse_env_file(render_env_file(profile, {}))
    assert variables == {k: from_env_file[k] for k in profile.env} == profile.env


# -- Model directories and file names through the node's shell -------------------------------

NODE_SCRIPTS = Path(__file__).resolve().parents[2] / "sglang_deploy" / "node"
# Every one would run `touch pwned` (in the shell's working directory), split into two words,
# or read as a glob or an option, were it not quoted.
HOSTILE_DIR = "my model $(touch pwned) `touch pwned` 'q' \"d\" ; touch pwned; * ~ $HOME \\"
HOSTILE_FILES = {
    "config.json": "{}",
    "my copy.json": "a space",
    "$(touch pwned).safetensors": "substitution",
    "it's `touch pwned`.bin": "quote and backticks",
    "sub dir/a ; touch pwned & b.txt": "a subdirectory with a space",
    "-n": "an option's name",
    "*": "a glob",
    '"; touch pwned; "': "double quotes",
}


class StagingHost:
    """Just enough of pyinfra's host for model_staged: its facts are run for real, by bash, in
    ``shell_cwd`` (where a substitution that ran would leave `pwned`)."""

    name = "node1"

    def __init__(self, shell_cwd, rsync=False):
        self.shell_cwd = shell_cwd
        self.rsync = rsync
        self.noops = []

    def get_fact(self, fact, **kwargs):
        if fact is File:
            return {"mode": 755}
        assert fact is ModelState
        found = ModelState().process(bash(ModelState().command(**kwargs), self.shell_cwd).splitlines())
        return dict(found, rsync=self.rsync)

    def noop(self, text):
        self.noops.append(text)

    def log(self, *args, **kwargs):
        pass


def bash(command, cwd):
    done = subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (command, done.stderr)
    return done.stdout


def run_on_node(commands, cwd):
    """Execute what model_staged yielded as pyinfra would over SFTP: shell commands by bash,
    uploads as literal copies, the staging scripts' FunctionCommand by bash too."""
    for command in commands:
        if isinstance(command, (str, StringCommand)):
            bash(command if isinstance(command, str) else command.get_raw_value(), cwd)
        elif isinstance(command, FileUploadCommand):
            if isinstance(command.src, str):
                shutil.copyfile(command.src, command.dest)
            else:
                Path(command.dest).write_text(command.src.getvalue())
        elif command.function is model_ops._finish:
            found = result.parse(bash(command.args[1], cwd).splitlines())
            assert found["status"] == 0, found
        else:
            assert command.function in (model_ops._say, model_ops._start_clock, model_ops._say_rate)


@pytest.fixture
def model_source(tmp_path, monkeypatch):
    cache = tmp_path / "cache"  # the manifest cache: this test's own
    monkeypatch.setattr(model_ops, "local_manifest", lambda d: model_sources.local_manifest(d, cache))
    monkeypatch.setattr(model_ops, "_swap_mode", lambda in_group: (False, False))  # the default setting
    source = tmp_path / "controller" / "model"
    for name, text in HOSTILE_FILES.items():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_text(text)
    return source


def staged_files(directory):
    return {
        str(p.relative_to(directory)): p.read_text()
        for p in directory.rglob("*")
        if p.is_file() and p.name != model_manifest.MANIFEST_NAME
    }


def stage(tmp_path, source, node_dir, hub=None):
    shell_cwd = tmp_path / "cwd"
    shell_cwd.mkdir(exist_ok=True)
    target = StagingTarget("model", str(node_dir), Source(controller=str(source)))
    fake = StagingHost(shell_cwd)
    with ctx_host.use(fake):
        commands = list(model_ops.model_staged._inner(target, str(NODE_SCRIPTS), hub=hub))
    run_on_node(commands, shell_cwd)
    model_stage.swap({str(node_dir): None})  # the restart cycle's model step
    assert list(shell_cwd.iterdir()) == [], "a hostile name ran in the node's shell"
    return commands, fake


def test_a_hostile_model_directory_and_file_names_stage_literally(tmp_path, model_source):
    node_dir = tmp_path / "node" / "models" / HOSTILE_DIR
    node_dir.parent.mkdir(parents=True)
    stage(tmp_path, model_source, node_dir)
    assert staged_files(node_dir) == HOSTILE_FILES
    assert sorted(p.name for p in node_dir.parent.iterdir()) == [HOSTILE_DIR]  # staging swapped in
    # The profile's lint accepts that directory: it reaches ExecStart= quoted for systemd.
    profile = load_profile("baseline", overrides={"model": {"path": str(node_dir)}})
    assert exec_start_words(profile)[4] == str(node_dir)


def test_restaging_a_hostile_directory_replaces_only_what_changed(tmp_path, model_source):
    node_dir = tmp_path / "node" / HOSTILE_DIR
    node_dir.parent.mkdir(parents=True)
    stage(tmp_path, model_source, node_dir)
    (model_source / "my copy.json").write_text("changed")
    commands, _ = stage(tmp_path, model_source, node_dir)
    uploads = [c.dest for c in commands if isinstance(c, FileUploadCommand) and isinstance(c.src, str)]
    assert len(uploads) == 1
    assert staged_files(node_dir) == {**HOSTILE_FILES, "my copy.json": "changed"}
    _, fake = stage(tmp_path, model_source, node_dir)  # and now nothing is left to do
    assert len(fake.noops) == 1 and "matches its manifest" in fake.noops[0]


def test_the_hub_token_directory_is_quoted(tmp_path, monkeypatch):
    monkeypatch.setattr(model_ops, "_swap_mode", lambda in_group: (False, False))
    run_dir = tmp_path / "run $(touch pwned) dir"
    run_dir.mkdir()
    hub = HubClient(python="python3", run_dir=str(run_dir), token="hf_secret")
    target = StagingTarget(
        "model",
        str(tmp_path / "m"),
        Source(huggingface={"repo": "org/m", "revision": "0" * 40}),
    )
    shell_cwd = tmp_path / "cwd"
    shell_cwd.mkdir()
    with ctx_host.use(StagingHost(shell_cwd)):
        commands = list(model_ops.model_staged._inner(target, str(NODE_SCRIPTS), hub=hub))
    for command in commands:
        if isinstance(command, StringCommand):
            bash(command.get_raw_value(), shell_cwd)
    assert (run_dir / "hub").is_dir() and oct((run_dir / "hub").stat().st_mode & 0o777) == "0o700"
    assert list(shell_cwd.iterdir()) == []


@pytest.mark.skipif(shutil.which("rsync") is None, reason="no rsync on this machine")
def test_rsync_passes_a_hostile_staging_path_and_names_literally(tmp_path, model_source):
    """rsync through a stand-in for ssh that, as ssh does, hands the remote command line to a
    shell. RSYNC_OLD_ARGS=1: what an rsync before 3.2.4 (Debian 11, Ubuntu 20.04) does by default."""
    shell_cwd = tmp_path / "cwd"
    shell_cwd.mkdir()
    rsh = tmp_path / "fake-ssh"
    rsh.write_text(f'#!/bin/sh\nshift\ncd {shlex.quote(str(shell_cwd))} && exec sh -c "$*"\n')
    rsh.chmod(0o755)
    staging = tmp_path / "node" / f"{HOSTILE_DIR}.staging"
    staging.mkdir(parents=True)
    argv = model_sources.rsync_argv([str(rsh)], "node1", model_source, str(staging))
    done = subprocess.run(
        argv,
        input="".join(f"{name}\n" for name in HOSTILE_FILES),
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "RSYNC_OLD_ARGS": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert staged_files(staging) == HOSTILE_FILES
    assert list(shell_cwd.iterdir()) == []


@pytest.mark.parametrize("name", ["a\nb.json", "cr\r.bin", "tab\there"])
def test_a_model_file_name_with_a_control_character_is_refused(tmp_path, name):
    source = tmp_path / "model"
    source.mkdir()
    (source / name).write_text("x")
    with pytest.raises(DeployError, match="control character"):
        model_sources.local_manifest(source, cache_dir=tmp_path / "cache")
