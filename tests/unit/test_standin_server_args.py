"""The stand-in's argument parser has all of SGLang 0.5.23's options and judges argv as SGLang.

engine-standin/sglang/srt/server_args.py builds its parser from server_args_spec.py, a table
generated from the real parser by engine-standin/tools/gen_server_args_spec.py. Without the
real SGLang: the option strings are the committed list the lint checks flags against, the
parser is the table, and values are typed and refused as SGLang does. Where the venv with
the real SGLang is present (tests/unit/test_real_sglang_parser.py builds it): the table is
what the generator writes today, both parsers' actions are alike, and a matrix of argvs,
every option string's and a bad value for every option that can have one, gets the same
verdict, error line and typed values from both.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sglang_deploy.profile import engine_flags
from tests.unit.test_real_sglang_parser import STANDIN, ask, clean_env, marker_name, venv_dir

sys.path.insert(0, str(STANDIN))

from sglang.srt import server_args as standin  # noqa: E402
from sglang.srt.server_args_spec import (  # noqa: E402
    OPTIONS,
    SGLANG_VERSION,
    UNORDERED_CHOICES,
)

GENERATOR = STANDIN / "tools" / "gen_server_args_spec.py"
SPEC = STANDIN / "sglang" / "srt" / "server_args_spec.py"
BASE = ["--model-path", "/models/m"]


def parse(argv: list[str]) -> standin.ServerArgs:
    return standin.prepare_server_args(BASE + argv)


def refusal(argv: list[str], capsys) -> str:
    """The last line argparse writes when it refuses argv (exit 2)."""
    with pytest.raises(SystemExit) as exc:
        parse(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: sglang serve ")
    return err.strip().splitlines()[-1]


# -- The option list, the table, the parser --------------------------------------------------


def test_options_are_the_committed_list():
    """Every option string the lint allows for 0.5.23 is the stand-in's, and no other."""
    parser = standin.make_parser()
    options = {name for action in parser._actions for name in action.option_strings}
    assert options == engine_flags.options_for(SGLANG_VERSION)
    assert len(options) == len(engine_flags.options_for(SGLANG_VERSION)) > 500


def test_parser_is_the_table():
    """One action per entry, in order, as the entry says (after argparse's own -h/--help)."""
    actions = standin.make_parser()._actions
    assert actions[0].option_strings == ["-h", "--help"]
    assert len(actions) == len(OPTIONS) + 1
    for action, option in zip(actions[1:], OPTIONS):
        assert tuple(action.option_strings) == option.flags
        assert action.dest == option.dest and action.required == option.required
        assert action.default == option.default
        if option.action in ("store", "lora_path", "deprecated_store_const"):
            assert action.nargs == option.nargs and action.choices == option.choices
            assert action.type is (standin.TYPES[option.type] if option.type else None)
            assert action.const == option.const


def test_typed_fields_default_as_sglang():
    """The fields the stand-in acts on are declared with SGLang's defaults (the parser's)."""
    parser = standin.make_parser()
    args = parse([])
    for field in standin.dataclasses.fields(standin.ServerArgs):
        if field.name in ("model_path", "other_args"):
            continue
        expected = parser.get_default(field.name)
        assert field.default == expected and type(field.default) is type(expected), field.name
        if field.name != "served_model_name":  # the model path when not given, as in SGLang
            assert getattr(args, field.name) == expected, field.name


# -- Values, typed and refused ---------------------------------------------------------------


def test_more_options_parse_with_sglang_types():
    argv = "--reasoning-parser deepseek-r1 --tool-call-parser deepseekv3 --api-key K".split()
    argv += "--base-gpu-id 2 --dp-size 2 --no-dllm-fdfo --numa-node 0 1 --max-total-tokens 1.5M".split()
    argv += ["--json-model-override-args", '{"rope_scaling": null}', "--quantization-param-path", "None"]
    args = parse(argv + ["--cuda-graph-config", '{"decode": {"max_bs": 8}}'])
    assert (args.reasoning_parser, args.tool_call_parser, args.api_key) == ("deepseek-r1", "deepseekv3", "K")
    assert (args.base_gpu_id, args.dp_size, args.dllm_fdfo, args.numa_node) == (2, 2, False, [0, 1])
    assert args.json_model_override_args == '{"rope_scaling": null}'  # a str in SGLang too
    assert args.cuda_graph_config == {"decode": {"max_bs": 8}}
    assert args.quantization_param_path is None and args.max_total_tokens == 1_500_000
    assert "config" not in args.other_args  # --config is the parser's, not a field
    with pytest.raises(AttributeError, match="'ServerArgs' object has no attribute 'no_such_option'"):
        _ = args.no_such_option


def test_record_survives_pickling():
    """ServerArgs crosses to the spawned schedulers by pickle."""
    import pickle

    args = parse(["--api-key", "K", "--tp-size", "2"])
    copy = pickle.loads(pickle.dumps(args))
    assert copy == args and copy.api_key == "K" and copy.tp_size == 2


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--reasoning-parser", "nosuch"],
            "argument --reasoning-parser: invalid choice: 'nosuch' (choose from 'auto', 'apertus2509',",
        ),
        (["--tool-call-parser", "nosuch"], "argument --tool-call-parser: invalid choice: 'nosuch'"),
        (["--base-gpu-id", "two"], "argument --base-gpu-id: invalid int value: 'two'"),
        (["--dp-size", "1.5"], "argument --dp-size/--data-parallel-size: invalid int value: '1.5'"),
        (["--api-key"], "argument --api-key: expected one argument"),
        (["--numa-node"], "argument --numa-node: expected at least one argument"),
        (["--log-requests-level", "5"], "argument --log-requests-level: invalid choice: 5"),
        (["--preferred-sampling-params", "{"], "argument --preferred-sampling-params: invalid loads value"),
        (["--sidecar-args", "["], "argument --sidecar-args: Invalid JSON list: [. Please provide"),
        (["--context-length", "1.5Ki"], "argument --context-length: Decimals are not allowed with IEC"),
        (["--context-length", "lots"], "argument --context-length: Invalid integer value: 'lots'."),
        (["--cuda-graph-backend-decode", "tc_piecewise"], "tc_piecewise was removed; select breakable"),
        (["--cuda-graph-config", '{"decode": {"x": 1}}'], "--cuda-graph-config['decode']: unknown key 'x'"),
        (["--monokernel-backend", "intel"], "argument --monokernel-backend: invalid choice: 'intel'"),
        (["--enable-tf32-matmul", "yes"], "sglang serve: error: unrecognized arguments: yes"),
        (["--trust-remote-code=yes"], "argument --trust-remote-code: ignored explicit argument 'yes'"),
        (["--enable-dp", "2"], "sglang serve: error: ambiguous option: --enable-dp could match"),
        (["--cuda-graph-max-bs", "32"], "ambiguous option: --cuda-graph-max-bs could match"),
    ],
)
def test_bad_values_exit_2_as_sglang(argv, message, capsys):
    line = refusal(argv, capsys)
    assert line.startswith("sglang serve: error: ") and message in line


def test_sampling_backend_token_oracle_only_with_its_environment(monkeypatch, capsys):
    """SGLang adds the choice when SGLANG_KV_CANARY_ENABLE_TOKEN_ORACLE is true."""
    assert "invalid choice: 'token_oracle'" in refusal(["--sampling-backend", "token_oracle"], capsys)
    monkeypatch.setenv("SGLANG_KV_CANARY_ENABLE_TOKEN_ORACLE", "yes")
    assert parse(["--sampling-backend", "token_oracle"]).sampling_backend == "token_oracle"


def test_deprecated_flags_warn_and_store(caplog):
    args = parse(["--disable-cuda-graph", "--monokernel-backend", "amd"])
    assert args.disable_cuda_graph is True and args.enable_amd_monokernel is True
    warnings = [r.getMessage() for r in caplog.records]
    assert any("'--disable-cuda-graph' is deprecated" in w for w in warnings), warnings
    assert any("Use '--enable-amd-monokernel' instead." in w for w in warnings), warnings


def test_unknown_log_level_fails_after_parsing():
    with pytest.raises(AttributeError, match="has no attribute 'CHATTY'"):
        parse(["--log-level", "chatty"])
    assert parse(["--log-level", "warning"]).log_level == "warning"


def test_config_file_options_come_before_argv(tmp_path):
    config = tmp_path / "server.yaml"
    config.write_text("tp-size: 2\nenable-metrics: true\ntrust-remote-code: false\nnuma-node: [0, 1]\n")
    args = standin.prepare_server_args(["--config", str(config), *BASE, "--tp-size", "4"])
    assert (args.tp_size, args.enable_metrics, args.numa_node) == (4, True, [0, 1])
    assert args.trust_remote_code is False
    config.write_text("lora-paths: [a]\n")
    with pytest.raises(
        ValueError, match="Unsupported config option 'lora_paths' with action 'LoRAPathAction'"
    ):
        standin.prepare_server_args(["--config", str(config), *BASE])
    with pytest.raises(ValueError, match="Config file must be YAML format, got: .json"):
        standin.prepare_server_args(["--config", str(tmp_path / "x.json"), *BASE])


# -- Against the real SGLang, where its venv is present --------------------------------------


@pytest.fixture(scope="session")
def real_sglang() -> str:
    """The real SGLang's python, without building its venv (test_real_sglang_parser.py does)."""
    if not (venv_dir() / marker_name()).is_file():
        pytest.skip(f"no real-SGLang venv at {venv_dir()}: run tests/unit/test_real_sglang_parser.py once")
    return str(venv_dir() / "bin" / "python")


def test_table_is_what_the_generator_writes(real_sglang, tmp_path):
    """After an engine upgrade, regenerate: the command is in the table's docstring."""
    result = subprocess.run(
        [real_sglang, str(GENERATOR), "--stdout"],
        env=clean_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == SPEC.read_text()


# Runs in either interpreter: every action of the parser prepare_server_args builds, as data.
DESCRIBE = r"""
import argparse, json, sys
from sglang.srt.server_args import ServerArgs
parser = argparse.ArgumentParser(prog="sglang serve")
ServerArgs.add_cli_args(parser)
def choices(c):
    return sorted(c) if isinstance(c, (set, frozenset)) else None if c is None else list(c)
json.dump([{
    "class": type(a).__name__, "flags": a.option_strings, "dest": a.dest, "nargs": a.nargs,
    "const": a.const, "default": a.default, "type": getattr(a.type, "__name__", a.type),
    "choices": choices(a.choices), "required": a.required, "metavar": a.metavar,
    "new_flag": getattr(a, "new_flag", None), "const_value": getattr(a, "const_value", None),
} for a in parser._actions], sys.stdout)
"""


def test_parsers_have_the_same_actions(real_sglang, tmp_path):
    def describe(python: str, **env) -> list:
        result = subprocess.run(
            [python, "-c", DESCRIBE], env=clean_env(**env), cwd=tmp_path, capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    real = describe(real_sglang)
    assert describe(sys.executable, PYTHONPATH=str(STANDIN)) == real
    oracle = {"SGLANG_KV_CANARY_ENABLE_TOKEN_ORACLE": "1"}
    assert describe(sys.executable, PYTHONPATH=str(STANDIN), **oracle) == describe(real_sglang, **oracle)


GOOD = {
    "str": ["x"],
    "int": ["3"],
    "float": ["0.5"],
    "json.loads": ['{"a": [1, null]}'],
    "human_readable_int": ["25.6k"],
    "json_list_type": ['["a", 1]'],
    "nullable_str": ["None"],
    "parse_cuda_graph_config_arg": ['{"decode": {"max_bs": 8}, "prefill": {"backend": "full"}}'],
}
BAD = {
    "int": "three",
    "float": "half",
    "json.loads": "{",
    "human_readable_int": "1.5Ki",
    "json_list_type": "[",
    "parse_cuda_graph_config_arg": '{"prefill": {"size": 1}}',
    "parse_cuda_graph_backend_arg": "tc_piecewise",
}
SPECIAL_GOOD = {"log_level": ["debug"], "lora_paths": ["a", '{"lora_name": "n", "lora_path": "p"}']}
SPECIAL_BAD = {"log_level": "chatty", "lora_paths": '{"lora_name": "n"}'}


def matrix() -> dict[str, list[str]]:
    """Named argvs: every option string with a good value, a bad value for every option that
    can have one; `--flag=value`, a missing value, a value to a switch once per kind of option."""
    cases: dict[str, list[str]] = {}
    kinds = set()
    for option in OPTIONS:
        if option.dest == "config":
            continue  # files: test_config_files_agree
        base = [] if option.dest == "model_path" else BASE
        valued = option.action in ("store", "lora_path", "deprecated_store_const")
        if option.choices:
            good = [str(option.choices[-1])]
        else:
            good = SPECIAL_GOOD.get(option.dest) or GOOD.get(option.type, ["x"])
        if option.nargs == "+":
            good = good * 2
        for flag in option.flags:
            cases[f"{flag} good"] = base + ([flag, *good] if valued and option.nargs != "?" else [flag])
        flag, kind = option.flags[0], (option.action, option.nargs, option.type, bool(option.choices))
        first_of_kind = kind not in kinds
        kinds.add(kind)
        if not valued:
            if first_of_kind:
                cases[f"{flag} with a value"] = base + [f"{flag}=1"]
            continue
        bad = SPECIAL_BAD.get(option.dest) or BAD.get(option.type)
        if option.choices:
            bad = "99" if isinstance(option.choices[0], int) else "nosuch"
            if isinstance(option.choices[0], int):
                cases[f"{flag} not a number"] = base + [flag, "nosuch"]
        if bad is not None:
            cases[f"{flag} bad"] = base + [flag, bad]
        if first_of_kind:
            cases[f"{flag} without a value"] = base + [flag]
            cases[f"{flag}=value"] = base + [f"{flag}={good[0]}"]
    cases["help"] = BASE + ["--help"]
    cases["abbreviation"] = BASE + ["--reasoning-pars", "deepseek-r1", "--api-k", "K"]
    cases["ambiguous"] = BASE + ["--enable-dp", "2"]
    cases["unknown"] = BASE + ["--reasoning-parsers", "deepseek-r1"]
    cases["no model path"] = ["--dp-size", "2"]
    return cases


def fields_of(argv: list[str]) -> list[str]:
    by_flag = {flag: option.dest for option in OPTIONS for flag in option.flags}
    return sorted({by_flag[a.split("=", 1)[0]] for a in argv if a.split("=", 1)[0] in by_flag})


def comparable(result: dict, argv: list[str]) -> dict:
    """A set's choices come in hash order in SGLang's message: leave that part out."""
    if any(f"--{dest.replace('_', '-')}" in argv for dest in UNORDERED_CHOICES):
        return {**result, "error": result["error"].split(" (choose from ")[0]}
    return result


def both(real_sglang: str, cases: dict[str, list[str]], tmp_path: Path, fields=None, **env) -> dict:
    """Each case's result from the real parser and from the stand-in's, side by side."""
    asked = [{"argv": argv, "fields": fields or fields_of(argv)} for argv in cases.values()]
    parsers = {"real": (real_sglang, {}), "standin": (sys.executable, {"PYTHONPATH": str(STANDIN)})}

    def answer(name: str) -> list:
        python, extra = parsers[name]
        (tmp_path / name).mkdir(exist_ok=True)
        return ask(python, asked, tmp_path / name, clean_env(**extra, **env))["results"]

    with ThreadPoolExecutor(2) as pool:  # the two interpreters side by side
        answers = dict(zip(parsers, pool.map(answer, parsers)))
    return {
        case: (comparable(real, argv), comparable(mine, argv))
        for (case, argv), real, mine in zip(cases.items(), answers["real"], answers["standin"])
    }


def test_matrix_agrees_with_real_sglang(real_sglang, tmp_path):
    """Same exit status, same error line, same typed values, for every case."""
    results = both(real_sglang, matrix(), tmp_path)
    assert len(results) > 800
    differ = {case: pair for case, pair in results.items() if pair[0] != pair[1]}
    assert differ == {}
    exits = {real["exit"] for real, _ in results.values()}
    assert exits == {0, 1, 2}  # good, refused by a check after parsing, refused by argparse


def test_environment_choice_agrees_with_real_sglang(real_sglang, tmp_path):
    cases = {"token oracle": BASE + ["--sampling-backend", "token_oracle"]}
    for value, accepted in [("1", True), ("Yes", True), ("0", False)]:
        results = both(real_sglang, cases, tmp_path, SGLANG_KV_CANARY_ENABLE_TOKEN_ORACLE=value)
        real, mine = results["token oracle"]
        assert real == mine and (real["exit"] == 0) == accepted


CONFIGS = {
    "merged": ("c.yaml", "tp-size: 2\nenable-metrics: true\nnuma-node: [0, 1]\nmm-process-config: {a: 1}\n"),
    "argv wins": ("c.yaml", "tp-size: 2\n"),
    "store_true false": ("c.yaml", "trust-remote-code: false\nenable-metrics: false\n"),
    "bool for a value": ("c.yaml", "tokenizer-mode: true\n"),
    "boolean optional": ("c.yaml", "dllm-fdfo: false\n"),
    "multi-value action": ("c.yaml", "lora-paths: [a]\n"),
    "deprecated": ("c.yml", "disable-cuda-graph: true\n"),
    "underscores": ("c.yaml", "tp_size: 2\n"),
    "empty": ("c.yaml", ""),
    "not a mapping": ("c.yaml", "- tp-size\n"),
    "not yaml": ("c.json", "{}"),
    "bad choice": ("c.yaml", "reasoning-parser: nosuch\n"),
}


def test_config_files_agree(real_sglang, tmp_path):
    cases = {}
    for name, (file_name, text) in CONFIGS.items():
        path = tmp_path / name.replace(" ", "-") / file_name
        path.parent.mkdir()
        path.write_text(text)
        cases[name] = ["--config", str(path), *BASE] + (["--tp-size", "4"] if name == "argv wins" else [])
    cases["no such file"] = ["--config", str(tmp_path / "none.yaml"), *BASE]
    cases["two configs"] = ["--config", "a.yaml", "--config", "b.yaml", *BASE]
    cases["no file named"] = [*BASE, "--config"]
    cases["empty name"] = ["--config", "", *BASE]
    cases["with ="] = [f"--config={tmp_path / 'none.yaml'}", *BASE]
    fields = ["tp_size", "enable_metrics", "trust_remote_code", "numa_node", "mm_process_config", "dllm_fdfo"]
    results = both(real_sglang, cases, tmp_path, fields=fields)
    differ = {case: pair for case, pair in results.items() if pair[0] != pair[1]}
    assert differ == {}
    assert results["merged"][0]["exit"] == 0 and results["multi-value action"][0]["exit"] == 1
    assert results["argv wins"][0]["fields"]["tp_size"] == 4
