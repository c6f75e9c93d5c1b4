"""SGLang's --api-key as a secret: never on a command line, given to the server through --config.

A profile's secret with `server_arg: api-key` lives in the env file (0600) like every secret;
the unit's ExecStartPre= (node/secret_args.py) writes it into a 0600 file of the start for the
server's --config, and every probe of ours reads it from the env file itself (the flags name the
file and the variable, never the value) and sends it as a Bearer token. Against the stand-in,
which guards every endpoint but /health, /ready and /metrics as SGLang 0.5.23 does.
"""

import json
import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_node_gate import gate_argv
from test_standin_server import free_port, standins  # noqa: F401 (fixture)

from sglang_deploy.facts.fleet import ServingView
from sglang_deploy.facts.metrics import EngineMetrics
from sglang_deploy.facts.serving import Serving
from sglang_deploy.node import node_status, rotation, secret_args
from sglang_deploy.node.lib import engine_auth, env_records, result, status
from sglang_deploy.node.lib.envfile import parse_env_file
from sglang_deploy.plan.fleet_hosts import rotation_for
from sglang_deploy.plan.host_plan import plan_for
from sglang_deploy.plan.hosts import deploy_defaults
from sglang_deploy.plan.render import render_env_file, render_unit
from sglang_deploy.profile.lint import run as lint
from sglang_deploy.profile.schema import load_profile
from sglang_deploy.verify.redact import Redactor

NODE = Path(secret_args.__file__).resolve().parent
# Every character the env file, JSON and YAML quote differently, all of them sendable in a header.
KEY = "sk-t3st\"$HOME`x`\\back'#;"
SECRETS = {"SGLANG_API_KEY": {"from_env": "SGLANG_API_KEY", "required": True, "server_arg": "api-key"}}
FAST = {"SGLANG_STANDIN_WARMUP_SECONDS": "0.1", "SGLANG_STANDIN_TOKENS_PER_SECOND": "200"}


def keyed(name="sandbox", **more):
    return load_profile(name, overrides={"secrets": {**SECRETS, **more}})


def node_data(**overrides):
    return {
        **deploy_defaults(),
        "ssh_hostname": "10.0.0.11",
        "profile": "sandbox",
        "profile_overrides": {"secrets": SECRETS},
        "sglang_deploy_dir": "/opt/my deploy",
        **overrides,
    }


# -- The profile: the lint refuses the key on a command line -----------------------------------


def test_the_lint_refuses_an_api_key_among_the_server_args_naming_the_way_that_works(tmp_path, capsys):
    profile = tmp_path / "keyed.yml"
    profile.write_text("extends: sandbox\nserver_args:\n  api-key: sk-on-the-command-line\n")
    assert lint([str(profile)]) == 1
    out = capsys.readouterr().out
    assert f"{profile}:3: server_args.api-key: a secret: " in out
    assert "secrets with server_arg: api-key" in out and "sk-on-the-command-line" not in out


def test_a_secret_server_arg_goes_to_the_argv_as_a_config_file_of_the_start():
    profile = keyed()
    assert profile.secret_server_args == {"api-key": "SGLANG_API_KEY"}
    assert profile.argv()[-2:] == ["--config", "/run/sglang-env/sglang/secret-args.yaml"]
    assert "--api-key" not in profile.argv()
    assert "--config" not in load_profile("sandbox").argv()  # no secret argument: as before


def test_a_server_arg_secret_must_be_a_token_a_header_carries():
    with pytest.raises(Exception) as err:
        keyed().env_file_vars({"SGLANG_API_KEY": "two words"})
    assert "printable ASCII without blanks" in str(err.value) and "two words" not in str(err.value)


# -- The unit: ExecStartPre writes the file, ExecStart names it ---------------------------------


def test_the_unit_writes_the_key_file_before_the_start_and_holds_no_key():
    plan = plan_for(node_data(), operator_env={"SGLANG_API_KEY": KEY})
    unit = plan.unit_text
    pre = next(line for line in unit.splitlines() if line.startswith("ExecStartPre="))
    assert pre == (
        'ExecStartPre=/usr/bin/python3 "/opt/my deploy/node/secret_args.py" '
        "--out /run/sglang-env/sglang/secret-args.yaml --arg api-key=SGLANG_API_KEY"
    )
    start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    assert start.endswith(" --config /run/sglang-env/sglang/secret-args.yaml")
    assert "RuntimeDirectory=sglang-env/sglang\n" in unit and "EnvironmentFile=/etc/sglang/sglang.env" in unit
    assert unit.index("\nEnvironmentFile=") < unit.index("\nExecStartPre=") < unit.index("\nExecStart=")
    assert KEY not in unit and "sk-t3st" not in unit and "sk-t3st" not in plan.hook_module
    assert parse_env_file(plan.env_text)["SGLANG_API_KEY"] == KEY  # where the value lives
    assert "ExecStartPre" not in render_unit(load_profile("sandbox"))


def _run_secret_args(tmp_path, environ, *pairs):
    out = tmp_path / "run" / env_records.SECRET_ARGS
    out.parent.mkdir(mode=0o700, exist_ok=True)
    argv = [sys.executable, str(NODE / "secret_args.py"), "--out", str(out)]
    for pair in pairs:
        argv += ["--arg", pair]
    done = subprocess.run(argv, env=environ, capture_output=True, text=True, timeout=30)
    return done, out


def test_secret_args_writes_the_key_alone_in_a_private_file_sglang_reads_as_yaml(tmp_path):
    # The environment systemd gives ExecStartPre= from the env file the deploy renders.
    environ = {
        "PATH": os.environ["PATH"],
        **parse_env_file(render_env_file(keyed(), {"SGLANG_API_KEY": KEY})),
    }
    done, out = _run_secret_args(tmp_path, environ, "api-key=SGLANG_API_KEY", "admin-api-key=UNSET_ADMIN")
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert json.loads(out.read_text()) == {"api-key": KEY} == yaml.safe_load(out.read_text())
    assert os.listdir(out.parent) == [env_records.SECRET_ARGS]  # no temporary file left
    assert KEY not in done.stdout + done.stderr and "sk-t3st" not in done.stdout + done.stderr
    found = result.parse(done.stdout.splitlines())
    assert (found["arguments"], found["unset"]) == (["api-key"], ["admin-api-key"])


def test_an_optional_key_left_unset_writes_a_config_the_engine_accepts(tmp_path):
    done, out = _run_secret_args(tmp_path, {"PATH": os.environ["PATH"]}, "api-key=SGLANG_API_KEY")
    assert done.returncode == 0 and json.loads(out.read_text()) == {} == yaml.safe_load(out.read_text())


def test_a_key_no_header_can_carry_fails_the_start_without_saying_it(tmp_path):
    environ = {"PATH": os.environ["PATH"], "SGLANG_API_KEY": "sk secret"}
    done, out = _run_secret_args(tmp_path, environ, "api-key=SGLANG_API_KEY")
    assert done.returncode == status.UNEXPECTED and not out.exists()
    assert "SGLANG_API_KEY" in done.stderr and "sk secret" not in done.stdout + done.stderr


def test_preflight_parses_the_argv_with_an_empty_config_in_place_of_the_file_of_the_start():
    argv = keyed().argv()
    with secret_args.placeholder(argv) as parsed:
        assert parsed[:-1] == argv[:-1] and yaml.safe_load(Path(parsed[-1]).read_text()) == {}
    assert not Path(parsed[-1]).exists()
    with secret_args.placeholder(["--config", "/etc/mine.yaml"]) as parsed:
        assert parsed == ["--config", "/etc/mine.yaml"]  # not ours: left as it is


# -- Every probe sends the key, read from the env file -----------------------------------------


@pytest.fixture
def guarded_server(tmp_path, standins):  # noqa: F811
    """A stand-in whose key comes from its --config file, written by secret_args.py from the env
    file the deploy renders: (server, the env file)."""
    env_file = tmp_path / "sglang.env"
    env_file.write_text(render_env_file(keyed(), {"SGLANG_API_KEY": KEY}))
    env_file.chmod(0o600)
    environ = {"PATH": os.environ["PATH"], **parse_env_file(env_file.read_text())}
    done, config = _run_secret_args(tmp_path, environ, "api-key=SGLANG_API_KEY")
    assert done.returncode == 0, done.stderr
    server = standins(["--config", str(config), "--enable-metrics"], env=FAST, tp=1)
    assert server.wait_log("fired up", timeout=30), server.log()
    assert server.request("GET", "/v1/models")[0] == 401
    assert server.request("GET", "/v1/models", key=KEY)[0] == 200
    return server, env_file


def auth(env_file):
    return ["--api-key-env-file", str(env_file), "--api-key-var", "SGLANG_API_KEY"]


def _gate(server, tmp_path, timeout, extra):
    target = ["--pid", str(server.pid), "--log", str(server.log_path)]
    argv = gate_argv(target, server.port, "tiny-standin", timeout, tmp_path / "gate.json", extra, settle=0.3)
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout + 30)


def test_the_gate_sends_the_key_and_without_it_times_out_naming_why(guarded_server, tmp_path):
    server, env_file = guarded_server
    done = _gate(server, tmp_path, 20, auth(env_file))
    assert done.returncode == status.READY, done.stdout + done.stderr
    assert KEY not in done.stdout and "sk-t3st" not in done.stdout
    refused = _gate(server, tmp_path, 2, [])
    assert refused.returncode == status.TIMEOUT
    assert "http: /v1/models 401 (an API key is wanted: none sent)" in refused.stdout
    # The journal excerpt holds SGLang's server_args line: its api_key is masked by name.
    assert "'api_key': '***'" in refused.stdout and "sk-t3st" not in refused.stdout


def test_the_recheck_sends_the_key(guarded_server, tmp_path):
    server, env_file = guarded_server
    assert _gate(server, tmp_path, 20, auth(env_file)).returncode == status.READY
    target = ["--pid", str(server.pid), "--log", str(server.log_path)]
    argv = gate_argv(target, server.port, "tiny-standin", json_path=tmp_path / "gate.json")
    with_key = subprocess.run(
        [*argv, *auth(env_file), "--recheck"], capture_output=True, text=True, timeout=60
    )
    assert with_key.returncode == status.READY, with_key.stdout
    without = subprocess.run([*argv, "--recheck"], capture_output=True, text=True, timeout=60)
    assert without.returncode == status.FAILED_START and "/ping 401" in without.stdout


def _decode_check(server, tmp_path, extra):
    argv = [sys.executable, str(NODE / "decode_check.py"), "--port", str(server.port)]
    argv += ["--served-name", "tiny-standin", "--profile", "keyed", "--history", str(tmp_path / "h.jsonl")]
    argv += ["--last-good-dir", str(tmp_path / "lg"), "--requests", "2", "--warmup", "0"]
    argv += ["--max-tokens", "8", "--timeout", "10", *extra]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    return done.returncode, result.parse(done.stdout.splitlines()), done.stdout + done.stderr


def test_the_decode_check_measures_with_the_key(guarded_server, tmp_path):
    server, env_file = guarded_server
    code, found, out = _decode_check(server, tmp_path, auth(env_file))
    assert code == status.READY and found["throughput"]["decode_tok_s"] > 0, out
    assert found["throughput"]["engine_version"] == "0.5.23+sandbox"  # /server_info, with the key
    code, found, out = _decode_check(server, tmp_path, [])
    assert code == status.DECODE_UNMEASURED and "HTTP 401" in found["cause"]
    assert "sk-t3st" not in out


def test_the_drain_and_status_ask_with_the_key(guarded_server):
    server, env_file = guarded_server
    key = engine_auth.key_of(
        type("Args", (), {"api_key_env_file": str(env_file), "api_key_var": "SGLANG_API_KEY"})
    )
    assert key == KEY
    assert rotation.serving(server.port, key=key)
    # 401: a server started with another key than the env file's (a key being changed) still
    # serves, and is taken out of rotation and drained as one (its load unknown).
    assert rotation.serving(server.port, key="sk-old") and rotation.serving(server.port)
    assert rotation.drain(server.port, timeout=2, key=key)[1:] == (0, None)
    assert rotation.drain(server.port, timeout=0.3)[2] == "/get_load answered HTTP 401"
    assert node_status.answers_ping(server.port, key=key) and not node_status.answers_ping(server.port)


def _on_the_node(command):
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60)
    return done.stdout.splitlines()


def test_the_controllers_facts_ask_with_the_key_the_node_reads(guarded_server, tmp_path):
    server, env_file = guarded_server
    fact = Serving()
    ready = fact.process(
        _on_the_node(fact.command(server.port, "tiny-standin", "/ping", auth=auth(env_file)))
    )
    assert ready == {"health": 200, "models": ["tiny-standin"], "ready": True}
    refused = fact.process(_on_the_node(fact.command(server.port, "tiny-standin", "/ping")))
    assert refused == {"health": 401, "models": [], "ready": False}
    view = ServingView()
    command = view.command(
        "http://10.0.0.11:1", server.port, str(tmp_path / "lg"), auth=tuple(auth(env_file))
    )
    assert view.process(_on_the_node(command)) == {"routers": {}, "ping": True, "last_good": False}
    closed = view.command("http://10.0.0.11:1", free_port(), str(tmp_path / "lg"), auth=tuple(auth(env_file)))
    assert view.process(_on_the_node(closed))["ping"] is False
    # /metrics is open with a key (SGLang's decide_request_auth): the scrape sends none.
    scrape = EngineMetrics()
    read = scrape.process(_on_the_node(scrape.command(server.port)))
    assert read.error is None and "# TYPE sglang:" in read.text


# -- No command line of ours carries the key ---------------------------------------------------


def test_no_command_line_our_builders_make_carries_the_key():
    data = node_data(node_exporter=True)
    plan = plan_for(data, operator_env={"SGLANG_API_KEY": KEY})
    scripts, env = plan.scripts, plan.env_path
    hosts = [("n1", data), ("r1", {**deploy_defaults(), "ssh_hostname": "10.0.0.5", "role": "router"})]
    turn = rotation_for("n1", data, hosts, 30000, auth=scripts.api_key_args())
    hooks = {"hook": "/x/sglang_deploy_env.py"}
    asks = {
        "gate": scripts.gate(),
        "recheck": scripts.recheck(),
        "decode": scripts.decode_check(),
        "status": scripts.node_status("/v", "/p"),
        "rotation": turn.wrap(scripts.directory, "c", "r"),
        "out": turn.out(scripts.directory),
        "back": turn.back(scripts.directory),
        "serving": Serving().command(30000, "tiny-standin", "/ping", auth=tuple(scripts.api_key_args())),
        "view": ServingView().command("http://n1:30000", 30000, "/lg", ("http://r",), auth=turn.auth),
    }
    others = [
        scripts.cycle(hooks),
        scripts.cycle(hooks, running=True),
        scripts.revert_cycle(hooks),
        scripts.preflight(),
        scripts.restart(),
        scripts.workers(),
        scripts.drift(),
        scripts.manifest(),
        scripts.save_last_good(hooks),
        scripts.compare_last_good(hooks),
        scripts.metrics_textfile(),
        scripts.detach_start(scripts.cycle(hooks), "id"),
        plan.unit_text,
        plan.hook_module,
        plan.hook_pth,
    ]
    for name, command in asks.items():
        words = shlex.split(command)
        at = words.index("--api-key-env-file")
        assert words[at : at + 4] == ["--api-key-env-file", env, "--api-key-var", "SGLANG_API_KEY"], name
    cycle = json.loads(shlex.split(scripts.cycle(hooks))[-1])
    assert all("--api-key-var" in cycle[step] for step in ("gate", "recheck", "decode"))
    for text in [*asks.values(), *others]:
        for form in (KEY, shlex.quote(KEY), json.dumps(KEY)[1:-1], "sk-t3st"):
            assert form not in text, text[:200]


def test_without_a_key_no_probe_reads_the_env_file():
    plan = plan_for(node_data(profile_overrides={}), operator_env={})
    assert plan.scripts.api_key_args() == []
    for command in (plan.scripts.gate(), plan.scripts.decode_check(), plan.scripts.node_status("/v", "/p")):
        assert "--api-key" not in command


# -- What we print: keys masked -----------------------------------------------------------------


def test_a_key_sglang_logs_is_masked_by_value_and_by_name():
    line = "server_args={'model_path': '/m', 'api_key': 'sk-a\\'b', 'admin_api_key': None, 'x': 1}"
    assert (
        engine_auth.masked(line)
        == "server_args={'model_path': '/m', 'api_key': '***', 'admin_api_key': None, 'x': 1}"
    )
    assert engine_auth.masked("ServerArgs(api_key='k1', admin_api_key=\"k2\")") == (
        "ServerArgs(api_key='***', admin_api_key=\"***\")"
    )
    assert engine_auth.masked("launch --api-key k1 --port 1 --admin-api-key=k2") == (
        "launch --api-key *** --port 1 --admin-api-key=***"
    )
    assert engine_auth.masked(f"token {KEY} seen", KEY) == "token *** seen"
    # make verify's Redactor names SGLang's field too, so a value the operator did not export is
    # masked where SGLang prints it.
    redact = Redactor.for_profile(keyed(), operator_env={})
    assert redact.text("server_args={'api_key': 'sk-node-only'}") == "server_args={'api_key': '***'}"
