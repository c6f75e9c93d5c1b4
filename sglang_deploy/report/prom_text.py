"""Prometheus' text exposition format (0.0.4), read: what SGLang's /metrics answers
(prometheus_client's generate_latest, in multiprocess mode under --enable-metrics).

prometheus_client's own parser is not a dependency of the controller; this one reads what the
format allows and SGLang writes: ``# HELP`` / ``# TYPE`` lines, other comments, samples
``name{label="value",...} value [timestamp]`` with escaped label values (``\\\\``, ``\\"``,
``\\n``), names with colons (``sglang:num_requests_total``), values ``NaN``, ``+Inf``,
``-Inf`` and exponents. A line that is none of these is a ParseError naming its number.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


class ParseError(ValueError):
    pass


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict
    value: float


@dataclass
class Exposition:
    """One scrape: its samples in order, and each family's ``# TYPE``."""

    samples: list = field(default_factory=list)
    types: dict = field(default_factory=dict)

    def values(self, name, **labels) -> list:
        """The values of the samples called ``name`` whose labels include ``labels``."""
        return [
            s.value
            for s in self.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        ]

    def total(self, name) -> float | None:
        """The sum of every sample called ``name`` (every label set: a counter across the
        tokenizer's label sets), None when there is none."""
        found = self.values(name)
        return math.fsum(found) if found else None

    def buckets(self, name) -> dict:
        """{upper bound: cumulative count} of histogram ``name`` (``<name>_bucket``), summed over
        its label sets; empty when it is not exported."""
        found = {}
        for s in self.samples:
            if s.name == name + "_bucket" and "le" in s.labels:
                bound = _number(s.labels["le"])
                found[bound] = found.get(bound, 0.0) + s.value
        return dict(sorted(found.items()))


def increase(start: float | None, end: float | None) -> float | None:
    """A counter's increase between two scrapes (None: not in the later one). A counter that went
    down restarted, so its later value is the increase, as Prometheus' rate() takes it; one first
    seen in the later scrape counts from zero."""
    if end is None:
        return None
    if start is None or end < start:
        return end
    return end - start


def parse(text: str) -> Exposition:
    out = Exposition()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line[1:].split(None, 3)
            if len(parts) >= 3 and parts[0] == "TYPE":
                out.types[parts[1]] = parts[2]
            continue
        try:
            out.samples.append(_sample(line))
        except ParseError as exc:
            raise ParseError(f"line {number}: {exc}: {raw[:120]!r}") from None
    return out


def _sample(line: str) -> Sample:
    match = _NAME.match(line)
    if not match:
        raise ParseError("no metric name")
    name, rest = match[0], line[match.end() :]
    labels = {}
    if rest.startswith("{"):
        labels, rest = _labels(rest[1:])
    parts = rest.split()
    if not parts or len(parts) > 2 or not rest[:1].isspace():
        raise ParseError("expected a value (and at most a timestamp) after the name")
    return Sample(name, labels, _number(parts[0]))


def _labels(text: str):
    """The labels of ``text`` (after the ``{``) and what follows the ``}``."""
    labels, i = {}, 0
    while True:
        while i < len(text) and text[i] in " \t":
            i += 1
        if text[i : i + 1] == "}":
            return labels, text[i + 1 :]
        match = _LABEL.match(text, i)
        if not match:
            raise ParseError("bad label name")
        key, i = match[0], match.end()
        if text[i : i + 2] != '="':
            raise ParseError(f'label {key}: expected ="')
        i += 2
        value = []
        while True:
            if i >= len(text):
                raise ParseError(f"label {key}: unterminated value")
            char = text[i]
            if char == "\\":
                escaped = _ESCAPES.get(text[i + 1 : i + 2])
                if escaped is None:
                    raise ParseError(f"label {key}: bad escape")
                value.append(escaped)
                i += 2
            elif char == '"':
                i += 1
                break
            else:
                value.append(char)
                i += 1
        labels[key] = "".join(value)
        if text[i : i + 1] == ",":
            i += 1
        elif text[i : i + 1] != "}":
            raise ParseError(f"label {key}: expected , or }}")


def _number(text: str) -> float:
    lowered = text.lower()
    if lowered in ("+inf", "inf"):
        return math.inf
    if lowered == "-inf":
        return -math.inf
    try:
        return float(text)
    except ValueError:
        raise ParseError(f"not a number: {text!r}") from None
