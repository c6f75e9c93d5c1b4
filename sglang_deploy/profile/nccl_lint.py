"""Lint of a profile's NCCL_* variables.

Errors are values NCCL rejects, ignores or silently reads as something else; warnings are
settings that do nothing or can hurt, most of all on PCIe-only nodes (no NVLink), the nodes
this project is for. The rules follow NCCL's own parsing (NCCL 2.30 sources:
src/graph/tuning.cc parseList() for NCCL_PROTO/NCCL_ALGO, src/graph/paths.cc ncclGetLevel()
for NCCL_P2P_LEVEL, src/include/param.h and src/misc/param.cc for integers, which NCCL reads
with strtoll(value, NULL, 0)) and its user guide (env.html). What is known about each variable
(kind, valid values, range, deprecation, "Debugging" status) is its row in nccl_vars.VARIABLES.

Messages are part of the interface: tests and operators match them, so they change only on
purpose.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from sglang_deploy.profile.nccl_vars import (
    C_SPACE,
    COLLECTIVES,
    INT64,
    KNOWN,
    NVLINK_ONLY_ALGORITHMS,
    P2P_LEVELS,
    P2P_LEVELS_DOCUMENTED,
    PROTOCOLS,
    PYTORCH,
    RETIRED,
    VARIABLES,
    NcclVar,
    p2p_level,
    strtoll,
)

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Finding:
    severity: Severity
    variable: str  # the variable, or several joined by ", " for a note about a group
    message: str
    where: str | None = None  # `file:line` of the key it is about, where known (the lint prints it)

    def __str__(self) -> str:
        return f"{self.severity}: {self.variable}: {self.message}"


# -- Reading values the way NCCL does --------------------------------------------------------


def _integer(name: str, value: str, out: list[Finding]) -> int | None:
    """`value` as NCCL reads it, or None (with an error) when it is not an integer."""
    number, whole = strtoll(value)
    if not whole:
        out.append(Finding("error", name, f"{value!r} is not an integer (NCCL reads it as {number})"))
        return None
    if number not in INT64:
        out.append(Finding("error", name, f"{value!r} is out of range: NCCL ignores it (its default stays)"))
        return None
    if re.fullmatch(r"[+-]?0[0-7]+", value.strip(C_SPACE)):
        out.append(Finding("warning", name, f"{value!r} starts with 0: NCCL reads it as octal, {number}"))
    return number


# -- NCCL_PROTO / NCCL_ALGO ------------------------------------------------------------------


@dataclass
class Selection:
    """What an NCCL_PROTO or NCCL_ALGO value selects, per collective: 1 on, 0 off, 2 NCCL's
    own choice (LL128's default: on only where the hardware supports it)."""

    enabled: dict[str, dict[str, int]]
    named: dict[str, set[str]]  # per collective, the elements the value names to switch on

    def everywhere_off(self, element: str) -> bool:
        return all(states[element] == 0 for states in self.enabled.values())

    def forced(self, element: str) -> bool:
        return any(states[element] == 1 for states in self.enabled.values())

    def only(self, element: str) -> bool:
        return all(
            states[element] != 0 and sum(1 for s in states.values() if s) == 1
            for states in self.enabled.values()
        )


def parse_selection(name: str, value: str, elements: tuple[str, ...], out: list[Finding]) -> Selection | None:
    """NCCL's parseList(): `[^]a,b` or `[^]a,b;collective:[^]c;...`, names in any case; each
    list replaces the selection of the collectives it applies to. None (with errors) where
    NCCL would fail."""
    kind = "protocol" if elements is PROTOCOLS else "algorithm"
    default = {e: 2 if e == "LL128" else 1 for e in elements}
    enabled = {c: dict(default) for c in COLLECTIVES}
    named: dict[str, set[str]] = {c: set() for c in COLLECTIVES}
    ok = True
    position = 0
    for entry in value.split(";"):
        first, position = position == 0, position + len(entry) + 1
        parts = [p for p in entry.split(":") if p]
        if not parts:
            continue  # strtok skips empty entries
        if len(parts) == 1:
            if not first:
                out.append(
                    Finding(
                        "error",
                        name,
                        f"{entry!r}: every entry after the first needs "
                        f"a collective, e.g. 'allreduce:{entry}'",
                    )
                )
                ok = False
                continue
            prefix, items = None, parts[0]
        else:
            prefix, items = parts[0], parts[1]
        targets = list(COLLECTIVES)
        if prefix is not None:
            match = _lookup(prefix, COLLECTIVES)
            if match is None:
                out.append(
                    Finding("error", name, f"unknown collective {prefix!r}" + _hint(prefix, COLLECTIVES))
                )
                ok = False
                continue
            targets = [match]
        exclude = items.startswith("^")
        chosen = []
        for item in (i for i in items.lstrip("^").split(",") if i):
            match = _lookup(item, elements)
            if match is None:
                out.append(Finding("error", name, f"unknown {kind} {item!r}" + _hint(item, elements)))
                ok = False
            else:
                chosen.append(match)
        for collective in targets:
            enabled[collective] = {e: int(exclude) for e in elements}
            for element in chosen:
                enabled[collective][element] = int(not exclude)
            named[collective] = set() if exclude else set(chosen)
    if not ok:
        return None
    empty = [c for c in COLLECTIVES if not any(enabled[c].values())]
    if empty:
        which = "any collective" if len(empty) == len(COLLECTIVES) else ", ".join(empty)
        out.append(
            Finding(
                "error",
                name,
                f"leaves no {kind} for {which}: NCCL 2.24 and later fail instead of falling back",
            )
        )
        return None
    return Selection(enabled, named)


def _lookup(word: str, choices: tuple[str, ...]) -> str | None:
    return next((c for c in choices if c.lower() == word.lower()), None)


def _hint(word: str, choices) -> str:
    by_lower = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(word.lower(), list(by_lower), n=1)
    if close:
        return f" (did you mean {by_lower[close[0]]!r}?)"
    return f" (expected one of: {', '.join(choices)})"


# -- The lint --------------------------------------------------------------------------------


def lint_env(env: Mapping[str, str], *, pcie_only: bool = True) -> list[Finding]:
    """Findings about the NCCL_* variables in `env` (other variables are not looked at), in
    the order of `env`, then one note about the "Debugging" variables it sets.

    `pcie_only`: the GPUs talk over PCIe only (no NVLink, no NVSwitch).
    """
    out: list[Finding] = []
    # NCCL_PROTO decides what some other variables do; its own findings come in its turn.
    proto = parse_selection("NCCL_PROTO", env["NCCL_PROTO"], PROTOCOLS, []) if env.get("NCCL_PROTO") else None
    for name, value in env.items():
        if not name.upper().startswith("NCCL_"):
            continue
        if name != name.upper() and name.upper() in KNOWN:
            out.append(
                Finding("warning", name, f"NCCL reads upper-case names only (did you mean {name.upper()!r}?)")
            )
        elif name in PYTORCH:
            out.append(
                Finding(
                    "warning", name, f"read by PyTorch, not NCCL, and deprecated there: use {PYTORCH[name]}"
                )
            )
        elif name in RETIRED:
            out.append(Finding("warning", name, f"no longer read by NCCL{RETIRED[name]}: it has no effect"))
        elif name not in KNOWN:
            close = difflib.get_close_matches(name, sorted(KNOWN), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            out.append(Finding("warning", name, f"not an NCCL variable: NCCL ignores it{hint}"))
        elif value == "":
            out.append(Finding("warning", name, "empty: NCCL treats it as unset (remove it)"))
        else:
            _check(name, value, env, proto, pcie_only, out)
    debugging = [name for name in env if name in VARIABLES and VARIABLES[name].debugging and env[name] != ""]
    if debugging:
        out.append(
            Finding(
                "warning",
                ", ".join(debugging),
                'NCCL\'s guide lists these under "Debugging", not for production '
                "(sub-optimal behaviour, crashes or hangs): keep them only if an A/B "
                "all-reduce measurement on the node proves they help",
            )
        )
    return out


def _check(
    name: str,
    value: str,
    env: Mapping[str, str],
    proto: Selection | None,
    pcie_only: bool,
    out: list[Finding],
) -> None:
    """The findings of one known, non-empty NCCL variable: its value, as its row in the table
    says NCCL reads it, then what the value does here."""
    var = VARIABLES[name]
    number = _check_value(var, value, pcie_only, out)
    if number is False:
        return
    if var.power_of_two and number & (number - 1):
        out.append(
            Finding(
                "warning",
                name,
                f"{number} is not a power of two (NCCL recommends powers of two; default {var.default})",
            )
        )
    if proto and var.protocols and all(proto.everywhere_off(p) for p in var.protocols):
        out.append(
            Finding("warning", name, f"has no effect with NCCL_PROTO={env['NCCL_PROTO']}: {var.elsewhere}")
        )
    if name == "NCCL_NVLS_ENABLE" and number == 1 and pcie_only:
        out.append(
            Finding(
                "warning",
                name,
                "1 forces NVLink SHARP, which needs NVSwitch; a "
                "PCIe-only node has none (leave it unset: NCCL "
                "detects support)",
            )
        )
    if var.deprecated_since:
        out.append(
            Finding("warning", name, f"deprecated since NCCL {var.deprecated_since}: use {var.replaced_by}")
        )


def _check_value(var: NcclVar, value: str, pcie_only: bool, out: list[Finding]):
    """False (with errors) where NCCL rejects or ignores `value`; else the integer it reads
    (None for a variable that is not an integer)."""
    name = var.name
    if var.kind == "selection":
        selection = parse_selection(name, value, var.values, out)
        if selection is None:
            return False
        if pcie_only and name == "NCCL_PROTO" and selection.forced("LL128"):
            named = any("LL128" in n for n in selection.named.values())
            how = (
                "forces LL128"
                if named
                else ("forces LL128 as well (a '^' list switches on every protocol it does not name)")
            )
            out.append(
                Finding(
                    "warning",
                    name,
                    f"{how}: NCCL enables LL128 by itself only "
                    f"where it is supported, which PCIe is not; "
                    f"forced where unsupported it can corrupt data",
                )
            )
        if pcie_only and name == "NCCL_ALGO":
            nvlink = [a for a in NVLINK_ONLY_ALGORITHMS if any(a in n for n in selection.named.values())]
            if nvlink:
                verb, pronoun = ("needs", "it") if len(nvlink) == 1 else ("need", "them")
                out.append(
                    Finding(
                        "warning",
                        name,
                        f"{' and '.join(nvlink)} {verb} NVLink SHARP "
                        f"(NVSwitch), which a PCIe-only node does not "
                        f"have: NCCL cannot use {pronoun} here",
                    )
                )
        return None
    if var.kind == "p2p_level":
        return None if _check_p2p_level(name, value, pcie_only, out) else False
    if var.kind == "name":
        if _lookup(value, var.values) is None:
            out.append(Finding("error", name, f"unknown level {value!r}" + _hint(value, var.values)))
            return False
        return None
    if var.kind == "choice":
        choices = var.values
        number, whole = strtoll(value)
        if not (whole and number in choices):
            alternatives = ", ".join(map(str, choices[:-1])) + f" or {choices[-1]}"
            read = "" if whole else f", which NCCL reads as {number}"
            out.append(Finding("error", name, f"must be {alternatives} (got {value!r}{read})"))
            return False
        return number
    if var.kind == "integer":
        number = _integer(name, value, out)
        if number is None:
            return False
        if number < var.minimum:
            out.append(Finding("error", name, f"must be at least {var.minimum} (got {number})"))
            return False
        if var.cap is not None and number > var.cap:
            out.append(Finding("warning", name, f"NCCL caps it at {var.cap} (got {number})"))
        return number
    return None


def _check_p2p_level(name: str, value: str, pcie_only: bool, out: list[Finding]) -> bool:
    """Whether NCCL reads `value` as a level (findings about it in `out`)."""
    level = p2p_level(value)
    if level is not None:
        if level == "NVL" and pcie_only:
            out.append(
                Finding(
                    "warning",
                    name,
                    "NVL on a PCIe-only node: P2P only over NVLink, so never (use PXB, PHB or SYS)",
                )
            )
        return True
    documented = ", ".join(P2P_LEVELS_DOCUMENTED)
    if value.upper() in P2P_LEVELS:
        out.append(
            Finding(
                "error",
                name,
                f"{value!r}: NCCL matches level names case-sensitively "
                f"and ignores this one (write {value.upper()!r})",
            )
        )
    elif value.upper() == "NODE":
        out.append(
            Finding(
                "error",
                name,
                f"{value!r} is nvidia-smi's name, not NCCL's: NCCL ignores it (NCCL calls this level PHB)",
            )
        )
    else:
        out.append(
            Finding(
                "error",
                name,
                f"unknown level {value!r}: NCCL ignores it (expected one of: {documented}, or 0-4)",
            )
        )
    return False
