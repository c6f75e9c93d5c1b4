"""`make status` in a terminal: one table row per node when the table fits the terminal's
width (or with --wide), else one block per node (a line per field, details wrapped); then one
line per router and what gave no status. Every line passes the session's Redactor (verify's:
nothing printed can carry a secret value); the JSON is the rows themselves, redacted too."""

from __future__ import annotations

import json

from sglang_deploy.node.lib import gpu_links
from sglang_deploy.report.throughput_log import accept_length, phrase
from sglang_deploy.verify import layout
from sglang_deploy.verify.redact import Redactor

COLUMNS = (
    "host",
    "unit",
    "profile",
    "engine",
    "last good",
    "rotation",
    "decode",
    "group",
    "drift",
    "passport",
)
FIELDS = COLUMNS[3:]  # a block's lines, below its title (host, unit, profile)
DRIFT_NOTE = "drift: as `make verify` last recorded it (reports/verify.json), not re-hashed"


def age(seconds) -> str:
    """`42s`, `5m`, `3h`, `2d`; `?` when unknown."""
    if seconds is None:
        return "?"
    seconds = max(0.0, float(seconds))
    for limit, unit, size in ((90, "s", 1), (90 * 60, "m", 60), (36 * 3600, "h", 3600)):
        if seconds < limit:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds / 86400:.0f}d"


def _unreadable(part) -> str | None:
    """Why node_status.py could not read this part (it said so), or None."""
    return part.get("unreadable") if isinstance(part, dict) else None


def unit_cell(row) -> str:
    unit = row["unit"] or {}
    if _unreadable(unit):
        return "unknown"
    if unit.get("load") == "not-found":
        return "not installed"
    active, sub = unit.get("active") or "?", unit.get("sub")
    return active if sub in (None, "", "running", "dead", "failed", "exited") else f"{active} ({sub})"


def engine_cell(row, wide=False) -> str:
    engine = row["engine"] or {}
    if _unreadable(engine):
        return "unreadable"
    live = engine.get("running") or engine.get("link")
    if not live:
        return "none"
    text = live
    if engine.get("running") and engine.get("link") and engine["running"] != engine["link"]:
        text += f" (link: {engine['link']})"
    if engine.get("pending"):
        text += f" (staged: {engine['pending']})"
    return text


def last_good_cell(row, wide=False) -> str:
    good = row["last_good"]
    if not good:
        return "none"
    if _unreadable(good):
        return "unreadable"
    text = f"{good.get('profile')}, {age(good.get('age_s'))} ago"
    return text + (f" ({good['saved_at']})" if wide and good.get("saved_at") else "")


def rotation_cell(row, wide=False) -> str:
    found = row["rotation"] or {}
    state = found.get("state", "?")
    if state == "no routers":
        return f"no routers, /ping {'ok' if row.get('ping') else 'fails'}"
    routers = found.get("routers") or {}
    if not routers:
        return state
    if wide:
        return f"{state}: " + ", ".join(f"{name} {seen}" for name, seen in routers.items())
    return f"{state} ({found.get('healthy_in', 0)}/{len(routers)})"


def decode_cell(row, wide=False) -> str:
    entry = row["decode"]
    if not entry:
        return "-"
    if _unreadable(entry):
        return "unreadable"
    when = f"{age(entry.get('age_s'))} ago"
    if wide:
        return f"{phrase(entry)}, {entry.get('profile')}, {when}"
    if entry.get("decode_tok_s") is None:
        return f"not measured, {when}"
    length = accept_length(entry)
    accepted = f", accept length {length:.2f}" if length is not None else ""
    return f"{entry['decode_tok_s']:.1f} tok/s{accepted}, {when}"


def drift_cell(row, wide=False) -> str:
    drift = row["drift"] or {}
    if drift.get("age_s") is None:
        return drift.get("state") or "not recorded"
    text = f"{drift.get('state')} ({age(drift['age_s'])} ago)"
    return text + (f": {drift['detail']}" if wide and drift.get("detail") else "")


def passport_cell(row, wide=False) -> str:
    found = row["passport"]
    if not found:
        return "-"
    if _unreadable(found):
        return "unreadable"
    text = f"present, {age(found.get('age_s'))} ago"
    passport = found.get("passport") if isinstance(found.get("passport"), dict) else {}
    gpus = passport.get("gpus")
    degraded = [str(index) for index, bad in gpu_links.degraded(passport).items() if bad]
    return (
        text
        + (f", {len(gpus)} GPU(s)" if isinstance(gpus, list) else "")
        + (f", PCIe link degraded: GPU {', '.join(degraded)}" if degraded else "")
    )


def cells(row, wide=False) -> tuple:
    return (
        row["host"],
        unit_cell(row),
        row["profile"] or "-",
        engine_cell(row, wide),
        last_good_cell(row, wide),
        rotation_cell(row, wide),
        decode_cell(row, wide),
        row["serving_group"] or "-",
        drift_cell(row, wide),
        passport_cell(row, wide),
    )


def table(nodes, redact: Redactor, wide=False) -> list[str]:
    """The table; a node without an answer gets its host then why, across the other columns."""
    answered = [cells(row, wide) for row in nodes if row["answered"]]
    lines = layout.table([COLUMNS, *answered], redact)
    host_w = max(len(row["host"]) for row in [{"host": COLUMNS[0]}, *nodes])
    by_host = dict(zip([row["host"] for row in nodes if row["answered"]], lines[1:]))
    out = [lines[0]]
    for row in nodes:
        out.append(by_host.get(row["host"]) or redact.text(f"{row['host'].ljust(host_w)}  {row['error']}"))
    return out


def blocks(nodes, width, redact: Redactor) -> list[str]:
    """One block per node: "host  unit  (profile)", then a line per field, wrapped."""
    lines = []
    name_w = max(len(name) for name in FIELDS)
    for row in nodes:
        lines += [""] if lines else []
        if not row["answered"]:
            lines += [redact.text(line) for line in layout.wrapped(f"{row['host']}  {row['error']}", width)]
            continue
        found = cells(row, wide=True)
        lines.append(redact.text(f"{row['host']}  {found[1]}  (profile {found[2]})"))
        for name, value in zip(FIELDS, found[3:]):
            indent = 2 + name_w + 2
            wrapped = layout.wrapped(redact.text(value), width, indent) or [""]
            lines.append(f"  {name.ljust(name_w)}  {wrapped[0]}".rstrip())
            lines += [" " * indent + more for more in wrapped[1:]]
    return lines


def router_lines(routers, redact: Redactor) -> list[str]:
    lines = []
    for row in routers:
        if not row["answered"]:
            lines.append(redact.text(f"router {row['host']} ({row['url']}): {row['error']}"))
            continue
        health = "up" if row["health"] else "/health not 200"
        lines.append(
            redact.text(
                f"router {row['host']} ({row['url']}): {health}, "
                f"{row['healthy']}/{row['workers']} workers healthy"
            )
        )
    return lines


def screen(nodes, routers, width, redact: Redactor, wide=False) -> list[str]:
    """What `make status` prints: the table when it fits ``width`` (or ``wide``), else blocks;
    then the routers, the drift's source and every host without a status."""
    lines = table(nodes, redact, wide)
    if not wide and max(map(len, lines)) > width:
        lines = [*blocks(nodes, width, redact), ""]
    lines += router_lines(routers, redact)
    lines.append(DRIFT_NOTE)
    silent = [row for row in [*nodes, *routers] if not row["answered"]]
    if silent:
        lines.append(f"{len(silent)} of {len(nodes) + len(routers)} host(s) gave no status")
    return lines


def as_json(nodes, routers, redact: Redactor, took_s=None) -> str:
    body = {"nodes": nodes, "routers": routers, "drift_source": DRIFT_NOTE, "took_s": took_s}
    return redact.text(json.dumps(body, indent=2, sort_keys=True))
