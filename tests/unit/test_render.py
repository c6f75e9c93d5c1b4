"""Rendering: systemd quoting (checked against parsers written from systemd's rules), the unit,
the env file and the start-up hook (executed for real)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_deploy.errors import DeployError
from sglang_deploy.node.lib.envfile import parse_env_file  # systemd's EnvironmentFile= rules
from sglang_deploy.plan.render import (
    HOOK_MODULE,
    exec_start,
    render_env_file,
    render_hook_module,
    render_hook_pth,
    render_unit,
    systemd_env_quote,
    systemd_exec_quote,
    templates_dir,
)
from sglang_deploy.profile.schema import load_profile

NASTY = [
    "plain",
    "two words",
    "  padded  ",
    'say "hi"',
    "it's",
    "$HOME",
    "${HOME}",
    "$$",
    "# not a comment",
    "a#b",
    "; semi",
    "back\\slash",
    "trailing\\",
    "\\n literal",
    "`date`",
    "tab\there",
    "100%",
    "%h",
    "ünïcødé",
    "",
    "=",
    "a=b",
    "'single'",
    "$(rm -rf /)",
    '\\"',
    "\x1b[0m",
]


# -- Parsers written from systemd's documented rules (independent of the quoting code) --------

C_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    '"': '"',
    "'": "'",
    "s": " ",
}


def parse_exec_line(line: str) -> list:
    """An ExecStart= value as systemd turns it into argv (systemd.service(5), "Command lines"):
    words with C escapes and quotes removed, then %% -> % and $$ -> $ (a lone % or $ would be
    a specifier or a variable: the test fails on it)."""
    words, i, n = [], 0, len(line)
    while i < n:
        if line[i] == " ":
            i += 1
            continue
        word, quote, bare = "", None, True
        while i < n and (quote or line[i] != " "):
            c = line[i]
            if c == "\\":
                nxt, bare = line[i + 1], False
                if nxt == "x":
                    word += chr(int(line[i + 2 : i + 4], 16))
                    i += 4
                else:
                    word += C_ESCAPES[nxt]
                    i += 2
                continue
            if quote and c == quote:
                quote = None
            elif not quote and c in "\"'":
                quote, bare = c, False
            else:
                word += c
            i += 1
        assert quote is None, f"unbalanced quotes in {line!r}"
        assert not (bare and word == ";"), "a bare ; separates commands"
        words.append(word)
    return [_unspecify(w) for w in words]


def _unspecify(word: str) -> str:
    out, i = "", 0
    while i < len(word):
        if word[i] in "%$":
            assert word[i + 1 : i + 2] == word[i], f"unescaped {word[i]!r} in {word!r}"
            i += 1
        out += word[i]
        i += 1
    return out


# -- EnvironmentFile= quoting ----------------------------------------------------------------


@pytest.mark.parametrize(
    "value, quoted",
    [
        ("LL", '"LL"'),
        ("a b", '"a b"'),
        ('say "hi"', r'"say \"hi\""'),
        ("$HOME", r'"\$HOME"'),
        ("back\\slash", r'"back\\slash"'),
        ("`date`", r'"\`date\`"'),
        ("# x ; y", '"# x ; y"'),
        ("it's", '"it\'s"'),
        ("", '""'),
    ],
)
def test_env_quote_golden(value, quoted):
    assert systemd_env_quote(value) == quoted


@pytest.mark.parametrize("value", NASTY)
def test_env_quote_round_trip(value):
    assert parse_env_file(f"K={systemd_env_quote(value)}\n") == {"K": value}


@pytest.mark.parametrize("value", ["a\nb", "a\rb", "a\x00b"])
def test_env_quote_refuses_line_breaks(value):
    with pytest.raises(DeployError, match="must be one line"):
        systemd_env_quote(value)


def test_env_file_round_trip():
    env = {f"V{i}": value for i, value in enumerate(NASTY)}
    profile = load_profile("sandbox", overrides={"env": env})
    operator = {"HF_TOKEN": 'hf_"$x" #;\\'}
    text = render_env_file(profile, operator)
    assert parse_env_file(text) == profile.env_file_vars(operator)
    assert list(parse_env_file(text))[-1] == "HF_TOKEN"  # env by name, then secrets by name


def test_env_file_golden():
    text = render_env_file(load_profile("baseline"), {"HF_TOKEN": "hf_$abc"})
    assert text == (
        "# Rendered by sglang-deploy from profile baseline. Do not edit by hand.\n"
        "# systemd EnvironmentFile of sglang.service; mode 0600: it may hold secrets.\n"
        'NCCL_ALGO="Ring"\nNCCL_BUFFSIZE="16777216"\nNCCL_MAX_NCHANNELS="16"\n'
        'NCCL_NTHREADS="512"\nNCCL_P2P_LEVEL="SYS"\nNCCL_PROTO="LL"\nHF_TOKEN="hf_\\$abc"\n'
    )


def _profile_file(tmp_path, name, env, secrets):
    lines = [f"extends: {Path('profiles/sandbox.yml').resolve()}", "env:"]
    lines += [f"  {key}: {value!r}" for key, value in env]
    lines += ["secrets:"] * bool(secrets)
    lines += [f"  {key}: {{from_env: {source}}}" for key, source in secrets]
    (tmp_path / name).mkdir()
    path = tmp_path / name / "reordered.yml"  # the profile's name is its file's
    path.write_text("\n".join(lines) + "\n")
    return load_profile(str(path))


def test_reordering_env_and_secrets_changes_no_rendered_file(tmp_path):
    env = [("ZETA", "1"), ("ALPHA", "two words"), ("MID", "$x")]
    secrets = [("Z_TOKEN", "Z_SRC"), ("A_TOKEN", "A_SRC")]
    one = _profile_file(tmp_path, "one", env, secrets)
    other = _profile_file(tmp_path, "other", env[::-1], secrets[::-1])
    operator = {"Z_SRC": "z-secret", "A_SRC": "a-secret"}
    assert list(one.env) != list(other.env)  # the profiles really list them differently
    assert render_env_file(one, operator) == render_env_file(other, operator)
    assert render_hook_module(one) == render_hook_module(other)
    assert render_unit(one) == render_unit(other)
    names = list(parse_env_file(render_env_file(one, operator)))
    env_names = [n for n in names if n not in ("A_TOKEN", "Z_TOKEN")]
    assert env_names == sorted(env_names) and names[-2:] == ["A_TOKEN", "Z_TOKEN"]


def test_a_changed_value_still_changes_the_env_file(tmp_path):
    one = _profile_file(tmp_path, "one", [("A", "1"), ("B", "2")], [])
    other = _profile_file(tmp_path, "other", [("B", "3"), ("A", "1")], [])
    assert render_env_file(one, {}) != render_env_file(other, {})
    assert render_hook_module(one) != render_hook_module(other)


def test_env_file_optional_secret_left_out():
    assert "HF_TOKEN" not in render_env_file(load_profile("baseline"), {})


# -- ExecStart= quoting ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "arg, quoted",
    [
        ("--tp-size", "--tp-size"),
        ("/models/Kimi-K2.5-INT4", "/models/Kimi-K2.5-INT4"),
        ("0.0.0.0", "0.0.0.0"),
        ("$(rm -rf /)", '"$$(rm -rf /)"'),
        ("$HOME", '"$$HOME"'),
        ("100%", "100%%"),
        ("a b", '"a b"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("C:\\x", '"C:\\\\x"'),
        (";", '";"'),
        ("", '""'),
        ("tab\there", '"tab\\x09here"'),
        ("line\nbreak", '"line\\x0abreak"'),
        ("it's", '"it\'s"'),
    ],
)
def test_exec_quote_golden(arg, quoted):
    assert systemd_exec_quote(arg) == quoted


@pytest.mark.parametrize("arg", NASTY + ["line\nbreak", ";"])
def test_exec_quote_round_trip(arg):
    assert parse_exec_line(systemd_exec_quote(arg)) == [arg]


def test_exec_quote_refuses_nul():
    with pytest.raises(DeployError):
        systemd_exec_quote("a\x00b")


def test_exec_start_is_one_literal_argv():
    profile = load_profile(
        "eagle3-2step",
        overrides={
            "server_args": {
                "chat-template": "$(rm -rf /)",
                "json-model-override-args": '{"a": "b c"}',
                "download-dir": "100% ; `x`",
                "lora-paths": ["a b", "c"],
            }
        },
    )
    line = exec_start(profile)
    assert '--chat-template "$$(rm -rf /)"' in line
    assert parse_exec_line(line) == [
        "/opt/sglang/venv/bin/python",
        "-m",
        "sglang.launch_server",
        *profile.argv(),
    ]


# -- The unit --------------------------------------------------------------------------------

SANDBOX_UNIT = """\
# Rendered by sglang-deploy from profile sandbox. Do not edit by hand:
# change the profile and deploy again (this file is overwritten).
[Unit]
Description=SGLang sandbox: SGLang stand-in, TP2, on a sandbox node
After=network-online.target
Wants=network-online.target

[Service]
Type=exec
User=root
# Log lines reach the journal as they are written: the readiness gate reads them live.
Environment=PYTHONUNBUFFERED=1
EnvironmentFile=/etc/sglang/sglang.env
# Every process of the server records what its environment holds of the profile's variables
# (the start-up hook), in a directory of this start alone (root's, or the service user's,
# 0700; removed when the service stops): SGLang's process titles blank /proc/<pid>/environ.
Environment=SGLANG_DEPLOY_ENV_RECORDS=/run/sglang-env/sglang
RuntimeDirectory=sglang-env/sglang
RuntimeDirectoryMode=0700
ExecStart=/opt/sglang/venv/bin/python -m sglang.launch_server --model-path /models/tiny-standin \
--served-model-name tiny-standin --host 0.0.0.0 --port 30000 --tp-size 2 --trust-remote-code \
--mem-fraction-static 0.85 --context-length 512 --cuda-graph-max-bs-decode 32 --enable-metrics \
--reasoning-parser kimi_k2 --tool-call-parser kimi_k2
Restart=on-failure
RestartSec=10
TimeoutStartSec=1800
TimeoutStopSec=120
# A stop is SGLang's own: SIGTERM to the launcher alone, which drains, asks its schedulers to
# shut down and ends its process tree itself (docs/sglang-shutdown.md): exit 0, the unit
# inactive. Whatever of the unit is left once it exited, or at TimeoutStopSec, gets SIGKILL: a
# leftover worker would keep its GPU memory and the port. (SIGTERM to every process at once,
# control-group, killed the schedulers first, and the launcher's watchdog failed it: every
# stop left the unit failed.)
KillMode=mixed
KillSignal=SIGTERM
LimitNOFILE=1048576
SyslogIdentifier=sglang

[Install]
WantedBy=multi-user.target
"""


def test_unit_golden_sandbox():
    assert render_unit(load_profile("sandbox")) == SANDBOX_UNIT


def test_unit_of_an_sglang_that_sigkills_itself_after_a_stop():
    """0.5.17 ends a drained stop by SIGKILL of itself: that is success, and a crash that ends the
    same way is still restarted (tests/unit/test_unit_stop.py stops processes by it)."""
    pinned = {"engine": {"packages": ["sglang==0.5.17"]}}
    unit = render_unit(load_profile("sandbox", overrides=pinned))
    assert "KillMode=mixed\nKillSignal=SIGTERM\n" in unit
    assert "SuccessExitStatus=SIGKILL\nRestartForceExitStatus=SIGKILL\nLimitNOFILE=" in unit
    never = render_unit(load_profile("sandbox", overrides={**pinned, "service": {"restart": "no"}}))
    assert "SuccessExitStatus=SIGKILL\nLimitNOFILE=" in never and "RestartForceExitStatus" not in never


def test_unit_follows_service_settings():
    profile = load_profile(
        "sandbox",
        overrides={
            "description": "50% of the GPUs",
            "service": {"name": "sglang-b", "port": 30001, "user": "sglang", "restart": "always"},
        },
    )
    unit = render_unit(profile, env_dir="/run/sglang")
    for line in [
        "Description=SGLang sandbox: 50%% of the GPUs",
        "User=sglang",
        "Restart=always",
        "EnvironmentFile=/run/sglang/sglang-b.env",
        "SyslogIdentifier=sglang-b",
        "Environment=SGLANG_DEPLOY_ENV_RECORDS=/run/sglang-env/sglang-b",
        "RuntimeDirectory=sglang-env/sglang-b",
    ]:
        assert line + "\n" in unit
    assert " --port 30001 " in unit


def test_unit_refuses_an_odd_env_dir():
    with pytest.raises(DeployError, match="env_dir"):
        render_unit(load_profile("sandbox"), env_dir="etc/sglang env")


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze not installed")
def test_unit_passes_systemd_analyze_verify(tmp_path):
    (tmp_path / "venv" / "bin").mkdir(parents=True)  # ExecStart's binary must exist for verify
    (tmp_path / "venv" / "bin" / "python").symlink_to(shutil.which("python3") or sys.executable)
    profile = load_profile(
        "eagle3-3step",
        overrides={
            "engine": {"venv": str(tmp_path / "venv")},
            "description": "100% \\ 'quoted' \"too\"",
            "server_args": {"chat-template": "$(rm -rf /) ; `x` %h", "empty": "", "list": ["a b", ";"]},
        },
    )
    unit = tmp_path / "sglang-verify.service"
    unit.write_text(render_unit(profile))
    result = subprocess.run(
        ["systemd-analyze", "verify", unit.name], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "sglang-verify" not in result.stderr, result.stderr  # no warning about our unit


# -- The start-up hook -----------------------------------------------------------------------

HOOK_ENV = {"NCCL_PROTO": "LL", "PRESET": "from-profile", "ODD": "a 'b' \"c\" $HOME \\ # `d` ünï"}
SHOW = f"import json, os; print(json.dumps({{k: os.environ.get(k) for k in {sorted(HOOK_ENV)!r}}}))"


def hook_profile():
    return load_profile(
        "sandbox",
        overrides={"env": HOOK_ENV, "secrets": {"HF_TOKEN": {"from_env": "HF_TOKEN", "required": False}}},
    )


def run_python(python, code, extra_env, **kw):
    env = {k: v for k, v in os.environ.items() if k not in HOOK_ENV and not k.startswith("PYTHON")}
    result = subprocess.run(
        [python, "-c", code],
        env={**env, **extra_env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        **kw,
    )
    return json.loads(result.stdout)


def test_hook_module_sets_defaults_and_preset_variables_win(tmp_path):
    (tmp_path / f"{HOOK_MODULE}.py").write_text(render_hook_module(hook_profile()))
    code = f"import {HOOK_MODULE}; " + SHOW
    seen = run_python(sys.executable, code, {"PRESET": "from-process", "PYTHONPATH": str(tmp_path)})
    assert seen == {**HOOK_ENV, "PRESET": "from-process"}


def test_hook_redacts_the_keys_sglang_logs_in_its_server_args(tmp_path):
    """SGLang 0.5.23 logs `server_args={...}` with api_key and admin_api_key in clear."""
    (tmp_path / f"{HOOK_MODULE}.py").write_text(render_hook_module(hook_profile()))
    code = (
        f"import {HOOK_MODULE}, json, logging, sys; logging.basicConfig(stream=sys.stdout, format='%(message)s'); "
        "args = {'api_key': 'sk-canary-1', 'admin_api_key': \"it's-canary-2\", 'port': 30000}; "
        "logging.getLogger('sglang').warning(f'server_args={args}'); "
        "logging.getLogger('x').warning('nested %s', {'other_args': {'api_key': 'sk-canary-3'}}); "
        "logging.getLogger('x').warning(\"server_args=ServerArgs(api_key='sk-canary-4', x_api_key=None)\"); "
        "logging.getLogger('x').warning('api_key stays a word: %d', 1); print(json.dumps(1))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "canary" not in out, out
    assert "server_args={'api_key': '<redacted>', 'admin_api_key': '<redacted>', 'port': 30000}" in out
    assert "nested {'other_args': {'api_key': '<redacted>'}}" in out
    assert "server_args=ServerArgs(api_key='<redacted>', x_api_key=None)" in out
    assert "api_key stays a word: 1" in out


def test_hook_module_never_holds_secrets(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    text = render_hook_module(hook_profile())
    assert "HF_TOKEN" not in text and "hf_secret_value" not in text
    assert text.startswith("# Rendered by sglang-deploy from profile sandbox.")


def test_hook_pth_runs_in_a_venv_at_start_up(tmp_path):
    """The incident: a venv sitecustomize.py is shadowed by Debian's; a .pth is not."""
    base = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    subprocess.run([base, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    python = str(tmp_path / "venv" / "bin" / "python")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / f"{HOOK_MODULE}.py").write_text(render_hook_module(hook_profile()))
    (Path(site) / f"{HOOK_MODULE}.pth").write_text(render_hook_pth(hook_profile()))
    seen = run_python(python, SHOW, {"PRESET": "from-process"}, cwd=tmp_path)
    assert seen == {**HOOK_ENV, "PRESET": "from-process"}


def test_hook_pth_golden():
    assert render_hook_pth(load_profile("sandbox")) == (
        "# Rendered by sglang-deploy from profile sandbox: runs the start-up hook.\n"
        "import sglang_deploy_env\n"
    )


def test_templates_dir_holds_the_four_templates():
    names = {p.name for p in templates_dir().iterdir()}
    assert names >= {"sglang.service.j2", "sglang.env.j2", "sglang_env_hook.py.j2", "sglang_env_hook.pth.j2"}
