"""bench/speculation_ab.py's pure parts: the decode check's verdict found in a deploy's output,
the newest A/B report, and the closing lines (requests, the wall-time ratio against its goal)."""

import json
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from fleet_load import LoadResult  # noqa: E402
from speculation_ab import decode_verdicts, newest_report, summary  # noqa: E402

LINE = "EAGLE3 decodes 60.4 tok/s, 26 % slower than sandbox's 82.1 on this node; accept length 1.9"


def test_the_decode_checks_verdict_is_found_once():
    output = f"node1: decode check: regression: {LINE}\n[node1] failed: {LINE}\nother\n"
    assert decode_verdicts(output) == [LINE]
    assert decode_verdicts("decode check: 82.0 tok/s") == []


def test_the_newest_report_since_before(tmp_path):
    old = tmp_path / "node1-2026-12-05T040000Z.json"
    old.write_text(json.dumps({"old": True}))
    before = {old}
    assert newest_report(tmp_path, "node1", before) is None
    (tmp_path / "node1-2026-12-05T050000Z.json").write_text(json.dumps({"new": True}))
    assert newest_report(tmp_path, "node1", before) == {"new": True}


def trial(profile, tok_s, length=None):
    return {
        "profile": profile,
        "bench": {"decode_tok_s": tok_s, "spread": 0.5, "ttft_p50_ms": 20, "ttft_p95_ms": 30},
        "speculation": {"accept_length": length} if length else {},
        "restart_s": 10.0,
        "bench_s": 12.0,
    }


def test_the_summary_counts_requests_and_judges_the_ratio():
    found = {
        "own": "sandbox",
        "trials": [trial("sandbox-eagle3", 60.4, 1.91), trial("sandbox", 82.0)],
        "verdict": {"text": "sandbox leads sandbox-eagle3 by 21.6 tok/s, beyond the spread"},
        "timing": {
            "profiles": 2,
            "controller_s": 50.0,
            "node_s": 46.0,
            "per_profile_s": 25.0,
            "restart_and_bench_s": 22.0,
            "ratio": 1.14,
        },
    }
    watcher = SimpleNamespace(
        samples=90,
        min_in_router=1,
        node_ports={"node1": 30801, "node2": 30802},
        out_s={"node2": 0.0, "node1": 41.5},
    )
    lines = summary(found, LoadResult(sent=120, failed=0, long_sent=24), LINE, watcher)
    text = "\n".join(lines)
    assert "sandbox-eagle3" in text and "60.4" in text and "1.91" in text
    assert "verdict: sandbox leads" in text
    assert "sent 120 (24 long), failed 0 (goal 0)" in text
    assert "at least 1 of 2 nodes healthy; out of the router: node1 41.5 s, node2 0.0 s" in text
    assert "1.14x (goal <= 1.2x: met)" in text
    assert text.endswith(LINE)
    found["timing"]["ratio"] = 1.5
    assert "MISSED" in "\n".join(summary(found, LoadResult(sent=1, failed=1, failures=[(0, "500")]), None))
