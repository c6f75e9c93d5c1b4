"""How a node's GPUs are linked to each other, from `nvidia-smi topo -m` (standard library only:
node/passport.py reads it into the hardware passport, `make verify` judges what it holds).

Link types in `nvidia-smi topo -m`: NV# (a bonded set of # NVLinks); PIX, PXB, PHB, NODE, SYS
(PCIe paths, from one bridge to across the CPU sockets; SOC is SYS's old name). The passport
keeps every GPU pair's link as {"links": {"0-1": "NV18", ...}} (``as_links``; ``matrix`` reads
it back).
"""

import re

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PCIE_TYPES = {"PIX", "PXB", "PHB", "NODE", "SYS", "SOC"}
_NVLINK = re.compile(r"^NV\d+$")
_GPU = re.compile(r"^GPU(\d+)$")


class Unparsed(ValueError):
    """`nvidia-smi topo -m` output in a shape this parser does not know."""


def _header(lines):
    for i, line in enumerate(lines):
        tokens = line.split()
        if "GPU0" in tokens and "X" not in tokens:  # column names only; every GPU row has its X
            return i
    raise Unparsed("topo -m: no header line with GPU0")


def _rows(lines, header, width):
    rows = {}
    for line in lines[header + 1 :]:
        tokens = line.split()
        if not tokens:
            if rows:
                break  # the blank line before the legend
            continue
        m = _GPU.match(tokens[0])
        if not m:
            continue  # NIC rows
        cells = tokens[1 : 1 + width]
        if len(cells) < width:
            raise Unparsed("topo -m: row %s has %d cells for %d columns" % (tokens[0], len(cells), width))
        rows[int(m.group(1))] = cells
    if not rows:
        raise Unparsed("topo -m: no GPU rows")
    return rows


def parse(text):
    """`nvidia-smi topo -m` -> {(a, b): link} for every GPU pair a < b, e.g. {(0, 1): 'NV18'}.

    Tolerates tabs or spaces, NIC/mlx5 columns, the affinity columns, the legend and the ANSI
    underline nvidia-smi puts around the header. One GPU -> {}.
    """
    lines = [_ANSI.sub("", line).rstrip() for line in text.splitlines()]
    header = _header(lines)
    columns = []
    for token in lines[header].split():
        if token == "CPU":  # "CPU Affinity": the device columns end here
            break
        columns.append(token)
    gpu_columns = {i: int(_GPU.match(c).group(1)) for i, c in enumerate(columns) if _GPU.match(c)}
    matrix = {}
    for a, cells in _rows(lines, header, len(columns)).items():
        for col, b in gpu_columns.items():
            link = cells[col]
            if a == b:
                if link != "X":
                    raise Unparsed("topo -m: GPU%d to itself is %r, not X" % (a, link))
                continue
            if link not in _PCIE_TYPES and not _NVLINK.match(link):
                raise Unparsed("topo -m: unknown link type %r between GPU%d and GPU%d" % (link, a, b))
            if a < b:
                matrix[(a, b)] = link
    return matrix


def as_links(matrix):
    """{(0, 1): 'NV18'} -> {"0-1": "NV18"}: the passport's (JSON) form."""
    return {"%d-%d" % pair: link for pair, link in sorted(matrix.items())}


def matrix(links):
    """The passport's {"0-1": "NV18"} -> {(0, 1): 'NV18'}."""
    return {tuple(int(i) for i in pair.split("-")): link for pair, link in links.items()}


def link_kind(found):
    """'nvlink' (every GPU pair NV#), 'pcie' (none), 'mixed', or 'none' (fewer than two GPUs)."""
    if not found:
        return "none"
    nvlink = [bool(_NVLINK.match(link)) for link in found.values()]
    if all(nvlink):
        return "nvlink"
    if not any(nvlink):
        return "pcie"
    return "mixed"
