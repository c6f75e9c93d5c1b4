"""bench/decode_check.py: its figures from a deploy's output lines and the computed duration of
the decode check, on their own (the bench itself needs a sandbox node)."""

import importlib.util
import math
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "decode_check.py"


def _load():
    sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("bench_decode_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


bench = _load()

LINES = [
    (100.0, "[node1] ready in 4.1s (phase times: loading 3.0s, warmup 1.0s)"),
    (100.4, "[node1] workers: 2 processes carry the expected environment"),
    (101.7, "[node1] decode check: 80.0 tok/s (min 79.9, max 80.1, TTFT 12 ms, 3 requests)"),
    (101.8, "[node1] decode check: engine 0.5.23+sandbox: the sandbox stand-in decodes at ..."),
    (102.1, "[node1] saved bench-decode-on as last known good"),
    (102.5, "[node1] decode check: 80.0 tok/s"),
]


def test_check_gap_runs_from_the_line_before_the_first_check_line():
    seconds, before = bench.check_gap(LINES)
    assert seconds == pytest.approx(1.3)
    assert "workers:" in before


def test_no_check_line_no_gap():
    assert bench.check_gap([line for line in LINES if "decode check" not in line[1]]) is None


def test_gate_to_saved():
    assert bench.gate_to_saved(LINES) == pytest.approx(2.1)
    already = LINES[:2] + [(103.0, "[node1] bench-decode-off is already the last known good")]
    assert bench.gate_to_saved(already) == pytest.approx(3.0)
    assert bench.gate_to_saved(LINES[1:]) is None


def test_compare_uses_medians():
    added, ratio = bench.compare([30.0, 33.0, 31.0], [29.0, 28.0, 40.0])
    assert added == pytest.approx(2.0)
    assert ratio == pytest.approx(31.0 / 29.0)


def test_spread_leaves_out_missing_figures():
    s = bench.spread([2.0, float("nan"), 4.0, 3.0])
    assert (s["n"], s["median"], s["min"], s["max"]) == (3, 3.0, 2.0, 4.0)
    assert math.isnan(bench.spread([])["median"])


def test_projection_round_trips_the_measured_check():
    # 4 requests of 24 tokens at 80 tok/s, TTFT 10 ms: 4 x 0.2975 s; measured 1.5 s.
    fixed = bench.fixed_cost(1.5, 4, 0.010, 24, 80.0)
    assert fixed == pytest.approx(1.5 - 4 * (0.010 + 23 / 80))
    assert bench.projected(fixed, 4, 0.010, 24, 80.0) == pytest.approx(1.5)
    # The defaults: 6 requests of 128 tokens at 60 tok/s.
    assert bench.projected(fixed, 6, 0.010, 128, 60.0) == pytest.approx(fixed + 6 * (0.010 + 127 / 60))


def test_summary_rows_per_arm():
    on = bench.Sample("on", 1, 31.0, gate_to_saved=2.0, check_output=1.3, check_node=1.2)
    off = bench.Sample("off", 1, 29.5, gate_to_saved=0.6)
    rows = {(row[0], row[1]): row[2:] for row in bench.summary_rows([on, off])}
    assert rows[("deploy wall s", "on")] == (1, "31.00", "31.00", "31.00")
    assert rows[("deploy wall s", "off")] == (1, "29.50", "29.50", "29.50")
    assert rows[("gate -> saved s", "off")][1] == "0.60"
    assert rows[("check s (node clock)", "on")] == (1, "1.200", "1.200", "1.200")
