"""The restart cycle of one node of a fleet, out of rotation: take the node out of every router,
let its in-flight requests finish, run the restart cycle (cycle.py), then put it back in every
router and wait until each lists it healthy. The node calls the routers itself: they must reach
it anyway, and the controller then only orders the nodes.

    python3 rotation.py --worker-url http://10.0.0.11:30001 [--host H] --local-port 30001
        [--router http://10.0.0.5:30000 ...] [--drain-timeout 120] [--healthy-timeout 120]
        [--drain-settle 5] [--allow-unreachable-routers]
        [--textfile-service sglang --textfile-port 30001 [--textfile-dir DIR]]
        [--api-key-env-file /etc/sglang/sglang.env --api-key-var SGLANG_API_KEY]
        --cycle 'CYCLE COMMAND' --restore 'RESTORE COMMAND'
    python3 rotation.py ... --only out     # out of rotation and drained, nothing restarted
    python3 rotation.py ... --only back    # back in every router and healthy there

Before anything: every router must answer /health, or nothing is taken out of rotation, the
restore command puts the last known good files back (the node keeps serving what it served)
and the result says which router (--allow-unreachable-routers rolls past it). A node that was
not serving is in no rotation: it is restarted without draining. The node goes back into the
routers whenever it serves after the cycle: the new configuration, or the old one after a
rollback or a failed preflight.

Never the last routable worker of a model: right before the node leaves a router, that router's
own view (/workers) must list another worker of the node's model as routable (ready),
waited for up to --healthy-timeout; otherwise nothing (more) is
taken out of rotation, the node is put back where it left, its files are restored, and the
outcome is "last_in_rotation". The controller plans batches so this never happens; the check
closes the window where a peer fails, or is still pending in a router, after the plan was made
(a router that routes to none of a model's workers answers its requests 503).

Leaving a router: its drain settle time is set first (PATCH, to --drain-settle seconds), then
the removal lists the node "draining" (no new requests, those in flight finish) until the
router removes it. Before the node goes back, a draining entry is waited out (smg refuses to
add a URL it still lists).

The node's own server is asked (/ping, /get_load) at --host, its own --host (loopback when that
is 0.0.0.0 or ::), with its API key where it has one (lib/engine_auth.py). Draining waits, up to
--drain-timeout, until the server's /get_load counts no request running or waiting. A load that cannot be read (no answer, an HTTP error, an answer without the counts) is
not "drained": /get_load is asked again until the drain timeout, which gives requests the whole
drain time the operator allowed, and then, as with requests still in flight, the restart goes
ahead, saying "load unknown: <why>" (the node is out of every router by then: waiting longer
would only keep it out of rotation longer).

With --textfile-service, the node's sglang_deploy_in_rotation sample (lib/textfile.py, its own
file in the node exporter's textfile directory, so it holds between deploys) follows what this
script does to the routers: 0 right before the node leaves the first router, or when it does not
serve (in no rotation, or left out after a cycle that ended not serving: failed, rollback
failed); 1 once every router it rotates through lists it healthy again (after the new
configuration, a rollback or a failed preflight); 0 when a router did not take it back. A
rotation refused before anything left a router changes nothing, the sample neither. Behind no
router (no --router) there is no rotation to be in: the sample is removed, not 0 or 1, so no
rule fires on it and "nodes in rotation" counts only nodes behind routers.

Ends with one result line: the cycle's result (outcome, steps, restored, profile) plus
"rotation": {"routers", "out_s" (time out of rotation), "drain_s", "drained", "in_flight_left"
(None when unknown), "load_unknown" (why, or None)};
a cycle that did not run has outcome "router_unreachable", "router_failed" or
"last_in_rotation". The halves
(--only) serve a restart the node does not run alone (a serving group's, driven from the
controller): `out` ends with {"outcome": "out" | "router_unreachable" | "router_failed" | "last_in_rotation",
"rotation": {..., "was_serving"}} and restores nothing; `back` with the cause of a router
that did not take the node back, if any.
"""

import argparse
import json
import sys
import time
import urllib.error

if __package__:
    from .lib import engine_auth, result, status, textfile
    from .lib.http_probe import server_url
    from .lib.routers import Router, RouterError, last_routable, normal_url, state_of
else:  # run as a script: our scripts' directory is on sys.path
    from lib import engine_auth, result, status, textfile
    from lib.http_probe import server_url
    from lib.routers import Router, RouterError, last_routable, normal_url, state_of

SERVES_AFTER = ("served", "rolled_back", "preflight_failed", "regressed")


def say(text):
    print("rotation: " + text, flush=True)


def mark(args, in_rotation):
    """The in-rotation sample (see the module's docstring): 1 or 0, none behind no router."""
    textfile.export(args, "in_rotation", (1 if in_rotation else 0) if args.router else None)


def in_flight(load_answer):
    """Requests running or waiting, from a /get_load answer (a list per data-parallel rank, or
    one mapping). ValueError when it counts nothing: an answer without a load is no zero."""
    ranks = load_answer if isinstance(load_answer, list) else [load_answer]
    counted = [
        rank
        for rank in ranks
        if isinstance(rank, dict) and ("num_reqs" in rank or "num_waiting_reqs" in rank)
    ]
    if not counted:
        raise ValueError("no num_reqs in the answer: %.80s" % json.dumps(load_answer))
    return sum(int(rank.get("num_reqs", 0)) + int(rank.get("num_waiting_reqs", 0)) for rank in counted)


def _get(url, timeout=3.0, key=None):
    with engine_auth.opener(key).open(url, timeout=timeout) as answer:
        return answer.status, answer.read().decode(errors="replace")


def serving(port, host="127.0.0.1", key=None):
    """/ping answers 200, or 401: a server started with another key than the env file's (a key
    being changed) serves all the same, and is drained as one (its load then unknown)."""
    try:
        return _get(server_url(host, port) + "/ping", key=key)[0] == 200
    except urllib.error.HTTPError as exc:
        return exc.code == 401
    except OSError:
        return False


def _why(exc):
    if isinstance(exc, urllib.error.HTTPError):
        return "/get_load answered HTTP %d" % exc.code
    if isinstance(exc, json.JSONDecodeError):
        return "/get_load answered no JSON"
    if isinstance(exc, urllib.error.URLError):
        return "/get_load: %s" % (exc.reason,)
    return "/get_load: %s" % (exc or type(exc).__name__)


def drain(port, timeout, interval=0.25, host="127.0.0.1", key=None):
    """Wait until the node has no request in flight: (seconds waited, requests left or None
    when the load could not be read, why it could not or None). An unreadable load is asked
    again until the timeout (see the module's docstring)."""
    started = time.monotonic()
    while True:
        try:
            left, unknown = (
                in_flight(json.loads(_get(server_url(host, port) + "/get_load", key=key)[1])),
                None,
            )
        except (OSError, ValueError) as exc:
            left, unknown = None, _why(exc)
        waited = time.monotonic() - started
        if left == 0 or waited >= timeout:
            return waited, left, unknown
        time.sleep(interval)


def put_back(routers, worker_url, timeout, settle=0.0):
    """Add the node to every router that does not list it (a draining entry waited out
    first: up to ``settle`` more), then wait until each lists it healthy. The cause of the
    first failure, or None."""
    for router in routers:
        try:
            seen = router.workers().get(normal_url(worker_url))
            if state_of(seen) == "draining":
                router.wait_for(worker_url, "absent", timeout + settle)
                seen = None
            if seen is None:
                router.add(worker_url)
            router.wait_for(worker_url, "healthy", timeout)
            say("healthy in %s again" % router.url)
        except RouterError as exc:
            return str(exc)
    return None


def answering(routers, was_serving, allow_unreachable):
    """(the routers to rotate through, the refusal's cause or None): a router that does not
    answer refuses the rotation of a serving node unless that is allowed."""
    unreachable = []
    for router in routers:
        try:
            if not router.health():
                unreachable.append("router %s: /health is not 200" % router.url)
        except RouterError as exc:
            unreachable.append(str(exc))
    # A node that does not serve is in no rotation: a router down cannot cost it requests
    # (and a starting router lists it from its unit).
    if unreachable and was_serving and not allow_unreachable:
        return routers, "; ".join(unreachable) + ": nothing was taken out of rotation"
    for line in unreachable:
        say(line + (": rolling without it (allowed)" if was_serving else ": skipped"))
    return [r for r in routers if not any(r.url + ":" in line for line in unreachable)], None


def peers_routable(router, worker_url, timeout, interval=0.25):
    """None when ``router`` lists another routable worker of the node's model (or the node is
    the model's only worker there), waited for up to ``timeout``; else why not."""
    deadline = time.monotonic() + timeout
    while True:
        why = last_routable(router.workers(), worker_url)
        if why is None or time.monotonic() >= deadline:
            return None if why is None else "router %s: %s" % (router.url, why)
        time.sleep(interval)


def take_out(args, rotation):
    """Out of every answering router and drained. (routers, was_serving, outcome, cause):
    outcome and cause say why nothing was taken out ("router_unreachable") or why the node is
    back in ("router_failed"); both None when it is out (or was in no rotation)."""
    was_serving = serving(args.local_port, args.host, engine_auth.key_of(args))
    routers, refused = answering(
        [Router(url) for url in args.router], was_serving, args.allow_unreachable_routers
    )
    rotation["routers"] = [r.url for r in routers]
    if refused:
        return routers, was_serving, "router_unreachable", refused
    if not was_serving:
        say("not serving: in no rotation, nothing to drain")
        mark(args, False)
        return routers, was_serving, None, None
    left = []
    try:
        for router in routers:  # every router's view first: a refusal takes nothing out
            why = peers_routable(router, args.worker_url, args.healthy_timeout)
            if why:
                return routers, was_serving, "last_in_rotation", why + ": nothing was taken out of rotation"
        for router in routers:
            why = peers_routable(router, args.worker_url, 0)  # again, right before leaving it
            if why:
                cause = put_back(left, args.worker_url, args.healthy_timeout, args.drain_settle or 0)
                if left:
                    mark(args, cause is None)
                why += ": put back in the routers it had left" + ("" if cause is None else "; " + cause)
                return routers, was_serving, "last_in_rotation", why
            mark(args, False)  # before it leaves: the sample never says "in" of a node that is out
            left.append(router)
            if router.remove(args.worker_url, args.drain_settle, args.healthy_timeout):
                router.wait_for(args.worker_url, "out", args.healthy_timeout)
            say("out of %s" % router.url)
    except RouterError as exc:
        cause = put_back(routers, args.worker_url, args.healthy_timeout, args.drain_settle or 0)
        if left:
            mark(args, cause is None)
        return routers, was_serving, "router_failed", str(exc) + ("" if cause is None else "; " + cause)
    drain_s, left, unknown = drain(
        args.local_port, args.drain_timeout, host=args.host, key=engine_auth.key_of(args)
    )
    rotation.update(drain_s=round(drain_s, 2), drained=left == 0, in_flight_left=left, load_unknown=unknown)
    if unknown:
        say("load unknown: %s (for %.0fs): restarting anyway" % (unknown, drain_s))
    elif left:
        say("%d request(s) still in flight after %.0fs: restarting anyway" % (left, drain_s))
    else:
        say("drained in %.1fs" % drain_s)
    return routers, was_serving, None, None


def rotate(args):
    """Out, the restart cycle, back in (when the node serves after it)."""
    rotation = {
        "routers": [],
        "out_s": 0.0,
        "drain_s": 0.0,
        "drained": True,
        "in_flight_left": 0,
        "load_unknown": None,
    }
    taken_out = time.monotonic()
    routers, was_serving, refused, cause = take_out(args, rotation)
    if refused:
        code, _ = result.run_streaming(args.restore)
        return result.emit(
            status.PREFLIGHT_FAILED,
            cause,
            outcome=refused,
            steps=[],
            restored=code == status.READY,
            rotation=rotation,
        )

    code, lines = result.run_streaming(args.cycle)
    found = result.parse(lines)
    if found is None:
        mark(args, False)
        rotation["out_s"] = round(time.monotonic() - taken_out, 2)
        return result.emit(
            code or status.UNEXPECTED,
            "restart cycle printed no result",
            outcome="failed",
            steps=[],
            restored=False,
            rotation=rotation,
        )
    details = {k: v for k, v in found.items() if k not in ("status", "result", "cause")}
    cause, code = found.get("cause"), found["status"]
    if found.get("outcome") in SERVES_AFTER:
        failed = put_back(routers, args.worker_url, args.healthy_timeout, args.drain_settle or 0)
        mark(args, failed is None)
        if failed:
            cause = failed if code == status.READY else "%s; %s" % (cause, failed)
            code = code if code != status.READY else status.TIMEOUT
            details["rotation_failed"] = failed
    else:  # it does not serve: left out of every router
        mark(args, False)
    rotation["out_s"] = round(time.monotonic() - taken_out, 2) if was_serving else 0.0
    details["rotation"] = rotation
    return result.emit(code, cause, **details)


def out_only(args):
    """Out of rotation and drained, for a restart the caller runs itself (a serving group's,
    driven from the controller). Result: {"rotation": {..., "was_serving"}, "outcome"}."""
    rotation = {"routers": [], "drain_s": 0.0, "drained": True, "in_flight_left": 0, "load_unknown": None}
    _, was_serving, refused, cause = take_out(args, rotation)
    rotation["was_serving"] = was_serving
    return result.emit(
        status.PREFLIGHT_FAILED if refused else status.READY,
        cause,
        outcome=refused or "out",
        rotation=rotation,
    )


def back_only(args):
    """Back into every router and healthy there (after out_only and the caller's restart); a
    node that does not serve stays out (a router would send it requests it cannot answer)."""
    routers = [Router(url) for url in args.router]
    if not serving(args.local_port, args.host, engine_auth.key_of(args)):
        say("not serving: left out of every router")
        mark(args, False)
        return result.emit(
            status.FAILED_START,
            "not serving: left out of rotation",
            rotation={"routers": [r.url for r in routers]},
        )
    cause = put_back(routers, args.worker_url, args.healthy_timeout, args.drain_settle or 0)
    mark(args, cause is None)
    return result.emit(
        status.TIMEOUT if cause else status.READY, cause, rotation={"routers": [r.url for r in routers]}
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker-url", required=True, help="this node as the routers know it")
    parser.add_argument("--host", default="127.0.0.1", help="the server's --host (0.0.0.0 means 127.0.0.1)")
    parser.add_argument("--local-port", type=int, required=True, help="the server's port here")
    parser.add_argument("--router", action="append", default=[], help="a router's base URL")
    parser.add_argument("--drain-timeout", type=float, default=120.0)
    parser.add_argument("--healthy-timeout", type=float, default=120.0)
    parser.add_argument("--drain-settle", type=float, help="seconds a router lists the node draining")
    parser.add_argument("--allow-unreachable-routers", action="store_true")
    parser.add_argument(
        "--only", choices=("out", "back"), help="one half, around a restart driven from elsewhere"
    )
    textfile.add_arguments(parser)
    engine_auth.add_arguments(parser)
    parser.add_argument("--cycle", help="cycle.py's command line")
    parser.add_argument("--restore", help="lastgood.py restore's command line")
    args = parser.parse_args(argv)
    if args.only:
        return out_only(args) if args.only == "out" else back_only(args)
    if not (args.cycle and args.restore):
        parser.error("--cycle and --restore are required (or --only out|back)")
    return rotate(args)


if __name__ == "__main__":
    sys.exit(main())
