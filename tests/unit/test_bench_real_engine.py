"""bench/real_engine.py's pure parts (bench/real_sglang/report.py, promises.py's helpers): the
verdict per promise from recorded results, the table, the env file as the server gets it.
No server is started: the run itself is rehearsed with `--engine standin`."""

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

from real_sglang import promises, report  # noqa: E402

from sglang_deploy.node.lib import status  # noqa: E402
from sglang_deploy.plan.render import render_env_file  # noqa: E402
from sglang_deploy.profile.schema import load_profile  # noqa: E402

PROFILE = REPO / "bench" / "real_sglang" / "tiny-llama.yml"
ENV = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL", "NCCL_DEBUG": "INFO"}
EXPECT = {
    "title": "Real SGLang on the GPU machine",
    "environ_blanked": True,
    "crash_cause": "torch.AcceleratorError: CUDA error: invalid device ordinal",
    "env": ENV,
    "bad_flag": "--mem-fraction 0.5",
    "bad_flag_meant": "--mem-fraction-static",
    "mismatch_var": "NCCL_ALGO",
    "mismatch_value": "Tree",
}


def step(result, elapsed=1.0, rc=None, timed_out=False):
    return {
        "argv": ["x"],
        "rc": rc if rc is not None else (result or {}).get("status", 1),
        "elapsed_s": elapsed,
        "timed_out": timed_out,
        "result": result,
        "output_tail": ["last line"],
    }


def worker(title, mismatches=(), error=None):
    return {
        "pid": 7,
        "title": title,
        "checked": 3,
        "ok": not mismatches,
        "error": error,
        "mismatches": list(mismatches),
    }


def missing(var):
    return {"var": var, "expected": ENV[var], "actual": None}


def good_results():
    """A run where every promise held, as a real run records it."""
    return {
        "engine": "real",
        "engine_version": "0.5.17",
        "torch_version": "2.11.0+cu130",
        "gpu": "NVIDIA H200, 580.159.03, 143771 MiB",
        "profile": "tiny-llama",
        "argv": [
            "--model-path",
            "/m",
            "--speculative-algorithm",
            "NGRAM",
            "--speculative-num-draft-tokens",
            "4",
        ],
        "run_s": 301.5,
        "steps": {
            "preflight": step(
                {
                    "status": 0,
                    "checks": [
                        {"verdict": "ok", "text": "the engine's parser accepts the 20 arguments"},
                        {"verdict": "ok", "text": "port 30000 is free"},
                    ],
                }
            ),
            "preflight_bad_flag": step(
                {
                    "status": 11,
                    "cause": "--mem-fraction is not a flag of the engine (argparse would take it as an "
                    "abbreviation of --mem-fraction-static): did you mean --mem-fraction-static?",
                }
            ),
            "gate": step(
                {
                    "status": 0,
                    "elapsed_s": 131.9,
                    "phases": {"warmup": 79.5, "starting": 51.5, "loading": 0.5},
                }
            ),
            "workers_after": step(
                {
                    "status": 0,
                    "expected": ENV,
                    "workers": [worker("sglang::scheduler"), worker("sglang::detokenizer")],
                }
            ),
            "workers_before": step(
                {
                    "status": 7,
                    "workers": [worker("sglang::scheduler", [missing(v) for v in ENV])],
                    "cause": "pid 7 sglang::scheduler: NCCL_ALGO is missing",
                }
            ),
            "workers_mismatch": step(
                {
                    "status": 7,
                    "cause": "pid 7 sglang::scheduler: NCCL_ALGO is 'Ring', expected 'Tree'",
                    "workers": [
                        worker(
                            "sglang::scheduler", [{"var": "NCCL_ALGO", "expected": "Tree", "actual": "Ring"}]
                        )
                    ],
                }
            ),
            "decode_check_before": step(
                {"status": 20, "cause": "too few tokens streamed to time the decode (0)"}
            ),
            "decode_check": step(
                {
                    "status": 0,
                    "throughput": {
                        "decode_tok_s": 412.3,
                        "decode_tok_s_min": 400.0,
                        "decode_tok_s_max": 420.0,
                        "ttft_ms": 9.0,
                        "requests": 3,
                        "engine_version": "0.5.17",
                        "speculation": {
                            "algorithm": "NGRAM",
                            "steps": None,
                            "accept_length": 2.125,
                            "accept_rate": 0.375,
                        },
                    },
                }
            ),
            "crash_gate": step(
                {
                    "status": 3,
                    "elapsed_s": 48.2,
                    "cause": "exception: Python exception: torch.AcceleratorError: CUDA error: invalid device ordinal",
                }
            ),
        },
        "facts": {
            "hook": {
                "module": "sglang_deploy_env",
                "site_packages": "/v/site-packages",
                "loaded": True,
                "records": 4,
                "titles": ["/v/bin/python", "sglang::scheduler"],
            },
            "nccl": {"lines": 12, "set_by_env": {"NCCL_PROTO": "LL"}, "simulated": False},
            "http": {"/health": [[200, 1001.0], [200, 1000.2]], "/ping": [[200, 1.1], [200, 0.9]]},
            "stop": {
                "exit_status": 137,
                "how": "SIGKILL",
                "seconds": 3.4,
                "outlived": 2,
                "outlived_s": 0.3,
                "killed_leftovers": False,
                "port_free": True,
                "timeout_stop_sec": 120,
            },
            "crash": {"death_to_verdict_s": 0.41},
            "key": {
                "v1_models_without": 401,
                "v1_models_with": 200,
                "cmdlines": 0,
                "config_mode": "0o600",
                "in_server_log": 0,
                "in_our_outputs": 0,
            },
        },
        "skipped": {},
        "notes": ["jit-cache.tgz: 3.1 MiB"],
    }


def verdict_of(results, key, expect=EXPECT):
    return {row[0]: row for row in report.verdicts(results, expect)}[key]


def test_every_promise_held_on_a_good_run():
    rows = report.verdicts(good_results(), EXPECT)
    assert [r[0] for r in rows] == [p[0] for p in report.PROMISES]
    assert {r[2] for r in rows if r[0] != "f0"} == {report.HELD}, [r for r in rows if r[2] != report.HELD]
    assert dict((r[0], r[2:]) for r in rows)["f0"][0] == report.NA  # a comparison, never a verdict
    assert report.passed(rows)


def test_evidence_says_what_was_measured():
    rows = {r[0]: r[3] for r in report.verdicts(good_results(), EXPECT)}
    assert rows["c"] == "READY in 131.9 s (starting 51.5s, loading 0.5s, warmup 79.5s)"  # phase order
    assert "did you mean --mem-fraction-static?" in rows["a2"]
    assert "412.3 tok/s" in rows["f"]
    assert rows["g"] == "/health 200 in 1001/1000 ms; /ping 200 in 1/1 ms"
    assert rows["h"].startswith("exit 137 (SIGKILL) 3.4 s after SIGTERM; 2 processes")
    assert "invalid device ordinal" in rows["i"] and "0.41 s after the launcher died" in rows["i"]
    assert "(python, sglang::scheduler)" in rows["b"]
    assert "not named by NCCL: NCCL_ALGO" in rows["e"]  # NCCL_DEBUG is never named


@pytest.mark.parametrize(
    "key, change",
    [
        ("a1", lambda r: r["steps"]["preflight"]["result"].update(status=11, cause="port held")),
        ("a2", lambda r: r["steps"]["preflight_bad_flag"]["result"].update(status=0)),
        ("b", lambda r: r["facts"]["hook"].update(records=0)),
        ("c", lambda r: r["steps"]["gate"].update(result=None, rc=1)),
        ("d1", lambda r: r["steps"]["workers_after"]["result"].update(status=7)),
        ("d2", lambda r: r["steps"]["workers_before"]["result"].update(status=0)),
        ("d3", lambda r: r["steps"]["workers_mismatch"]["result"].update(status=0)),
        ("e", lambda r: r["facts"]["nccl"]["set_by_env"].update(NCCL_PROTO="Simple")),
        (
            "f",
            lambda r: r["steps"]["decode_check"]["result"].update(
                status=20, throughput={"decode_tok_s": None}
            ),
        ),
        ("g", lambda r: r["facts"]["http"]["/ping"].append([503, 1.0])),
        ("h", lambda r: r["facts"]["stop"].update(port_free=False)),
        ("h", lambda r: r["facts"]["stop"].update(seconds=121.0)),
        ("i", lambda r: r["steps"]["crash_gate"]["result"].update(cause="timeout: last phase: starting")),
        ("i", lambda r: r["steps"]["crash_gate"]["result"].update(status=4)),
        ("k", lambda r: r["facts"]["key"].update(v1_models_without=200)),  # the server asks no key
        ("k", lambda r: r["facts"]["key"].update(v1_models_with=401)),  # our probes send none
        ("k", lambda r: r["facts"]["key"].update(cmdlines=1)),
        ("k", lambda r: r["facts"]["key"].update(config_mode="0o644")),
        ("k", lambda r: r["facts"]["key"].update(in_server_log=2)),
        ("k", lambda r: r["facts"]["key"].update(in_our_outputs=1)),
    ],
)
def test_a_promise_that_did_not_hold_fails(key, change):
    results = good_results()
    change(results)
    assert verdict_of(results, key)[2] == report.FAILED
    assert not report.passed(report.verdicts(results, EXPECT))


def test_a_profile_without_a_key_makes_the_key_promise_not_applicable():
    results = good_results()
    results["facts"]["key"] = {"applies": False}
    assert verdict_of(results, "k")[2] == report.NA
    assert report.passed(report.verdicts(results, EXPECT))


def test_a_timed_out_script_says_so():
    results = good_results()
    results["steps"]["gate"] = step(None, elapsed=450.0, rc=-9, timed_out=True)
    assert verdict_of(results, "c")[2:] == (report.FAILED, "gate timed out after 450 s")


def test_the_old_check_is_blind_only_where_every_variable_is_missing():
    results = good_results()
    before = results["steps"]["workers_before"]["result"]
    before["workers"][0]["mismatches"][0]["actual"] = "Ring"  # one variable seen: not the blind check
    assert verdict_of(results, "d2")[2] == report.FAILED
    before["workers"] = [worker("sglang::scheduler", error="cannot read environment: Permission denied")]
    assert verdict_of(results, "d2")[2] == report.HELD


def test_an_engine_that_keeps_environ_readable_makes_the_old_check_not_applicable():
    results = good_results()
    results["steps"]["workers_before"] = step({"status": 0, "workers": [worker("sglang::scheduler")]})
    row = verdict_of(results, "d2", dict(EXPECT, environ_blanked=False))
    assert row[2] == report.NA
    assert report.passed([row])


def test_no_nccl_line_is_not_applicable():
    results = good_results()
    results["facts"]["nccl"] = {"lines": 0, "set_by_env": {}, "simulated": False}
    assert verdict_of(results, "e")[2] == report.NA


def test_what_was_skipped_or_never_reached_is_not_run():
    results = good_results()
    del results["steps"]["decode_check"]
    results["skipped"]["i"] = "20 s left of the run's budget"
    rows = {r[0]: r for r in report.verdicts(results, EXPECT)}
    assert rows["f"][2:] == (report.NOT_RUN, "the run did not get there")
    assert rows["i"][2:] == (report.NOT_RUN, "20 s left of the run's budget")
    assert not report.passed(list(rows.values()))


def test_the_table_has_one_line_per_promise_and_the_run():
    results = good_results()
    rows = report.verdicts(results, EXPECT)
    text = report.render_table(results, EXPECT, rows, "2026-12-05")
    lines = text.splitlines()
    assert lines[0].startswith("Real SGLang on the GPU machine, 2026-12-05")
    assert "engine:  sglang 0.5.17 (torch 2.11.0+cu130)" in lines
    assert "GPU:     NVIDIA H200, 580.159.03, 143771 MiB" in lines
    assert any(line.startswith("run:     302 s") for line in lines)
    table = [line for line in lines if line[:4].strip() in {p[0] for p in report.PROMISES}]
    assert len(table) == len(report.PROMISES)
    column = lines[lines.index(next(line for line in lines if "verdict" in line))].index("verdict")
    assert all(
        line[column:].startswith("not applicable" if line.startswith("f0") else "held ") for line in table
    )
    assert "15 promises: 14 held, 0 failed, 1 not applicable, 0 not run" in lines
    assert "note: jit-cache.tgz: 3.1 MiB" in lines


def test_status_values_are_the_node_scripts():
    assert (report.READY, report.FAILED_START, report.WORKER_ENV_MISMATCH, report.PREFLIGHT_FAILED) == (
        status.READY,
        status.FAILED_START,
        status.WORKER_ENV_MISMATCH,
        status.PREFLIGHT_FAILED,
    )


def test_result_line_is_the_last_json_object_with_a_status():
    text = 'progress\n{"event": "x"}\n{"status": 3, "result": "FAILED_START"}\n{"no": "status"}\ntrailing\n'
    assert report.result_line(text) == {"status": 3, "result": "FAILED_START"}
    assert report.result_line("no json here\n{broken") is None
    assert report.result_line(None) is None


def test_env_file_read_back_as_the_server_gets_it():
    profile = load_profile(PROFILE)
    text = render_env_file(profile, {})
    assert report.parse_env_file(text) == profile.env_file_vars({})
    tricky = 'A="x \\"y\\" \\$z"\n# comment\nB=plain  \nC=\'lit $x\'\n'
    assert report.parse_env_file(tricky) == {"A": 'x "y" $z', "B": "plain", "C": "lit $x"}


def test_launch_environment_is_the_calling_one_the_env_file_over_it_and_the_records():
    env = report.launch_environment(
        {"PATH": "/bin", "NCCL_ALGO": "Tree", "NCCL_NVLS_ENABLE": "0"}, {"NCCL_ALGO": "Ring"}, "REC", "/tmp/r"
    )
    assert env == {"PATH": "/bin", "NCCL_ALGO": "Ring", "NCCL_NVLS_ENABLE": "0", "REC": "/tmp/r"}


def test_nccl_lines_and_the_values_nccl_names():
    lines = [
        "h:446:446 [0] NCCL INFO NCCL_MAX_NCHANNELS set by environment to 16.",
        "h:446:446 [0] NCCL INFO NCCL_P2P_LEVEL set by environment to SYS",
        "h:446:446 [0] NCCL INFO Bootstrap: Using eth0",
        "unrelated",
    ]
    assert report.nccl_lines(lines) == {
        "lines": 3,
        "set_by_env": {"NCCL_MAX_NCHANNELS": "16", "NCCL_P2P_LEVEL": "SYS"},
    }


def test_exit_status_as_a_shell_shows_it():
    assert report.exit_status(-9) == (137, "SIGKILL")
    assert report.exit_status(-15) == (143, "SIGTERM")
    assert report.exit_status(0) == (0, None)
    assert report.exit_status(None) == (None, "still running")


def test_logs_keep_their_last_lines():
    text = "".join("line %d\n" % i for i in range(1000))
    trimmed = report.trim_log(text, keep=400).splitlines()
    assert trimmed[0] == "[... 600 earlier lines left out ...]"
    assert trimmed[1] == "line 600" and trimmed[-1] == "line 999" and len(trimmed) == 401
    assert report.trim_log("a\nb\n") == "a\nb\n"


def test_the_profile_argv_gets_this_machines_model_and_the_crash_its_options():
    argv = load_profile(PROFILE).argv()
    assert promises.with_model_path(argv, "/cache/tiny-llama")[:2] == ["--model-path", "/cache/tiny-llama"]
    assert argv[1] == "/models/tiny-llama"  # the profile's placeholder, left as it was
    gate = ["--port", "30000", "--timeout", "420", "--interval", "0.25"]
    assert promises.with_option(gate, "--timeout", "290") == [
        "--port",
        "30000",
        "--timeout",
        "290",
        "--interval",
        "0.25",
    ]


def test_the_changed_variable_has_another_value():
    assert promises.mismatch_of({"NCCL_ALGO": "Ring", "X": "1"}) == ("NCCL_ALGO", "Tree")
    assert promises.mismatch_of({"NCCL_ALGO": "Tree"}) == ("NCCL_ALGO", "Ring")
    assert promises.mismatch_of({"B": "1", "A": "2"}) == ("A", "Tree")


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "bench" / "real_sglang").glob("*.yml")))
def test_every_real_engine_profile_lints_without_errors(name):
    """`prepare` refuses a profile with lint errors: each one the tool stages must stay clean
    as lint grows (a pin set without a lock became an error; the device installs from its bundle)."""
    from sglang_deploy.profile.lint import finding_lines

    errors, _ = finding_lines(load_profile(REPO / "bench" / "real_sglang" / name))
    assert errors == []


def test_a_speculating_server_without_an_accept_length_fails_promise_s():
    results = good_results()
    del results["steps"]["decode_check"]["result"]["throughput"]["speculation"]
    rows = {r[0]: r[2:] for r in report.verdicts(results, EXPECT)}
    assert rows["s"][0] == report.FAILED
    results["argv"] = ["--model-path", "/m"]
    assert {r[0]: r[2] for r in report.verdicts(results, EXPECT)}["s"] == report.NA
