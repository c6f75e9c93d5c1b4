"""The decode check's figures on the controller: one JSON line per check in
`reports/throughput/<host>.jsonl`, the phrase the operator reads (`60.1 tok/s (-27% vs baseline
82.4)`), and that phrase kept per host for the deploy's last lines (outcome.py).

The node measures and judges (node/decode_check.py, run by node/cycle.py after the gate); this
side only records and says what the cycle's result line carries.
"""

from __future__ import annotations

import json
from pathlib import Path

from sglang_deploy import run_state
from sglang_deploy.node.lib import speculation
from sglang_deploy.plan.hosts import REPO_ROOT

REPORTS = REPO_ROOT / "reports" / "throughput"


def phrase(entry) -> str:
    """`60.1 tok/s (-27% vs baseline 82.4)`; `82.0 tok/s (no baseline yet)`; or why no figure;
    a speculating server's accept length after it (`, EAGLE3 accept length 1.96 (rate 0.48)`)."""
    figure = entry.get("decode_tok_s")
    if figure is None:
        return f"decode not measured: {entry.get('error')}"
    base = entry.get("baseline")
    if not base or entry.get("change_pct") is None:
        said = f"{figure:.1f} tok/s (no baseline yet)"
    else:
        said = f"{figure:.1f} tok/s ({entry['change_pct']:+.0f}% vs baseline {base['decode_tok_s']:.1f})"
    spec = entry.get("speculation")
    return f"{said}, {speculation.describe(spec)}" if spec else said


def accept_length(entry):
    """A speculating server's accept length in a check's entry, or None."""
    return (entry.get("speculation") or {}).get("accept_length")


def record(host_name, entry, reports=REPORTS) -> Path:
    """Append one check (with the host's name) to reports/throughput/<host>.jsonl."""
    path = Path(reports) / f"{host_name}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(dict(entry, host=host_name), sort_keys=True) + "\n")
    return path


def read(path) -> list:
    """The entries of one history file, oldest first (a torn line is skipped)."""
    entries = []
    for line in Path(path).read_text().splitlines():
        try:
            entries.append(json.loads(line))
        except ValueError:
            continue
    return entries


def took_note(host_name, found, reports=None):
    """From a restart cycle's result line: record its decode check, keep its phrase for the
    outcome line (the run state's decode_notes) and return (phrase, log level: 'info' | 'warning' | 'error'), or None when
    no check ran."""
    entry = found.get("throughput")
    if not entry:
        return None
    record(host_name, entry, reports or REPORTS)
    text = run_state.of().decode_notes[host_name] = phrase(entry)
    if entry.get("decode_tok_s") is None and not entry.get("restored"):
        return f"decode check: {text}", "error"  # nothing measured: the restart failed
    if not entry.get("regression"):
        return f"decode check: {text}", "info"
    why = "; ".join(entry["regression"])
    policy = entry.get("on_regression")
    if policy == "warn":
        return f"decode check: {text}: regression (on_regression: warn): {why}", "warning"
    return f"decode check: {text}: regression (on_regression: {policy}): {why}", "error"


def took_restored_note(host_name, found, reports=None):
    """After a rollback, the restored server's figure (the cycle's "restored_throughput"):
    recorded like any check; the line that says it, or None when none was measured."""
    entry = found.get("restored_throughput")
    if not entry:
        return None
    record(host_name, entry, reports or REPORTS)
    return f"decode check after the rollback: {entry.get('profile')} serves at {phrase(entry)}"
