"""bench/bare_offline.py: a deploy's parts from its output lines' arrival times, on their own
(the bench itself needs two bare sandbox nodes)."""

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "bare_offline.py"


def _load():
    sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("bench_bare_offline", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


bench = _load()


def op(name):
    return f"--> Starting operation: sglang-deploy node | {name}"


LINES = [
    (102.0, op("OS prerequisites")),
    (140.0, op("Deploy lock")),
    (141.0, op("On-node scripts")),
    (142.0, op("Model /models/tiny-standin (controller)")),
    (145.0, op("Preflight")),
    (146.0, op("Engine wheelhouse (sglang-0.5.23+sandbox-21ee92086ccf.txt)")),
    (149.0, op("uv")),
    (152.0, op("Engine venv and pinned packages")),
    (154.0, op("Env file")),
    (154.5, op("Fan-out keys removed")),
    (155.0, op("Restart (configuration changed)")),
    (160.0, "    [node1] ready in 4.1s (phase times: loading 3.0s, warmup 1.0s)"),
    (160.5, "    [node1] workers: 2 processes carry the expected environment"),
    (161.8, "    [node1] decode check: 80.0 tok/s (min 79.9, max 80.1, TTFT 12 ms, 3 requests)"),
    (162.0, "    [node1] saved bare as last known good"),
    (162.5, op("Serving")),
    (163.0, op("Engine manifest")),
]


def test_the_deploy_is_cut_into_its_parts_at_its_steps_and_the_gate_lines():
    parts, other, ready = bench.deploy_parts(LINES, 100.0, 165.0)
    assert parts["connect, facts, plan"] == pytest.approx(2.0)
    assert parts["OS packages (apt)"] == pytest.approx(38.0)
    assert parts["deploy lock, node scripts"] == pytest.approx(2.0)
    assert parts["model staging"] == pytest.approx(3.0)
    assert parts["wheel upload (wheelhouse)"] == pytest.approx(3.0)
    assert parts["uv on the node"] == pytest.approx(3.0)
    assert parts["engine venv (uv install)"] == pytest.approx(2.0)
    assert parts["start + gate"] == pytest.approx(5.0)
    assert parts["workers check"] == pytest.approx(0.5)
    assert parts["decode check"] == pytest.approx(1.3)
    assert parts["save, rest of the cycle"] == pytest.approx(0.7)
    assert parts["serving, records"] == pytest.approx(2.5)
    assert other == [("Fan-out keys removed", pytest.approx(0.5))]
    assert ready == pytest.approx(60.0)
    assert sum(parts.values()) == pytest.approx(65.0)  # every second of the deploy in one part


def test_a_restart_without_a_ready_line_is_one_figure():
    lines = [
        (101.0, op("Restart (configuration changed)")),
        (130.0, "    [node1] readiness gate failed: cuda-oom"),
    ]
    parts, _, ready = bench.deploy_parts(lines, 100.0, 140.0)
    assert parts["restart (no `ready in` line)"] == pytest.approx(39.0)
    assert "start + gate" not in parts
    assert ready is None
