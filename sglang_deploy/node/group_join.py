"""Has every node of a multi-node group joined rank 0, and if not, which follower is missing?

    python3 group_join.py --rank0-log FILE --nnodes N --tp-size T
        [--follower-log RANK=FILE ...] [--follower-host RANK=IP ...]

Read from the logs SGLang 0.5.23 writes (the stand-in writes the same lines). Every scheduler logs
"Init parallel begin.", then waits in torch's tcp:// rendezvous at --dist-init-addr until all
--tp-size ranks of all nodes are there, then logs "Init parallel ends. ...". Rank 0's log itself
never names a missing rank -- torch only counts them when it gives up (after the timeout + 1 s,
600 s by default):

    torch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients. 1/2 clients joined.

so which follower is missing comes from the followers' own logs, where there are any: no
"Init parallel begin." yet (not started), or torch's "The client socket has timed out after
...ms while trying to connect to (HOST, PORT)." (never reached rank 0). A peer lost after joining
is gloo's "Connection closed by peer [IP]:PORT" in rank 0's log; --follower-host maps that IP to
a node rank. With two nodes the one follower is the missing one whatever the evidence.

States of rank 0: not-started, waiting, joined, timed-out, lost, bind-failed. The result line
(result.py): READY when rank 0 got past the rendezvous; TIMEOUT while it still waits; FAILED_START
when the rendezvous failed; the cause names the follower(s) when known, and the details carry
state, missing, unknown, joined, world.
"""

import argparse
import re
import sys

if __package__:
    from .lib import result, status
else:  # run as a script: our scripts' directory is on sys.path
    from lib import result, status

# A scheduler's own lines: "[2026-11-30 10:00:00 TP3] ..." (other tags such as DP0/EP0 may be there too).
_TP_LINE = r"[\[ ]TP%d(?:\s[^\]]*)?\]\s*"
_BEGIN = "Init parallel begin"
_NOT_JOINED = ("not started",)
_ENDS = "Init parallel ends"
TIMED_OUT_RE = re.compile(r"Timed out after (\d+) seconds waiting for clients\. (\d+)/(\d+) clients joined")
CLIENT_TIMEOUT_RE = re.compile(
    r"The client socket has timed out after (\d+)ms while trying to connect to \(([^,]+), (\d+)\)"
)
PEER_CLOSED_RE = re.compile(r"Connection closed by peer \[([^\]]+)\]:(\d+)")
BIND_FAILED_RE = re.compile(
    r"The server socket has failed to listen on any local network address\. port: (\d+)"
)


def _seen(lines, tp_rank, what):
    rx = re.compile((_TP_LINE % tp_rank) + re.escape(what))
    return any(rx.search(line) for line in lines)


def rank0_state(lines):
    """(state, details) of rank 0's rendezvous, from its log lines (the last start's)."""
    for line in lines:
        m = TIMED_OUT_RE.search(line)
        if m:
            return "timed-out", {
                "after_s": int(m.group(1)),
                "joined": int(m.group(2)),
                "world": int(m.group(3)),
            }
        m = BIND_FAILED_RE.search(line)
        if m:
            return "bind-failed", {"port": int(m.group(1))}
    ended = _seen(lines, 0, _ENDS)
    for line in lines:
        m = PEER_CLOSED_RE.search(line)
        if m:
            return "lost", {"peer": m.group(1), "peer_port": int(m.group(2))}
    if ended:
        return "joined", {}
    if _seen(lines, 0, _BEGIN):
        return "waiting", {}
    return "not-started", {}


def follower_evidence(lines, node_rank, tp_per_node):
    """What a follower's own log says: 'joined', 'unreachable: <host:port>', 'connecting',
    'not started' (None: no log to read)."""
    if lines is None:
        return None
    ranks = range(node_rank * tp_per_node, (node_rank + 1) * tp_per_node)
    for line in lines:
        m = CLIENT_TIMEOUT_RE.search(line)
        if m:
            return "unreachable: %s:%s" % (m.group(2), m.group(3))
    if all(_seen(lines, r, _ENDS) for r in ranks):
        return "joined"
    if any(_seen(lines, r, _BEGIN) for r in ranks):
        return "connecting"
    return "not started"


def assess(rank0_lines, nnodes, tp_size, follower_logs=None, follower_hosts=None):
    """The group's join state: {state, missing, unknown, evidence, cause, ...details}."""
    follower_logs = follower_logs or {}
    follower_hosts = follower_hosts or {}
    tp_per_node = tp_size // nnodes
    state, details = rank0_state(rank0_lines)
    followers = list(range(1, nnodes))
    evidence = {r: follower_evidence(follower_logs.get(r), r, tp_per_node) for r in followers}
    missing, unknown = [], []
    if state == "lost":
        by_ip = [r for r, host in follower_hosts.items() if host == details["peer"]]
        missing = by_ip if len(by_ip) == 1 else ([1] if nnodes == 2 else [])
        unknown = [] if missing else followers
    elif state in ("waiting", "timed-out"):
        missing = [
            r
            for r in followers
            if evidence[r] in _NOT_JOINED or (evidence[r] or "").startswith("unreachable")
        ]
        unknown = [r for r in followers if evidence[r] is None]
        # How many followers are absent: torch's count once it gave up; while rank 0 waits, at
        # least one. Followers without a log fill that number when no log names one.
        if state == "timed-out":
            absent = (details["world"] - details["joined"]) // max(1, tp_per_node)
        else:
            absent = 1 if nnodes == 2 else None
        if not missing and unknown and absent is not None and len(unknown) <= absent:
            missing, unknown = unknown, []
    return dict(
        details,
        state=state,
        missing=missing,
        unknown=unknown,
        evidence={str(r): e for r, e in evidence.items()},
        cause=_cause(state, details, missing, unknown, evidence),
    )


def _names(ranks):
    return ", ".join("node-rank %d" % r for r in ranks)


def _why(ranks, evidence):
    said = ["%s: %s" % (_names([r]), evidence[r]) for r in ranks if evidence.get(r)]
    return " (%s)" % "; ".join(said) if said else ""


def _cause(state, details, missing, unknown, evidence):
    if state == "joined":
        return None
    if state == "not-started":
        return "rank 0 has not reached the rendezvous (no 'Init parallel begin.' from TP0)"
    if state == "bind-failed":
        return (
            "rank 0 cannot listen on its --dist-init-addr port %d: address already in use" % details["port"]
        )
    if state == "lost":
        who = _names(missing) if missing else "a follower at %s" % details["peer"]
        return "rank 0 lost %s after it had joined (gloo: connection closed by peer %s)" % (
            who,
            details["peer"],
        )
    counted = ""
    if state == "timed-out":
        counted = "rank 0 gave up after %d s, %d/%d ranks joined: " % (
            details["after_s"],
            details["joined"],
            details["world"],
        )
    else:
        counted = "rank 0 is waiting for its followers: "
    if missing:
        return counted + "%s has not joined%s" % (_names(missing), _why(missing, evidence))
    if unknown:
        return counted + "no log tells which of %s is missing" % _names(unknown)
    return counted + "every follower's log shows it connecting; rank 0 still waits"


def _pairs(values, what):
    found = {}
    for value in values or []:
        rank, sep, rest = value.partition("=")
        if not sep or not rank.isdigit():
            raise argparse.ArgumentTypeError("%s: expected RANK=VALUE, got %r" % (what, value))
        found[int(rank)] = rest
    return found


def _read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read().splitlines()


def main(argv=None):
    parser = argparse.ArgumentParser(description="Which follower has not joined rank 0 yet.")
    parser.add_argument("--rank0-log", required=True, help="rank 0's log (its journal of this start)")
    parser.add_argument("--nnodes", type=int, required=True)
    parser.add_argument("--tp-size", type=int, required=True)
    parser.add_argument("--follower-log", action="append", help="RANK=FILE, a follower's log")
    parser.add_argument("--follower-host", action="append", help="RANK=IP, a follower's address")
    args = parser.parse_args(argv)
    try:
        logs = {r: _read(p) for r, p in _pairs(args.follower_log, "--follower-log").items()}
        hosts = _pairs(args.follower_host, "--follower-host")
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    found = assess(_read(args.rank0_log), args.nnodes, args.tp_size, logs, hosts)
    print("rank 0: %s%s" % (found["state"], ": " + found["cause"] if found["cause"] else ""), flush=True)
    code = {"joined": status.READY, "waiting": status.TIMEOUT, "not-started": status.TIMEOUT}.get(
        found["state"], status.FAILED_START
    )
    cause = found.pop("cause")
    return result.emit(code, cause, **found)


if __name__ == "__main__":
    sys.exit(main())
