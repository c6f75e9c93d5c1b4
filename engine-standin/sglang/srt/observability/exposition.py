"""Prometheus metric families in the standard library, printed the way SGLang's /metrics prints
them: prometheus_client's MultiProcessCollector read through generate_latest (text format 0.0.4).

What that path prints, and so this module: `# HELP` and `# TYPE` per family, then its samples;
label pairs sorted by name; a histogram's `_sum`, its cumulative `_bucket`s (`le` last bound
`+Inf`) and `_count`; no `_created` samples; every value a float (`7.0`) in Go's format; and a
family that has no sample yet is not printed at all (SGLang's metrics all carry labels, so a
family appears once it was first set, increased or observed).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Sequence
from typing import Optional

LabelValues = tuple[str, ...]


def go_float(value: float) -> str:
    """prometheus_client's floatToGoString: `1.0`, `0.1`, `+Inf`, `1.2345678e+06`."""
    value = float(value)
    if value == math.inf:
        return "+Inf"
    if value == -math.inf:
        return "-Inf"
    if math.isnan(value):
        return "NaN"
    text = repr(value)
    dot = text.find(".")
    if value > 0 and dot > 6:  # Go switches to an exponent sooner than Python
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return text


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class Family:
    """One metric family: a name, its help text, its type and label names; one series per
    combination of label values."""

    def __init__(
        self,
        name: str,
        documentation: str,
        kind: str,
        labelnames: Iterable[str],
        buckets: Optional[Sequence[float]] = None,
    ):
        if kind not in ("counter", "gauge", "histogram"):
            raise ValueError(f"unknown metric type {kind!r}")
        if kind == "counter" and not name.endswith("_total"):
            raise ValueError(f"a counter's name ends in _total: {name}")
        self.name = name
        self.documentation = documentation
        self.kind = kind
        self.labelnames = tuple(labelnames)
        self.buckets: tuple[float, ...] = ()
        if kind == "histogram":
            bounds = sorted(float(b) for b in (buckets or ()))
            if not bounds or bounds[-1] != math.inf:
                bounds.append(math.inf)
            self.buckets = tuple(bounds)
        self._lock = threading.Lock()
        self._values: dict[LabelValues, float] = {}
        self._histograms: dict[LabelValues, list[float]] = {}  # per-bucket counts, then the sum

    def _key(self, labels: dict[str, object]) -> LabelValues:
        if set(labels) != set(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {tuple(labels)}")
        return tuple(str(labels[n]) for n in self.labelnames)

    def set(self, labels: dict[str, object], value: float) -> None:
        assert self.kind == "gauge", self.name
        with self._lock:
            self._values[self._key(labels)] = float(value)

    def inc(self, labels: dict[str, object], amount: float = 1.0) -> None:
        assert self.kind == "counter", self.name
        if amount < 0:
            raise ValueError("counters only go up")
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def observe(self, labels: dict[str, object], value: float, count: int = 1) -> None:
        """`count` observations of `value` (SGLang's inter-token latency adds a chunk's tokens
        at once: the chunk's interval into the sum, `count` into its bucket)."""
        assert self.kind == "histogram", self.name
        key = self._key(labels)
        with self._lock:
            row = self._histograms.setdefault(key, [0.0] * (len(self.buckets) + 1))
            for i, bound in enumerate(self.buckets):
                if value <= bound:
                    row[i] += count
                    break
            row[-1] += value * count

    def render(self) -> list[str]:
        with self._lock:
            values = dict(self._values)
            histograms = {k: list(v) for k, v in self._histograms.items()}
        if not values and not histograms:
            return []
        lines = [f"# HELP {self.name} {self.documentation}", f"# TYPE {self.name} {self.kind}"]
        for key, value in values.items():
            lines.append(f"{self.name}{self._labels(key)} {go_float(value)}")
        for key, row in histograms.items():
            lines.append(f"{self.name}_sum{self._labels(key)} {go_float(row[-1])}")
            cumulative = 0.0
            for bound, count in zip(self.buckets, row):
                cumulative += count
                lines.append(
                    f"{self.name}_bucket{self._labels(key, le=go_float(bound))} {go_float(cumulative)}"
                )
            lines.append(f"{self.name}_count{self._labels(key)} {go_float(cumulative)}")
        return lines

    def _labels(self, key: LabelValues, le: Optional[str] = None) -> str:
        pairs = dict(zip(self.labelnames, key))
        if le is not None:
            pairs["le"] = le
        return "{" + ",".join(f'{n}="{_escape(pairs[n])}"' for n in sorted(pairs)) + "}"


class Registry:
    """The families one /metrics answer prints, in the order they were made."""

    def __init__(self):
        self.families: list[Family] = []

    def family(self, *args, **kwargs) -> Family:
        made = Family(*args, **kwargs)
        if any(f.name == made.name for f in self.families):
            raise ValueError(f"duplicate metric {made.name}")
        self.families.append(made)
        return made

    def exposition(self) -> str:
        lines: list[str] = []
        for family in self.families:
            lines += family.render()
        return "".join(line + "\n" for line in lines)
