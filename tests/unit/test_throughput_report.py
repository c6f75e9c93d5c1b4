"""`make report`: reports/index.html and its SVG plots from the recorded decode checks."""

import xml.etree.ElementTree as ET
from html.parser import HTMLParser

from sglang_deploy.report import throughput_log as throughput
from sglang_deploy.report import throughput_report


def _check(profile, figure, when, change=None, regression=(), version="0.5.23+sandbox"):
    return {
        "profile": profile,
        "time": when,
        "engine_version": version,
        "decode_tok_s": figure,
        "decode_tok_s_min": figure - 0.5,
        "decode_tok_s_max": figure + 0.4,
        "ttft_ms": 25.0,
        "requests": 3,
        "change_pct": change,
        "regression": list(regression),
        "on_regression": "rollback",
        "baseline": {"profile": "base", "decode_tok_s": 82.4, "time": "t"} if change else None,
    }


class _Table(HTMLParser):
    """The rows of table#latest, and every img src."""

    def __init__(self):
        super().__init__()
        self.rows, self.images, self._in, self._cell = [], [], False, None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table" and attrs.get("id") == "latest":
            self._in = True
        elif self._in and tag == "tr":
            self.rows.append([])
        elif self._in and tag in ("td", "th"):
            self._cell = ""
        elif tag == "img":
            self.images.append(attrs["src"])

    def handle_endtag(self, tag):
        if tag == "table":
            self._in = False
        elif self._in and tag in ("td", "th"):
            self.rows[-1].append(self._cell.strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


def test_the_page_holds_the_latest_figures_and_a_plot_per_node_and_profile(tmp_path):
    reports = tmp_path / "reports"
    throughput.record("node1", _check("base", 82.4, "2026-11-30T22:00:00Z"), reports / "throughput")
    throughput.record(
        "node1", _check("base", 82.1, "2026-11-30T22:05:00Z", change=-0.4), reports / "throughput"
    )
    throughput.record(
        "node1",
        dict(
            _check(
                "eagle",
                60.1,
                "2026-11-30T22:10:00Z",
                change=-27.1,
                regression=["-27% vs baseline 82.4 exceeds max_regression_pct 10"],
            ),
            speculation={"algorithm": "EAGLE3", "steps": 2, "accept_length": 1.9, "accept_rate": 0.45},
        ),
        reports / "throughput",
    )
    throughput.record(
        "node2", {"profile": "eagle", "decode_tok_s": None, "error": "HTTP 503"}, reports / "throughput"
    )
    index = throughput_report.write(reports)
    text = index.read_text()
    table = _Table()
    table.feed(text)
    header, *rows = table.rows
    assert header[:5] == ["host", "profile", "checked (UTC)", "engine", "tok/s median"]
    by_profile = {row[1]: dict(zip(header, row)) for row in rows}
    assert sorted(by_profile) == ["base", "eagle"]  # node2 has no figure: no row, no plot
    assert by_profile["base"]["tok/s median"] == "82.1" and by_profile["base"]["checks"] == "2"
    eagle = by_profile["eagle"]
    assert eagle["tok/s median"] == "60.1" and eagle["change"] == "-27%"
    assert eagle["accept length"] == "1.90" and by_profile["base"]["accept length"] == ""
    assert eagle["baseline tok/s"] == "82.4 (base)" and eagle["verdict"].startswith("regression (rollback)")
    assert "not a GPU" in text  # the stand-in's figures say what they are
    assert table.images == ["throughput/node1--base.svg", "throughput/node1--eagle.svg"]
    for src in table.images:
        plot = ET.parse(reports / src).getroot()
        assert plot.tag.endswith("svg")
    eagle_svg = (reports / "throughput/node1--eagle.svg").read_text()
    assert (
        'fill="#c62828"' in eagle_svg
        and "60.1 tok/s (-27% vs baseline 82.4), EAGLE3 accept length 1.90 (rate 0.45)" in eagle_svg
    )
    assert "baseline 82.4 (base)" in eagle_svg  # the last known good's figure, dashed


def test_no_checks_yet_is_said(tmp_path):
    text = throughput_report.write(tmp_path).read_text()
    assert "no decode check recorded yet" in text and "<img" not in text and "not a GPU" not in text


def test_plot_names_are_plain_file_names():
    assert throughput_report.plot_name("gpu 1", "../x") == "gpu_1--.._x.svg"


def test_the_axis_ends_on_a_round_number_in_a_few_round_steps():
    assert throughput_report._axis(86.1) == (100, 20)
    assert throughput_report._axis(63.0) == (80, 20)
    assert throughput_report._axis(9.9) == (10, 2)
    assert throughput_report._axis(1234) == (1500, 500)
