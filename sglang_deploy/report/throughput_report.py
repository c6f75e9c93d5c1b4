"""`make report`: reports/index.html from the decode checks recorded on the controller
(reports/throughput/<host>.jsonl): per node and profile a plot of decode tok/s over time (an SVG
file beside the page, no network needed to view it) and a table of the latest figures; then
every A/B of profiles (`make ab`, reports/ab/: report/ab_report.py).

    python -m sglang_deploy.report.throughput_report [--reports reports]
"""

from __future__ import annotations

import argparse
import html
import math
import re
import sys
from collections import OrderedDict
from pathlib import Path

from sglang_deploy.plan.hosts import REPO_ROOT
from sglang_deploy.report import ab_report
from sglang_deploy.report.throughput_log import accept_length, phrase, read

WIDTH, HEIGHT = 560, 220
LEFT, RIGHT, TOP, BOTTOM = 48, 12, 14, 34


def series(entries) -> OrderedDict:
    """{(host, profile): [entries with a figure, oldest first]}, in order of first appearance."""
    found = OrderedDict()
    for entry in entries:
        if entry.get("decode_tok_s") is not None:
            found.setdefault((entry.get("host", "?"), entry.get("profile", "?")), []).append(entry)
    return found


def _axis(high):
    """(top, step): a round top of the axis at or above ``high``, in 3 to 6 round steps."""
    magnitude = 10 ** math.floor(math.log10(high)) if high > 0 else 1
    step = next(m * magnitude / 10 for m in (1, 2, 5, 10, 20, 50) if high / (m * magnitude / 10) <= 6)
    return step * math.ceil(high / step), step


def svg(points, title) -> str:
    """A line of median tok/s over the checks in time order, min-max bars, regressions in red,
    and the latest check's baseline (the last known good's figure) as a dashed line."""
    lows = [p["decode_tok_s_min"] for p in points]
    highs = [p["decode_tok_s_max"] for p in points]
    base = (points[-1].get("baseline") or {}).get("decode_tok_s")
    top, step = _axis(max(highs + [base or 0]) * 1.05)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(i):
        return LEFT + (plot_w * (i + 0.5) / len(points))

    def y(value):
        return TOP + plot_h * (1 - value / top)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">',
        f"<title>{html.escape(title)}</title>",
        f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="#fafafa" stroke="#ccc"/>',
    ]
    for tick in (i * step for i in range(round(top / step) + 1)):
        out.append(
            f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" stroke="#e4e4e4"/>'
            f'<text x="{LEFT - 4}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick:.0f}</text>'
        )
    out.append(
        f'<text x="12" y="{TOP + plot_h / 2:.0f}" transform="rotate(-90 12 {TOP + plot_h / 2:.0f})" '
        f'text-anchor="middle">decode tok/s</text>'
    )
    for i, (_point, low, high) in enumerate(zip(points, lows, highs)):
        out.append(
            f'<line x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{y(low):.1f}" y2="{y(high):.1f}" stroke="#888"/>'
        )
    if base:
        out.append(
            f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y(base):.1f}" y2="{y(base):.1f}" '
            f'stroke="#777" stroke-dasharray="5 4"/><text x="{LEFT + plot_w - 4}" '
            f'y="{y(base) - 4:.1f}" text-anchor="end" fill="#555">baseline {base:.1f} '
            f"({html.escape(points[-1]['baseline'].get('profile', '?'))})</text>"
        )
    line = " ".join(f"{x(i):.1f},{y(p['decode_tok_s']):.1f}" for i, p in enumerate(points))
    out.append(f'<polyline points="{line}" fill="none" stroke="#2463a6" stroke-width="1.5"/>')
    for i, point in enumerate(points):
        colour = "#c62828" if point.get("regression") else "#2463a6"
        out.append(
            f'<circle cx="{x(i):.1f}" cy="{y(point["decode_tok_s"]):.1f}" r="3.5" fill="{colour}">'
            f"<title>{html.escape(point.get('time', '?'))}: {html.escape(phrase(point))}</title></circle>"
        )
    for i in sorted({0, len(points) - 1}):
        out.append(
            f'<text x="{x(i):.1f}" y="{HEIGHT - 18}" text-anchor="middle">'
            f"{html.escape(str(points[i].get('time', '?')).replace('T', ' ').rstrip('Z'))}</text>"
        )
    out.append(
        f'<text x="{LEFT + plot_w / 2:.0f}" y="{HEIGHT - 4}" text-anchor="middle">'
        f"check (UTC time), {len(points)} in all</text>"
    )
    out.append("</svg>")
    return "\n".join(out)


def plot_name(host, profile) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", f"{host}--{profile}") + ".svg"


def _cell(value, fmt="{}"):
    return "" if value is None else html.escape(fmt.format(value))


def page(groups, plots, ab_section="") -> str:
    """The HTML page: the latest figures' table, then one plot per node and profile."""
    rows = []
    for (host, profile), points in groups.items():
        last = points[-1]
        verdict = (
            "regression (%s): %s" % (last.get("on_regression"), "; ".join(last["regression"]))
            if last.get("regression")
            else "ok"
        )
        base = last.get("baseline") or {}
        rows.append(
            "<tr>"
            + "".join(
                f"<td>{cell}</td>"
                for cell in (
                    html.escape(host),
                    html.escape(profile),
                    _cell(last.get("time")),
                    _cell(last.get("engine_version")),
                    _cell(last["decode_tok_s"], "{:.1f}"),
                    _cell(last.get("decode_tok_s_min"), "{:.1f}"),
                    _cell(last.get("decode_tok_s_max"), "{:.1f}"),
                    _cell(last.get("ttft_ms"), "{:.0f}"),
                    _cell(accept_length(last), "{:.2f}"),
                    _cell(base.get("decode_tok_s"), "{:.1f}")
                    + (f" ({html.escape(base['profile'])})" if base else ""),
                    _cell(last.get("change_pct"), "{:+.0f}%"),
                    html.escape(verdict),
                    str(len(points)),
                )
            )
            + "</tr>"
        )
    sandbox = any("+sandbox" in (p.get("engine_version") or "") for pts in groups.values() for p in pts)
    figures = "\n".join(
        f"<figure><figcaption>{html.escape(host)} · {html.escape(profile)}</figcaption>"
        f'<img src="{html.escape(plots[(host, profile)])}" alt="decode tok/s of {html.escape(profile)} '
        f'on {html.escape(host)} over time" width="{WIDTH}" height="{HEIGHT}"></figure>'
        for host, profile in groups
    )
    head = (
        "host",
        "profile",
        "checked (UTC)",
        "engine",
        "tok/s median",
        "min",
        "max",
        "TTFT ms",
        "accept length",
        "baseline tok/s",
        "change",
        "verdict",
        "checks",
    )
    note = (
        "<p class=note>Engines marked <code>+sandbox</code> are the sandbox stand-in: its decode "
        "rate is a setting (SGLANG_STANDIN_TOKENS_PER_SECOND), not a GPU's.</p>"
        if sandbox
        else ""
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>sglang-deploy: decode throughput</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; color: #222; }}
table {{ border-collapse: collapse; margin-bottom: 1.5em; }}
th, td {{ border: 1px solid #ccc; padding: 3px 8px; text-align: right; }}
th {{ background: #f0f0f0; }} td:nth-child(-n+4), td:nth-child(12) {{ text-align: left; }}
figure {{ display: inline-block; margin: 0 1em 1em 0; }} figcaption {{ font-weight: bold; }}
.note {{ color: #555; }}
</style></head><body>
<h1>Decode throughput after each restart</h1>
<p>Streaming chat completions at temperature 0, one at a time; decode tok/s = (tokens - 1) /
(last - first token's arrival), median over the check's requests. Baseline: the last known good's
figure on the same node. Red points: regressions.</p>
{note}
<table id="latest"><thead><tr>{"".join(f"<th>{h}</th>" for h in head)}</tr></thead>
<tbody>
{chr(10).join(rows) or '<tr><td colspan="13">no decode check recorded yet</td></tr>'}
</tbody></table>
{figures}
{ab_section}</body></html>
"""


def write(reports) -> Path:
    """reports/index.html and its plots (reports/throughput/*.svg) from every host's history."""
    reports = Path(reports)
    folder = reports / "throughput"
    entries = [e for path in sorted(folder.glob("*.jsonl")) for e in read(path)]
    groups = series(entries)
    plots = {}
    for (host, profile), points in groups.items():
        name = plot_name(host, profile)
        (folder / name).write_text(svg(points, f"{profile} on {host}"))
        plots[(host, profile)] = f"throughput/{name}"
    reports.mkdir(parents=True, exist_ok=True)
    index = reports / "index.html"
    index.write_text(page(groups, plots, ab_report.section(reports)))
    return index


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", default=str(REPO_ROOT / "reports"))
    args = parser.parse_args(argv)
    index = write(args.reports)
    print(f"wrote {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
