"""How `make verify`'s report is laid out in a terminal: a table (the full one is about 400
columns wide, hence behind --wide), or one block per host, its checks' details wrapped to the
terminal's width. Every line passes through the session's Redactor before it is returned:
nothing printed can carry a secret value, however a detail was wrapped.
"""

from __future__ import annotations

import shutil
import textwrap

from sglang_deploy.verify.redact import Redactor

MIN_DETAIL = 24  # a detail column narrower than this wraps into nonsense: it goes below instead
NAME_WIDTH = 20  # longer check names (and states longer than STATE_WIDTH) take a line of their own
STATE_WIDTH = 8


def terminal_width() -> int:
    """COLUMNS, else the terminal's width, else 100 (output to a file or a pipe)."""
    return shutil.get_terminal_size((100, 24)).columns


def table(rows, redact: Redactor) -> list[str]:
    """Rows of cells, each column as wide as its widest cell (no wrapping)."""
    rows = [[redact.text(str(cell)) for cell in cells] for cells in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(cells, widths)).rstrip() for cells in rows]


def block(title, checks, width, redact: Redactor) -> list[str]:
    """A host's block: its title, then per check its name, state and detail, the detail wrapped
    to ``width`` under its own column."""
    lines = [redact.text(title)]
    names = [c["name"] for c in checks]
    name_w = min(max((len(n) for n in names), default=0), NAME_WIDTH)
    state_w = min(max((len(c["state"]) for c in checks), default=0), STATE_WIDTH)
    indent = 2 + name_w + 2 + state_w + 2
    if width - indent < MIN_DETAIL:
        indent = 4
    for check in checks:
        head = f"  {check['name'].ljust(name_w)}  {check['state'].ljust(state_w)}  "
        detail = wrapped(redact.text(check["detail"]), width, indent)
        if len(head) > indent or not detail:  # a long name or state: the detail goes below it
            lines.append(redact.text(head.rstrip()))
            lines += [" " * indent + line for line in detail]
        else:
            lines.append(redact.text(head) + detail[0])
            lines += [" " * indent + line for line in detail[1:]]
    return lines


def wrapped(text, width, indent=0) -> list[str]:
    """``text`` in lines that fit ``width`` after ``indent`` (URLs and paths are never cut)."""
    return textwrap.wrap(
        text or "",
        width=max(width - indent, MIN_DETAIL),
        break_long_words=False,
        break_on_hyphens=False,
    )


def problems(reports, width, redact: Redactor) -> list[str]:
    """Every check that is not ok, one per line ("host: check: state: detail"), wrapped."""
    lines = []
    for report in reports:
        for check in report["checks"]:
            if check["state"] != "ok":
                text = redact.text(f"{report['host']}: {check['name']}: {check['state']}: {check['detail']}")
                lines += textwrap.wrap(
                    text,
                    width=max(width, MIN_DETAIL),
                    subsequent_indent="    ",
                    break_long_words=False,
                    break_on_hyphens=False,
                )
    return lines
