"""The SGLang stand-in's pure parts: argument parsing, knobs, NCCL lines, config errors,
process titles. No server is started here (see test_standin_server.py)."""

import multiprocessing
import os
import re
import sys
from pathlib import Path

import pytest

STANDIN = Path(__file__).resolve().parents[2] / "engine-standin"
sys.path.insert(0, str(STANDIN))

from sglang import __version__  # noqa: E402
from sglang.srt import hf_transformers_utils  # noqa: E402
from sglang.srt.sandbox import knobs as knobs_mod  # noqa: E402
from sglang.srt.sandbox import nccl_info  # noqa: E402
from sglang.srt.server_args import ServerArgs, human_readable_int, prepare_server_args  # noqa: E402


def test_version_marks_the_sandbox_build():
    assert __version__ == "0.5.23+sandbox"


# ---------------------------------------------------------------------- server args
PROFILE_ARGV = [
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
    "--nnodes",
    "1",
    "--node-rank",
    "0",
    "--dist-init-addr",
    "10.0.0.1:5000",
    "--watchdog-timeout",
    "600",
]


def test_profile_flags_parse_with_sglang_types():
    args = prepare_server_args(PROFILE_ARGV)
    assert isinstance(args, ServerArgs)
    assert args.tp_size == 8 and args.port == 30000 and args.context_length == 131072
    assert args.mem_fraction_static == 0.85 and args.watchdog_timeout == 600.0
    assert args.trust_remote_code is True and args.enable_metrics is True
    assert args.speculative_algorithm == "EAGLE3" and args.speculative_num_draft_tokens == 3
    assert args.dist_init_addr == "10.0.0.1:5000" and args.cuda_graph_max_bs_decode == 32
    args.check_server_args()


def test_defaults_match_sglang():
    args = prepare_server_args(["--model-path", "/m"])
    assert (args.host, args.port, args.tp_size, args.nnodes, args.node_rank) == ("127.0.0.1", 30000, 1, 1, 0)
    assert args.watchdog_timeout == 300 and args.trust_remote_code is False
    assert args.served_model_name == "/m"  # /v1/models lists the path without a name
    assert args.mem_fraction_static is None and args.speculative_algorithm is None


def test_aliases():
    args = prepare_server_args(["--model", "/m", "--tensor-parallel-size", "4", "--nccl-init-addr", "h:1"])
    assert (args.model_path, args.tp_size, args.dist_init_addr) == ("/m", 4, "h:1")


def test_context_length_accepts_sglang_suffixes():
    assert human_readable_int("131072") == 131072
    assert human_readable_int("128k") == 128000
    assert human_readable_int("32Ki") == 32768


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model-path", "/m", "--bogus-flag"], "sglang serve: error: unrecognized arguments: --bogus-flag"),
        (
            ["--model-path", "/m", "--tp-size", "two"],
            "argument --tp-size/--tensor-parallel-size: invalid int value: 'two'",
        ),
        # SGLang 0.5.23 split the flag in two; argparse's prefix matching then refuses the old one.
        (
            ["--model-path", "/m", "--cuda-graph-max-bs", "32"],
            "sglang serve: error: ambiguous option: --cuda-graph-max-bs could match "
            "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill",
        ),
        (
            ["--model-path", "/m", "--mem-fraction-static", "most"],
            "argument --mem-fraction-static: invalid float value: 'most'",
        ),
        (["--model-path", "/m", "--trust-remote-code", "true"], "unrecognized arguments: true"),
        (["--tp-size", "2"], "the following arguments are required: --model-path"),
    ],
)
def test_rejected_argv_exits_2_with_argparse_message(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        prepare_server_args(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: sglang serve ")
    assert message in err


def test_unknown_speculative_algorithm_parses_but_fails_the_check():
    args = prepare_server_args(["--model-path", "/m", "--speculative-algorithm", "MEDUSA"])
    with pytest.raises(ValueError, match="Unknown speculative algorithm name: MEDUSA"):
        args.check_server_args()
    prepare_server_args(["--model-path", "/m", "--speculative-algorithm", "nextn"]).check_server_args()


# ---------------------------------------------------------------------- knobs
def test_knob_defaults_follow_the_architecture_table():
    k = knobs_mod.from_environ({})
    assert (k.load_seconds, k.warmup_seconds, k.tokens_per_second) == (3.0, 1.0, 80.0)
    assert (k.fail, k.fail_after_seconds, k.real_nccl) == (None, 1.0, False)


def test_multinode_knobs_default_to_every_node_and_torchs_nccl_timeout():
    k = knobs_mod.from_environ({"SGLANG_STANDIN_FAIL": "hang"})
    assert (k.fail_rank, k.dist_timeout_seconds) == (None, 600.0)
    k = knobs_mod.from_environ(
        {
            "SGLANG_STANDIN_FAIL": "hang",
            "SGLANG_STANDIN_FAIL_RANK": "1",
            "SGLANG_STANDIN_DIST_TIMEOUT_SECONDS": "2.5",
        }
    )
    assert (k.fail_rank, k.dist_timeout_seconds) == (1, 2.5)


def test_multinode_argv_is_checked_as_0_5_23_checks_it():
    base = ["--model-path", "/m", "--nnodes", "2", "--tp-size", "2"]
    # Accepted without --dist-init-addr and with a node rank beyond --nnodes: 0.5.23 checks neither.
    prepare_server_args(base + ["--node-rank", "1"]).check_server_args()
    prepare_server_args(base + ["--node-rank", "2"]).check_server_args()
    assert prepare_server_args(base + ["--dist-timeout", "30"]).dist_timeout == 30
    with pytest.raises(AssertionError, match="tp_size must be divisible by number of nodes"):
        prepare_server_args(base[:-1] + ["3"]).check_server_args()


def test_knobs_parse():
    k = knobs_mod.from_environ(
        {"SGLANG_STANDIN_LOAD_SECONDS": "0.5", "SGLANG_STANDIN_FAIL": "hang", "SGLANG_STANDIN_REAL_NCCL": "1"}
    )
    assert (k.load_seconds, k.fail, k.real_nccl) == (0.5, "hang", True)


@pytest.mark.parametrize(
    "env",
    [
        {"SGLANG_STANDIN_FAIL": "explode"},
        {"SGLANG_STANDIN_LOAD_SECONDS": "soon"},
        {"SGLANG_STANDIN_TOKENS_PER_SECOND": "0"},
        {"SGLANG_STANDIN_WARMUP_SECONDS": "-1"},
        {"SGLANG_STANDIN_REAL_NCCL": "maybe"},
        {"SGLANG_STANDIN_FAIL_RANK": "one", "SGLANG_STANDIN_FAIL": "crash-load"},
        {"SGLANG_STANDIN_FAIL_RANK": "1"},  # a rank for no failure
        {"SGLANG_STANDIN_DIST_TIMEOUT_SECONDS": "0"},
    ],
)
def test_bad_knobs_are_errors(env):
    with pytest.raises(knobs_mod.KnobError) as exc:
        knobs_mod.from_environ(env)
    assert next(iter(env)) in str(exc.value)


# ---------------------------------------------------------------------- NCCL lines
TUNED = {
    "NCCL_DEBUG": "INFO",
    "NCCL_PROTO": "LL",
    "NCCL_ALGO": "Ring",
    "NCCL_P2P_LEVEL": "SYS",
    "NCCL_MAX_NCHANNELS": "16",
    "NCCL_BUFFSIZE": "16777216",
    "NCCL_NTHREADS": "512",
}
LINE = re.compile(r"^[^\s:]+:(\d+):(\d+) \[(\d+)\] NCCL INFO (\w+) set by environment to (.*)$")


def test_nccl_lines_have_nccls_exact_format():
    lines = nccl_info.confirmation_lines(TUNED, cuda_dev=3, world_size=2)
    parsed = {LINE.match(line).group(4): LINE.match(line) for line in lines}
    assert list(parsed) == [
        "NCCL_P2P_LEVEL",
        "NCCL_MAX_NCHANNELS",
        "NCCL_BUFFSIZE",
        "NCCL_NTHREADS",
        "NCCL_PROTO",
        "NCCL_ALGO",
    ]
    values = {name: m.group(5) for name, m in parsed.items()}
    assert values == {
        "NCCL_P2P_LEVEL": "SYS",
        "NCCL_MAX_NCHANNELS": "16.",
        "NCCL_BUFFSIZE": "16777216.",
        "NCCL_NTHREADS": "512.",
        "NCCL_PROTO": "LL",
        "NCCL_ALGO": "Ring",
    }
    m = parsed["NCCL_PROTO"]
    assert (int(m.group(1)), m.group(3)) == (os.getpid(), "3")


def test_nccl_proto_and_algo_need_two_ranks():
    names = [LINE.match(x).group(4) for x in nccl_info.confirmation_lines(TUNED, 0, world_size=1)]
    assert "NCCL_PROTO" not in names and "NCCL_ALGO" not in names and "NCCL_BUFFSIZE" in names


def test_nccl_lines_only_with_debug_info():
    assert nccl_info.confirmation_lines(dict(TUNED, NCCL_DEBUG="WARN"), 0, 2) == []
    assert nccl_info.confirmation_lines({k: v for k, v in TUNED.items() if k != "NCCL_DEBUG"}, 0, 2) == []
    assert len(nccl_info.confirmation_lines(dict(TUNED, NCCL_DEBUG="info"), 0, 2)) == 6


def test_nccl_invalid_integer_falls_back_like_nccl():
    [line] = nccl_info.confirmation_lines({"NCCL_DEBUG": "INFO", "NCCL_BUFFSIZE": "16M"}, 0, 2)
    assert line.endswith("NCCL INFO Invalid value 16M for NCCL_BUFFSIZE, using default 4194304.")


# ---------------------------------------------------------------------- config.json
def test_model_directory_without_config_fails_like_transformers(tmp_path):
    with pytest.raises(OSError, match=r"does not appear to have a file named config\.json"):
        hf_transformers_utils.get_config(str(tmp_path))
    with pytest.raises(OSError, match=r"Incorrect path_or_model_id: '/no/such/dir'"):
        hf_transformers_utils.get_config("/no/such/dir")
    with pytest.raises(OSError, match=r"couldn't connect to 'https://huggingface.co'"):
        hf_transformers_utils.get_config("moonshotai/Kimi-K2.5")
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(OSError, match="is not a valid JSON file"):
        hf_transformers_utils.get_config(str(tmp_path))


def test_context_length_from_config(tmp_path, monkeypatch):
    monkeypatch.delenv("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", raising=False)
    monkeypatch.delenv("SGLANG_IS_IN_CI", raising=False)
    (tmp_path / "config.json").write_text('{"max_position_embeddings": 512}')
    config = hf_transformers_utils.get_config(str(tmp_path))
    assert hf_transformers_utils.derive_context_length(config, None) == 512
    assert hf_transformers_utils.derive_context_length(config, 256) == 256
    # Longer than the model's own: SGLang 0.5.23 refuses it unless explicitly allowed.
    with pytest.raises(
        ValueError,
        match=r"User-specified context_length \(4096\) is greater than "
        r"the derived context_length \(512\)",
    ):
        hf_transformers_utils.derive_context_length(config, 4096)
    monkeypatch.setenv("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "1")
    assert hf_transformers_utils.derive_context_length(config, 4096) == 4096
    rope = {"max_position_embeddings": 4096, "rope_scaling": {"factor": 4.0, "rope_type": "yarn"}}
    assert hf_transformers_utils.get_context_length(rope) == 16384


# ---------------------------------------------------------------------- process title
def _retitle_and_report(conn):
    from setproctitle import setproctitle  # what the stand-in's scheduler titles itself with

    setproctitle("sglang::scheduler_TP7")
    conn.send(os.environ.get("STANDIN_TITLE_CANARY"))
    conn.recv()  # the test reads /proc, then tells us to go


def test_titles_blank_the_environ_as_on_sglang(monkeypatch):
    """The stand-in titles its children with the real setproctitle, as SGLang does: the title
    in /proc/<pid>/cmdline and comm, and /proc/<pid>/environ blank although the process still
    holds its environment (seen on SGLang 0.5.17: a check reading environ finds nothing)."""
    monkeypatch.setenv("STANDIN_TITLE_CANARY", "present")
    # spawn, as the stand-in does: the child gets this process's sys.path, so it finds sglang.
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = ctx.Pipe()
    proc = ctx.Process(target=_retitle_and_report, args=(theirs,))
    proc.start()
    try:
        assert ours.poll(30) and ours.recv() == "present"
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        comm = Path(f"/proc/{proc.pid}/comm").read_text().strip()
        environ = Path(f"/proc/{proc.pid}/environ").read_bytes()
    finally:
        ours.send("go")
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()
    assert cmdline.split(b"\0")[0] == b"sglang::scheduler_TP7"
    assert comm == "sglang::schedul"  # the kernel keeps 15 bytes
    assert b"STANDIN_TITLE_CANARY" not in environ and not environ.strip(b"\0")
