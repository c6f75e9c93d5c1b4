"""Profile schema and loader: shipped profiles, extends/overrides merging, argv, secrets, errors."""

import json
from pathlib import Path

import pytest
import yaml

from sglang_deploy.errors import DeployError, ProfileError
from sglang_deploy.profile.schema import PROFILES_DIR, Profile, load_profile, schema_json

BAD = Path(__file__).resolve().parent / "bad_profiles"
EXPECTED = yaml.safe_load((BAD / "expected.yml").read_text())
BASELINE_ENV = {
    "NCCL_PROTO": "LL",
    "NCCL_ALGO": "Ring",
    "NCCL_P2P_LEVEL": "SYS",
    "NCCL_MAX_NCHANNELS": "16",
    "NCCL_BUFFSIZE": "16777216",
    "NCCL_NTHREADS": "512",
}
BASELINE_ARGV = [
    "--model-path",
    "/models/Kimi-K2.5-INT4",
    "--served-model-name",
    "kimi-k2.5",
    "--host",
    "0.0.0.0",
    "--port",
    "30000",
    "--tp-size",
    "8",
    "--trust-remote-code",
    "--mem-fraction-static",
    "0.85",
    "--context-length",
    "131072",
    "--cuda-graph-max-bs-decode",
    "32",
    "--enable-metrics",
    "--reasoning-parser",
    "kimi_k2",
    "--tool-call-parser",
    "kimi_k2",
]
MINIMAL = {
    "description": "d",
    "engine": {"packages": ["sglang==0.5.23"]},
    "model": {"path": "/models/m", "served_name": "m"},
}


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text)
    return path


# -- Shipped profiles ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["baseline", "eagle3-2step", "eagle3-3step", "sandbox"])
def test_shipped_profiles_load(name):
    profile = load_profile(name)
    assert profile.name == name
    assert profile.source[0] == PROFILES_DIR / f"{name}.yml"
    assert profile.secrets["HF_TOKEN"].from_env == "HF_TOKEN"


def test_every_profile_in_profiles_dir_loads():
    assert {p.stem for p in PROFILES_DIR.glob("*.yml")} >= {"baseline", "sandbox"}
    for path in PROFILES_DIR.glob("*.yml"):
        load_profile(path.stem)


def test_eagle3_3step_inherits_through_two_levels():
    profile = load_profile("eagle3-3step")
    assert [p.stem for p in profile.source] == ["eagle3-3step", "eagle3-2step", "baseline"]
    assert profile.env == BASELINE_ENV
    args = profile.server_args
    assert args["speculative-num-steps"] == 3 and args["speculative-num-draft-tokens"] == 4
    assert args["speculative-eagle-topk"] == 1 and args["speculative-algorithm"] == "EAGLE3"
    assert (args["tp-size"], args["trust-remote-code"], args["context-length"]) == (8, True, 131072)
    # An overridden key keeps its parent's position: argv order stays stable across profiles.
    assert list(args) == list(load_profile("eagle3-2step").server_args)
    assert profile.description == "Kimi-K2.5 INT4, TP8, EAGLE-3 with 3 steps"


def test_argv_baseline():
    assert load_profile("baseline").argv() == BASELINE_ARGV


def test_argv_eagle3_2step():
    assert load_profile("eagle3-2step").argv() == BASELINE_ARGV + [
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        "/models/Kimi-K2.5-EAGLE3",
        "--speculative-num-steps",
        "2",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "3",
    ]


def test_argv_value_kinds():
    profile = Profile.model_validate(
        {
            **MINIMAL,
            "server_args": {
                "on": True,
                "off": False,
                "unset": None,
                "many": [1, "b", 0.5],
                "text": "a b",
                "f": 0.85,
            },
        }
    )
    assert profile.argv()[8:] == ["--on", "--many", "1", "b", "0.5", "--text", "a b", "--f", "0.85"]


@pytest.mark.parametrize(
    "server_args, sizes",
    [
        ({}, (1, 1, 1, 1)),
        ({"tp-size": 8}, (8, 1, 1, 8)),
        ({"tensor-parallel-size": 4}, (4, 1, 1, 4)),
        ({"tp-size": "2", "tensor-parallel-size": 4}, (2, 1, 1, 2)),  # quoted in YAML; first wins
        ({"tp-size": None, "tensor-parallel-size": 4}, (4, 1, 1, 4)),
        ({"tp-size": 4, "pp-size": 2}, (4, 2, 1, 8)),
        ({"tensor-parallel-size": 8, "pipeline-parallel-size": 2, "nnodes": 2}, (8, 2, 2, 8)),
        ({"tp-size": 8, "nnodes": 4}, (8, 1, 4, 2)),
    ],
)
def test_parallel_sizes_understand_aliases(server_args, sizes):
    profile = Profile.model_validate({**MINIMAL, "server_args": server_args})
    assert (profile.tp_size, profile.pp_size, profile.nnodes, profile.gpus_per_node) == sizes


def test_parallel_sizes_of_shipped_profiles():
    assert (load_profile("baseline").tp_size, load_profile("baseline").gpus_per_node) == (8, 8)
    assert load_profile("sandbox").tp_size == 2


def test_sandbox_replaces_lists_and_keeps_inherited_keys():
    profile = load_profile("sandbox")
    assert profile.engine.packages == ["sglang==0.5.23+sandbox"]
    assert profile.engine.find_links == ["build/wheels"]
    assert profile.engine.venv == "/opt/sglang/venv"
    assert profile.server_args["tp-size"] == 2 and profile.server_args["enable-metrics"] is True
    assert profile.env == {
        **BASELINE_ENV,
        "SGLANG_STANDIN_LOAD_SECONDS": "3",
        "SGLANG_STANDIN_WARMUP_SECONDS": "1",
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,ENV",
    }
    assert profile.engine.drift_check == ["sglang"]
    assert load_profile("eagle3-3step").engine.drift_check == [
        "sglang",
        "sgl-kernel",
        "flashinfer-python",
        "torch",
    ]
    assert profile.readiness.timeout_s == 120 and profile.readiness.poll_interval_s == 0.25


def test_defaults_live_in_the_model():
    profile = Profile.model_validate(MINIMAL)
    service, readiness = profile.service, profile.readiness
    assert (service.name, service.host, service.port, service.user) == ("sglang", "0.0.0.0", 30000, "root")
    assert (service.restart, service.restart_sec) == ("on-failure", 10)
    assert (service.timeout_start_sec, service.timeout_stop_sec) == (1800, 120)
    assert (readiness.timeout_s, readiness.poll_interval_s, readiness.progress_every_s) == (1200, 0.25, 10)
    assert profile.engine.venv == "/opt/sglang/venv" and profile.engine.python == "python3"
    assert profile.hook.system_wide is False
    assert profile.server_args == profile.env == profile.secrets == {}


# -- Overrides (host data) -------------------------------------------------------------------


def test_overrides_deep_merge():
    profile = load_profile(
        "sandbox",
        overrides={
            "service": {"port": 30001},
            "env": {"EXTRA": 7},
            "server_args": {"tp-size": 1},
            "engine": {"packages": ["sglang==0.5.24"]},
        },
    )
    assert profile.service.port == 30001
    assert (profile.service.name, profile.service.host) == ("sglang", "0.0.0.0")
    assert profile.env == {**load_profile("sandbox").env, "EXTRA": "7"}
    assert profile.server_args["tp-size"] == 1 and profile.server_args["context-length"] == 512
    assert profile.engine.packages == ["sglang==0.5.24"]
    assert profile.name == "sandbox"
    assert "--port" in profile.argv() and profile.argv()[profile.argv().index("--port") + 1] == "30001"


def test_override_errors_name_host_data(in_repo):
    with pytest.raises(ProfileError) as err:
        load_profile("sandbox", overrides={"service": {"port": 0}})
    assert str(err.value) == (
        "profile_overrides: service.port: Input should be greater than or equal to 1 (got 0)"
    )


def test_overrides_must_be_a_mapping():
    for bad in (["service"], {"extends": "baseline"}):
        with pytest.raises(ProfileError, match="^profile_overrides: must be a mapping of profile keys"):
            load_profile("sandbox", overrides=bad)


# -- Resolving names and paths ---------------------------------------------------------------


def test_extends_looks_next_to_the_file_first(tmp_path):
    write(tmp_path, "baseline.yml", yaml.safe_dump({**MINIMAL, "description": "local"}))
    write(tmp_path, "child.yml", "extends: baseline\n")
    assert load_profile(tmp_path / "child.yml").description == "local"
    write(tmp_path, "other.yml", "extends: eagle3-2step\n")  # not here: falls back to profiles/
    assert load_profile(str(tmp_path / "other.yml")).server_args["speculative-num-steps"] == 2


def test_extends_by_relative_path(tmp_path):
    (tmp_path / "base").mkdir()
    (tmp_path / "leaf").mkdir()
    write(tmp_path / "base", "common.yml", yaml.safe_dump(MINIMAL))
    write(tmp_path / "leaf", "mine.yml", "extends: ../base/common.yml\nservice: {port: 8000}\n")
    profile = load_profile(tmp_path / "leaf" / "mine.yml")
    assert (profile.name, profile.service.port, profile.model.served_name) == ("mine", 8000, "m")
    assert profile.source == (tmp_path / "leaf" / "mine.yml", tmp_path / "base" / "common.yml")


def test_profiles_dir_is_a_parameter(tmp_path):
    write(tmp_path, "mine.yml", yaml.safe_dump(MINIMAL))
    assert load_profile("mine", profiles_dir=tmp_path).name == "mine"


def test_unknown_profile_name_suggests(in_repo):
    with pytest.raises(ProfileError) as err:
        load_profile("basline")
    assert str(err.value) == "no profile named 'basline' in profiles (did you mean 'baseline'?)"


def test_errors_in_a_parent_name_the_parent(in_repo):
    with pytest.raises(ProfileError) as err:
        load_profile("tests/unit/bad_profiles/inherits-bad-port.yml")
    assert (err.value.file, err.value.key, err.value.line) == (
        "tests/unit/bad_profiles/bad-parent.yml",
        "service.port",
        9,
    )


def test_a_child_value_hides_the_parents_location(tmp_path, in_repo):
    write(tmp_path, "parent.yml", yaml.safe_dump({**MINIMAL, "service": {"port": 1}}))
    write(tmp_path, "child.yml", "extends: parent\n\nservice:\n  port: -5\n")
    with pytest.raises(ProfileError) as err:
        load_profile(tmp_path / "child.yml")
    assert (err.value.file, err.value.line) == (str(tmp_path / "child.yml"), 4)


# -- The corpus of bad profiles --------------------------------------------------------------


def test_corpus_is_complete():
    assert len(EXPECTED) >= 12
    assert sorted(p.name for p in BAD.glob("*.yml") if p.name != "expected.yml") == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bad_profile(name, in_repo):
    with pytest.raises(ProfileError) as err:
        load_profile(f"tests/unit/bad_profiles/{name}")
    assert str(err.value) == EXPECTED[name]


@pytest.mark.parametrize(
    "server_args, message",
    [
        (
            {"tp_size": 8},
            "'tp_size' is not a flag name (lower-case letters, digits and dashes, e.g. 'tp-size')",
        ),
        ({"model-path": "/x"}, "comes from model.path; remove it from server_args"),
        ({"served-model-name": "x"}, "comes from model.served_name; remove it from server_args"),
        ({"host": "::"}, "comes from service.host; remove it from server_args"),
        ({"x": []}, "must be a string, a number, true/false/null or a non-empty list"),
        ({"x": {"a": 1}}, "must be a string, a number, true/false/null or a non-empty list"),
    ],
)
def test_bad_server_args(server_args, message):
    with pytest.raises(ProfileError, match="^profile_overrides: server_args") as err:
        load_profile("baseline", overrides={"server_args": server_args})
    assert message in str(err.value)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"service": {"name": "sglang@x"}}, "service.name: 'sglang@x' is not a systemd unit name"),
        ({"service": {"user": "bad user"}}, "service.user: 'bad user' is not a user name or UID"),
        ({"engine": {"venv": "relative/venv"}}, "engine.venv: 'relative/venv' is not an absolute path"),
        ({"engine": {"venv": "/opt/sglang venv"}}, "engine.venv: '/opt/sglang venv' is not an absolute"),
        ({"engine": {"packages": []}}, "engine.packages: List should have at least 1 item"),
        ({"engine": {"packages": ["sglang==0.5.*"]}}, "is not an exact pin"),
        (
            {"model": {"path": "moonshotai/Kimi-K2"}},
            "model.path: 'moonshotai/Kimi-K2' is not an absolute path",
        ),
        ({"description": "two\nlines"}, "description: must be one line"),
        ({"description": "ends in \\"}, "description: must not end with a backslash"),
        (
            {"secrets": {"T": {"from_env": "T", "requird": True}}},
            "secrets.T.requird: unknown key (did you mean 'required'?)",
        ),
        ({"readiness": {"poll_interval_s": 0}}, "readiness.poll_interval_s: Input should be greater than 0"),
    ],
)
def test_bad_values(overrides, message):
    with pytest.raises(ProfileError) as err:
        load_profile("baseline", overrides=overrides)
    assert message in str(err.value)


def test_pins_allow_extras_and_local_versions():
    profile = load_profile(
        "baseline",
        overrides={
            "engine": {"packages": ["sglang[all]==0.5.23", "sgl-kernel==0.3.16.post3", "torch==2.8.0+cu128"]}
        },
    )
    assert profile.engine.packages[0] == "sglang[all]==0.5.23"


def test_env_numbers_become_strings():
    profile = load_profile("baseline", overrides={"env": {"A": 1, "B": 0.5, "C": "x y"}})
    assert (profile.env["A"], profile.env["B"], profile.env["C"]) == ("1", "0.5", "x y")


# -- Scalars as written in env and server_args ----------------------------------------------

# YAML 1.1 reads each of these as a number or a date unlike the text (0755 -> 493, 1:30 -> 90,
# 12.10 -> 12.1, 0042 -> 34, ...): in env and server_args they stay as written.
AS_WRITTEN = [
    "0755",
    "1:30",
    "12.10",
    "0042",
    "00",
    "-0",
    "+5",
    ".5",
    "0x1F",
    "0b101",
    "1_000",
    "190:20:30",
    "1.0e+3",
    ".inf",
    "-.Inf",
    ".NaN",
    "2024-01-01",
    "2024-01-01 10:00:00",
]
# Numbers that read back as written stay numbers (tp-size: 8 is the int 8).
NUMBERS = {"8": 8, "0": 0, "-3": -3, "0.85": 0.85, "131072": 131072, "1.5e-05": 1.5e-05, "3.0": 3.0}


def as_yaml(values):
    return "".join(f"  v{i}: {value}\n" for i, value in enumerate(values))


def test_env_values_keep_the_text_as_written(tmp_path):
    path = write(tmp_path, "p.yml", "extends: baseline\nenv:\n" + as_yaml([*AS_WRITTEN, *NUMBERS]).upper())
    env = load_profile(path).env
    assert [env[f"V{i}"] for i in range(len(AS_WRITTEN))] == [v.upper() for v in AS_WRITTEN]
    assert [env[f"V{i + len(AS_WRITTEN)}"] for i in range(len(NUMBERS))] == [v.upper() for v in NUMBERS]


def test_server_args_values_keep_the_text_as_written(tmp_path):
    text = "extends: baseline\nserver_args:\n" + as_yaml([*AS_WRITTEN, *NUMBERS])
    text += f"  many: [{', '.join(AS_WRITTEN)}]\n  listed:\n" + "".join(f"    - {v}\n" for v in NUMBERS)
    profile = load_profile(write(tmp_path, "p.yml", text))
    args = profile.server_args
    assert [args[f"v{i}"] for i in range(len(AS_WRITTEN))] == AS_WRITTEN
    assert [args[f"v{i + len(AS_WRITTEN)}"] for i in range(len(NUMBERS))] == list(NUMBERS.values())
    assert args["many"] == AS_WRITTEN and args["listed"] == list(NUMBERS.values())
    argv = profile.argv()
    assert argv[argv.index("--many") + 1 : argv.index("--listed")] == AS_WRITTEN
    assert argv[argv.index("--v0") + 1] == "0755"


def test_server_args_numbers_that_read_back_stay_numbers():
    profile = load_profile("baseline")
    assert profile.server_args["tp-size"] == 8 and profile.server_args["mem-fraction-static"] == 0.85
    assert profile.tp_size == 8


def test_merged_mappings_keep_the_text_as_written(tmp_path):
    text = (
        "extends: baseline\n"
        "env:\n  <<: [{UMASK: 0755}, {T: 1:30}]\n  V: 12.10\n"
        "server_args:\n  <<: {max-prefill-tokens: 0042}\n"
    )
    profile = load_profile(write(tmp_path, "p.yml", text))
    assert {k: profile.env[k] for k in ("UMASK", "T", "V")} == {"UMASK": "0755", "T": "1:30", "V": "12.10"}
    assert profile.server_args["max-prefill-tokens"] == "0042"


def test_true_and_false_stay_flags(tmp_path):
    text = "extends: baseline\nserver_args:\n  a: true\n  b: false\n  c: True\n  d: FALSE\n  e: null\n"
    argv = load_profile(write(tmp_path, "p.yml", text)).argv()
    assert "--a" in argv and "--c" in argv
    assert not {"--b", "--d", "--e"} & set(argv)


@pytest.mark.parametrize("word", ["yes", "No", "ON", "off", "y"])
def test_yaml11_booleans_in_server_args_are_refused_by_line(tmp_path, word):
    path = write(tmp_path, "p.yml", f"extends: baseline\nserver_args:\n  tp-size: 8\n  x: {word}\n")
    if word == "y":  # a string in YAML 1.1 too (PyYAML): kept
        assert load_profile(path).server_args["x"] == "y"
        return
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    assert (err.value.file, err.value.line, err.value.key) == (str(path), 4, "server_args.x")
    assert f"'{word}' is a YAML 1.1 boolean" in str(err.value)
    quoted = write(tmp_path, "p.yml", f"extends: baseline\nserver_args:\n  x: '{word}'\n")
    assert load_profile(quoted).server_args["x"] == word


# -- Secrets ---------------------------------------------------------------------------------


def secret_profile():
    return Profile.model_validate(
        {
            **MINIMAL,
            "env": {"A": "1"},
            "secrets": {
                "HF_TOKEN": {"from_env": "OPERATOR_HF"},
                "API_KEY": {"from_env": "OPERATOR_KEY", "required": True},
            },
        }
    )


def test_secrets_resolve_from_the_operator_environment():
    profile = secret_profile()
    assert profile.env_file_vars({"OPERATOR_HF": "hf_x", "OPERATOR_KEY": "k"}) == {
        "A": "1",
        "HF_TOKEN": "hf_x",
        "API_KEY": "k",
    }
    assert profile.env_file_vars({"OPERATOR_KEY": "k"}) == {"A": "1", "API_KEY": "k"}


def test_required_secret_missing_names_the_variable():
    with pytest.raises(DeployError, match="^secret API_KEY: set OPERATOR_KEY in the deploy's environment"):
        secret_profile().env_file_vars({"OPERATOR_HF": "hf_x"})


def test_multiline_secret_is_refused_without_showing_it():
    with pytest.raises(DeployError) as err:
        secret_profile().env_file_vars({"OPERATOR_KEY": "line1\nsecret-part"})
    assert "secret-part" not in str(err.value)


def test_secrets_never_reach_env_or_the_hook(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    profile = load_profile("baseline")
    assert "HF_TOKEN" not in profile.env and "HF_TOKEN" not in profile.hook_vars()
    assert profile.hook_vars() == BASELINE_ENV


# -- Schema ----------------------------------------------------------------------------------


def test_schema_json_describes_the_file_format():
    schema = json.loads(schema_json())
    assert list(schema["properties"])[:3] == ["extends", "description", "engine"]
    assert schema["additionalProperties"] is False
    assert {"name", "source"}.isdisjoint(schema["properties"])
    assert schema["$defs"]["Service"]["properties"]["port"]["default"] == 30000
