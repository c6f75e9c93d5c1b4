"""Hostile values in a profile reach SGLang as literal data, never as code.

The server's argv goes to systemd's ExecStart= (no shell), variables to the env file
(EnvironmentFile=) and to the start-up hook (a Python module). Each is read back here the way
its consumer reads it (systemd's rules: sglang_deploy.plan.envfile and test_render's ExecStart parser; the hook by
Python itself) and executed where it can be, checking that nothing ran.
"""

import ast
import json
import os
import subprocess
import sys

import pytest
from test_render import parse_exec_line

from sglang_deploy.errors import ProfileError
from sglang_deploy.plan.envfile import parse_env_file
from sglang_deploy.plan.render import HOOK_MODULE, render_env_file, render_hook_module, render_unit
from sglang_deploy.profile.schema import load_profile

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
