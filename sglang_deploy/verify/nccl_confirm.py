"""NCCL's own confirmation that each rank runs with the expected NCCL_* settings.

With NCCL_DEBUG=INFO (the default subsystems include ENV) every process that initialises NCCL
logs each variable it read from the environment:

    vm:446:446 [0] NCCL INFO NCCL_P2P_LEVEL set by environment to SYS
    vm:446:446 [0] NCCL INFO NCCL_BUFFSIZE set by environment to 16777216.

i.e. `<host>:<pid>:<tid> [<cudaDev>] NCCL INFO <VAR> set by environment to <value>`. Integer
parameters (NCCL_PARAM, src/misc/param.cc) end with a period, which is not part of the value;
string ones (NCCL_P2P_LEVEL, NCCL_PROTO, NCCL_ALGO) do not. Lines may carry any prefix
(journald's `Nov 29 10:00:01 node1 sglang[446]: `, SGLang's `[2026-11-29 10:00:01 TP0] `).

A rank is one process, keyed by (host, pid); every NCCL line of a process makes it a rank, so a
worker that logs NCCL lines but none for a variable is seen as lacking it.

Failure semantics of confirm():
- a variable in `expected` that NCCL is known to log (nccl_vars.LOGGED, or passed in
  `also_required`) must be logged by every rank with the expected value: otherwise
  "wrong value (seen X)" or "not logged" on that rank is a failure;
- NCCL_PROTO and NCCL_ALGO are logged by the tuning code (src/graph/tuning.cc) only for a
  communicator of at least two ranks: with a single rank they are reported
  "not logged (needs ≥2 ranks)" and are not failures;
- a variable NCCL is not known to log is required only once some rank logged it (then NCCL
  evidently logs it here, and a rank without it lacks it); a wrong value always fails;
- with `ranks_expected`, fewer or more ranks than that is a failure.
"""

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# The variables NCCL logs whenever it reads them (the table's `logged` column), and those it
# logs only in a communicator of at least two ranks.
from sglang_deploy.profile.nccl_vars import LOGGED, NEEDS_TWO_RANKS

CONFIRMED = "confirmed"
WRONG = "wrong value"
NOT_LOGGED = "not logged"
NEEDS_RANKS = "not logged (needs ≥2 ranks)"
NOT_KNOWN = "not logged (NCCL is not known to log it)"

# host:pid:tid [dev] NCCL <LEVEL> <message>; the host follows whitespace, '[' ']' or line start.
_NCCL_LINE = re.compile(
    r"(?:^|(?<=[\s\]]))(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>[^\]]*)\] NCCL (?P<level>[A-Z]+) "
    r"(?P<msg>.*?)\s*$"
)
_SET_BY_ENV = re.compile(r"^(?P<var>NCCL_[A-Za-z0-9_]+) set by environment to (?P<value>.*)$")
_NRANKS = re.compile(r"\bnranks (?P<n>\d+)\b", re.IGNORECASE)
_INTEGER_WITH_PERIOD = re.compile(r"^[+-]?\d+\.$")


def clean_value(value: str) -> str:
    """'16.' -> '16' (NCCL_PARAM integers end with one period); anything else unchanged."""
    value = value.strip()
    if _INTEGER_WITH_PERIOD.match(value):
        return value[:-1]
    return value


def same_value(expected: str, seen: str) -> bool:
    """Equal as text, or as integers (NCCL prints '0x1000000' back as '16777216')."""
    if expected.strip() == seen:
        return True
    try:
        return int(expected.strip(), 0) == int(seen, 0)
    except ValueError:
        return False


@dataclass
class Rank:
    """What one process logged."""

    host: str
    pid: int
    devices: list[str] = field(default_factory=list)
    values: dict[str, list[str]] = field(default_factory=dict)  # var -> values in log order
    nranks: int | None = None  # largest communicator size it logged

    @property
    def label(self) -> str:
        return "%s:%d [%s]" % (self.host, self.pid, ",".join(self.devices) or "?")


def parse(lines: Iterable[str]) -> list[Rank]:
    """Ranks in order of first appearance, with every 'set by environment' value they logged."""
    ranks: dict[tuple[str, int], Rank] = {}
    for line in lines:
        m = _NCCL_LINE.search(line.rstrip("\r\n"))
        if not m:
            continue
        key = (m.group("host"), int(m.group("pid")))
        rank = ranks.get(key)
        if rank is None:
            rank = ranks[key] = Rank(host=key[0], pid=key[1])
        dev = m.group("dev")
        if dev not in rank.devices:
            rank.devices.append(dev)
        msg = m.group("msg")
        env = _SET_BY_ENV.match(msg)
        if env:
            rank.values.setdefault(env.group("var"), []).append(clean_value(env.group("value")))
            continue
        if "ncclCommInitRank" in msg or "Init COMPLETE" in msg or "Init START" in msg:
            n = _NRANKS.search(msg)
            if n:
                rank.nranks = max(rank.nranks or 0, int(n.group("n")))
    return list(ranks.values())


@dataclass
class VarStatus:
    var: str
    expected: str
    state: str  # CONFIRMED, WRONG, NOT_LOGGED, NEEDS_RANKS, NOT_KNOWN
    seen: list[str] = field(default_factory=list)
    failure: bool = False

    def text(self) -> str:
        if self.state == CONFIRMED:
            return "%s: confirmed (%s)" % (self.var, self.expected)
        if self.state == WRONG:
            others = [v for v in dict.fromkeys(self.seen) if not same_value(self.expected, v)]
            return "%s: wrong value (seen %s, expected %s)" % (self.var, ", ".join(others), self.expected)
        return "%s: %s" % (self.var, self.state)


@dataclass
class RankReport:
    rank: Rank
    vars: list[VarStatus]

    @property
    def ok(self) -> bool:
        return not any(v.failure for v in self.vars)


@dataclass
class Report:
    expected: dict[str, str]
    ranks: list[RankReport]
    ranks_expected: int | None
    single_rank: bool
    problems: list[str]  # failures not tied to one variable of one rank

    @property
    def ok(self) -> bool:
        return not self.problems and all(r.ok for r in self.ranks)

    @property
    def failures(self) -> list[str]:
        out = list(self.problems)
        for r in self.ranks:
            out += ["%s %s" % (r.rank.label, v.text()) for v in r.vars if v.failure]
        return out

    def lines(self) -> list[str]:
        count = "%d rank%s" % (len(self.ranks), "" if len(self.ranks) == 1 else "s")
        if self.ranks_expected is not None:
            count += " (expected %d)" % self.ranks_expected
        lines = ["NCCL confirmation: %s, %s" % (count, "ok" if self.ok else "FAILED")]
        lines += ["  %s" % p for p in self.problems]
        for r in self.ranks:
            confirmed = sum(1 for v in r.vars if v.state == CONFIRMED)
            lines.append(
                "  %s: %d/%d confirmed%s" % (r.rank.label, confirmed, len(r.vars), "" if r.ok else ", FAILED")
            )
            lines += ["    %s%s" % (v.text(), "  <- failure" if v.failure else "") for v in r.vars]
        return lines

    def as_dict(self) -> dict:
        return {
            "ok": self.ok,
            "expected": dict(self.expected),
            "ranks_expected": self.ranks_expected,
            "single_rank": self.single_rank,
            "problems": list(self.problems),
            "ranks": [
                {
                    "host": r.rank.host,
                    "pid": r.rank.pid,
                    "devices": list(r.rank.devices),
                    "nranks": r.rank.nranks,
                    "ok": r.ok,
                    "vars": {
                        v.var: {
                            "expected": v.expected,
                            "state": v.state,
                            "seen": list(v.seen),
                            "failure": v.failure,
                        }
                        for v in r.vars
                    },
                }
                for r in self.ranks
            ],
        }


def confirm(
    lines: Iterable[str],
    expected: Mapping[str, str],
    ranks_expected: int | None = None,
    also_required: Iterable[str] = (),
) -> Report:
    """Check NCCL's log lines against the expected NCCL_* values (see the module docstring).

    ranks_expected: how many ranks (processes) must have logged; None: whoever logged. Whether
    the communicator is a single rank comes from ranks_expected, else from the largest 'nranks N'
    NCCL logged at init, else from how many processes logged at all.
    """
    expected = {str(k): str(v) for k, v in expected.items()}
    required = (LOGGED | frozenset(also_required)) & frozenset(expected)
    ranks = parse(lines)
    logged_sizes = [r.nranks for r in ranks if r.nranks]
    if ranks_expected is not None:
        size = ranks_expected
    elif logged_sizes:
        size = max(logged_sizes)
    else:
        size = len(ranks)
    single = size <= 1

    problems = []
    if ranks_expected is not None and len(ranks) != ranks_expected:
        problems.append(
            "%d rank%s logged NCCL lines, expected %d"
            % (len(ranks), "" if len(ranks) == 1 else "s", ranks_expected)
        )
    if not ranks and required:
        problems.append("no NCCL log line found (is NCCL_DEBUG=INFO set for the workers?)")
    for var in sorted(required - NEEDS_TWO_RANKS if single else required):
        if ranks and not any(var in r.values for r in ranks):
            problems.append("%s is never logged by any rank" % var)

    # Evidence: a variable some rank logged is logged by NCCL here, so every rank must log it.
    required |= frozenset(var for var in expected if any(var in r.values for r in ranks))
    reports = []
    for rank in ranks:
        statuses = []
        for var, want in expected.items():
            seen = rank.values.get(var, [])
            if seen:
                good = all(same_value(want, v) for v in seen)
                statuses.append(
                    VarStatus(var, want, CONFIRMED if good else WRONG, list(seen), failure=not good)
                )
            elif var in NEEDS_TWO_RANKS and single:
                statuses.append(VarStatus(var, want, NEEDS_RANKS))
            elif var in required:
                statuses.append(VarStatus(var, want, NOT_LOGGED, failure=True))
            else:
                statuses.append(VarStatus(var, want, NOT_KNOWN))
        reports.append(RankReport(rank, statuses))
    return Report(
        expected=expected, ranks=reports, ranks_expected=ranks_expected, single_rank=single, problems=problems
    )
