"""`make report`'s A/B section: every A/B of profiles recorded on the controller
(reports/ab/<host>-<stamp>.json, `make ab`), newest first: its table and verdict
(node/lib/ab_bench.py's) and a plot of each profile's decode tok/s with its spread (an SVG file
beside the JSON)."""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

from sglang_deploy.node.lib import ab_bench

WIDTH, BAR, GAP, HEIGHT = 560, 60, 30, 220
LEFT, TOP, BOTTOM = 48, 16, 40


def read(folder):
    """[(path, result)] of every A/B in ``folder``, newest first (a torn file skipped)."""
    found = []
    for path in sorted(Path(folder).glob("*.json"), reverse=True):
        try:
            found.append((path, json.loads(path.read_text())))
        except ValueError:
            continue
    return found


def svg(result) -> str:
    """Bars of each profile's decode tok/s (median of the rounds) with ± spread whiskers, the
    verdict's winner in green; a profile that failed is named with no bar."""
    trials = result.get("trials") or []
    figures = [(t.get("bench") or {}).get("decode_tok_s") for t in trials]
    highs = [
        f + ((t.get("bench") or {}).get("spread") or 0) for f, t in zip(figures, trials) if f is not None
    ]
    top = max(highs or [1.0]) * 1.15
    magnitude = 10 ** math.floor(math.log10(top))
    top = magnitude * math.ceil(top / magnitude)
    plot_h = HEIGHT - TOP - BOTTOM
    winner = (result.get("verdict") or {}).get("winner")

    def y(value):
        return TOP + plot_h * (1 - value / top)

    width = max(WIDTH, LEFT + len(trials) * (BAR + GAP) + GAP)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{HEIGHT}" '
        f'viewBox="0 0 {width} {HEIGHT}" font-family="sans-serif" font-size="11">',
        f"<title>A/B on {html.escape(str(result.get('host', '?')))}</title>",
        f'<line x1="{LEFT}" y1="{y(0):.1f}" x2="{width - 4}" y2="{y(0):.1f}" stroke="#999"/>',
    ]
    for tick in (0, top / 2, top):
        out.append(f'<text x="{LEFT - 4}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick:g}</text>')
    for i, (trial, figure) in enumerate(zip(trials, figures)):
        x = LEFT + GAP + i * (BAR + GAP)
        name = html.escape(trial.get("profile", "?"))
        out.append(f'<text x="{x + BAR / 2}" y="{HEIGHT - BOTTOM + 14}" text-anchor="middle">{name}</text>')
        if figure is None:
            out.append(
                f'<text x="{x + BAR / 2}" y="{y(0) - 6:.1f}" text-anchor="middle" fill="#c00">failed</text>'
            )
            continue
        spread = (trial.get("bench") or {}).get("spread") or 0
        colour = "#2a2" if trial.get("profile") == winner else "#69c"
        out.append(
            f'<rect x="{x}" y="{y(figure):.1f}" width="{BAR}" height="{y(0) - y(figure):.1f}" fill="{colour}"/>'
        )
        middle = x + BAR / 2
        out.append(
            f'<line x1="{middle}" y1="{y(figure + spread):.1f}" x2="{middle}" y2="{y(figure - spread):.1f}" '
            'stroke="#222" stroke-width="2"/>'
        )
        out.append(
            f'<text x="{middle}" y="{y(figure + spread) - 4:.1f}" text-anchor="middle">{figure:.1f}</text>'
        )
    out.append(
        f'<text x="{LEFT}" y="{HEIGHT - 6}">decode tok/s, median of the rounds, ± spread '
        "(half their range)</text></svg>"
    )
    return "\n".join(out) + "\n"


def section(reports) -> str:
    """The HTML of every A/B under ``reports``/ab (its plots written beside them); "" without any."""
    folder = Path(reports) / "ab"
    found = read(folder) if folder.is_dir() else []
    if not found:
        return ""
    parts = [
        "<h2>A/B of profiles</h2>",
        "<p>One node out of rotation, each profile deployed through the gate and benchmarked "
        "(several prompts and lengths, repeated), then its own profile back (`make ab`).</p>",
    ]
    for path, result in found:
        plot = path.with_suffix(".svg")
        plot.write_text(svg(result))
        caption = f"{result.get('host', '?')} · {result.get('stamp', path.stem)}"
        table = "\n".join(ab_bench.table(result))
        parts.append(
            f"<figure><figcaption>{html.escape(caption)}</figcaption>"
            f"<pre>{html.escape(table)}</pre>"
            f'<img src="ab/{html.escape(plot.name)}" alt="decode tok/s per profile of the A/B on '
            f'{html.escape(str(result.get("host", "?")))}"></figure>'
        )
    return "\n".join(parts) + "\n"
