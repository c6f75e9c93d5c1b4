"""From a follower node: can it reach rank 0's --dist-init-addr at all?

    python3 dist_reach.py --addr 10.0.0.1:5000 --node-rank 1 [--timeout 2.0] [--interval 0.2]
                          [--listening-port 4999]

A real TCP connect (then an immediate close: no byte is sent) to HOST:PORT, retried every
--interval seconds until it succeeds or --timeout seconds have passed. What listens there is
torch's TCPStore in rank 0's first scheduler (SGLang 0.5.23 hands --dist-init-addr to
torch.distributed as tcp://HOST:PORT), from the moment rank 0 reaches "Init parallel" until it
stops: so ask only once rank 0 runs. A bare connect that leaves is no rank to TCPStore (nor to
the stand-in): the probe does not disturb a rank 0 that waits for its followers.

--listening-port: the port rank 0 listens on now, when this change moves the group's dist-init
port (the controller reads it from rank 0's running argv, dist_init_port_of). Nothing listens
on the new port until the group restarts onto it, so the probe asks the same host on the port
rank 0 listens on: the route and the host are what it can prove before the restart; the new
port is first reached by the group's start (its gate names a follower that never joins).

One progress line, then the result line (result.py): status READY when connected, else
PREFLIGHT_FAILED (a follower that cannot reach rank 0 cannot start) with the cause, e.g.
"node-rank 1 cannot reach 10.0.0.1:5000: connection refused after 2.0 s", and the details
reachable, host, port (the one probed), node_rank, attempts, elapsed_s, error, and with
--listening-port the planned port as planned_port.
"""

import argparse
import errno
import socket
import sys
import time

if __package__:
    from .lib import result, status
else:  # run as a script: our scripts' directory is on sys.path
    from lib import result, status

# What each way of failing means, in the words the cause uses.
REASONS = {
    errno.ECONNREFUSED: "connection refused",  # the host answered: nothing listens on the port
    errno.EHOSTUNREACH: "no route to host",
    errno.ENETUNREACH: "network unreachable",
    errno.ECONNRESET: "connection reset",
    errno.ETIMEDOUT: "timed out (no answer: a firewall dropping packets, or a wrong host)",
}
TIMED_OUT = REASONS[errno.ETIMEDOUT]


def split_addr(addr):
    """HOST:PORT (IPv6 as [HOST]:PORT) -> (host, port); ValueError when it is neither."""
    host, sep, port = addr.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError("not HOST:PORT: %r" % addr)
    return host, int(port)


def dist_init_port_of(argv):
    """The port of --dist-init-addr in a server's argv (rank 0's, as it runs), or None."""
    for i, arg in enumerate(argv):
        if arg == "--dist-init-addr" and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("--dist-init-addr="):
            value = arg.partition("=")[2]
        else:
            continue
        try:
            return split_addr(value)[1]
        except ValueError:
            return None
    return None


def reason_of(exc):
    if isinstance(exc, socket.gaierror):
        return "cannot resolve the host name (%s)" % exc.strerror
    if isinstance(exc, socket.timeout):
        return TIMED_OUT
    return REASONS.get(exc.errno, exc.strerror or exc.__class__.__name__)


def try_connect(host, port, timeout):
    """None when a TCP connection was made (and closed), else why not."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as exc:
        return reason_of(exc)


def reach(host, port, timeout, interval, clock=time.monotonic, sleep=time.sleep):
    """(error or None, attempts, elapsed seconds): connect until it works or timeout passed."""
    started = clock()
    attempts = 0
    while True:
        attempts += 1
        left = timeout - (clock() - started)
        error = try_connect(host, port, max(0.05, left))
        elapsed = clock() - started
        if error is None or error.startswith("cannot resolve") or elapsed >= timeout:
            return error, attempts, elapsed
        sleep(min(interval, timeout - elapsed))  # the last attempt comes at the timeout


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="TCP reachability of rank 0's --dist-init-addr from a follower."
    )
    parser.add_argument("--addr", required=True, help="rank 0's --dist-init-addr, HOST:PORT")
    parser.add_argument("--node-rank", type=int, required=True, help="this node's --node-rank")
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds to keep trying")
    parser.add_argument("--interval", type=float, default=0.2, help="seconds between attempts")
    parser.add_argument(
        "--listening-port",
        type=int,
        help="the port rank 0 listens on now, when the restart moves it to --addr's: "
        "probed instead, on --addr's host",
    )
    args = parser.parse_args(argv)
    try:
        host, port = split_addr(args.addr)
    except ValueError as exc:
        parser.error("--addr: %s" % exc)
    moved = {}
    if args.listening_port not in (None, port):
        if not 0 < args.listening_port < 65536:
            parser.error("--listening-port: not a port: %d" % args.listening_port)
        moved = dict(planned_port=port)
        port = args.listening_port
        print(
            "rank 0 listens on port %d until the group restarts onto port %d: probing %d (port %d "
            "is first reached by the group's start)"
            % (port, moved["planned_port"], port, moved["planned_port"]),
            flush=True,
        )
    error, attempts, elapsed = reach(host, port, args.timeout, args.interval)
    details = dict(
        reachable=error is None,
        host=host,
        port=port,
        node_rank=args.node_rank,
        attempts=attempts,
        elapsed_s=round(elapsed, 3),
        error=error,
        **moved,
    )
    where = "%s:%d" % (("[%s]" % host) if ":" in host else host, port)
    if error is None:
        print(
            "node-rank %d reaches %s (%.2f s, %d attempt%s)"
            % (args.node_rank, where, elapsed, attempts, "" if attempts == 1 else "s"),
            flush=True,
        )
        return result.emit(status.READY, **details)
    if moved:
        where += " (rank 0's dist-init port until the restart moves it to %d)" % moved["planned_port"]
    cause = "node-rank %d cannot reach %s: %s after %.1f s" % (args.node_rank, where, error, elapsed)
    print(cause, flush=True)
    return result.emit(status.PREFLIGHT_FAILED, cause, **details)


if __name__ == "__main__":
    sys.exit(main())
