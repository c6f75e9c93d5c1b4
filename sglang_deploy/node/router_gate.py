"""The router's readiness gate: /readiness answers 200 and /workers lists every expected worker
healthy, polled until --timeout (0: look once).

    python3 router_gate.py --url http://127.0.0.1:30000 [--probe-url http://127.0.0.1:29001]
        --worker http://10.0.0.11:30001 ... --timeout SECONDS

--probe-url: the gateway's dedicated probe port (smg's --health-check-port), where /readiness
is asked instead of the main port: what a load balancer in front of the router asks. smg
answers 503 with a reason: "draining" while the gateway stops (an old process still
finishing its requests), "insufficient healthy workers" before a worker is ready.

Ends with one result line: {"workers": {url: "healthy" | smg's state (pending, not_ready,
failed, draining) | "not listed"},
"readiness": status code}; exit 0 when ready, 4 (TIMEOUT) otherwise, naming what is missing.
"""

import argparse
import sys
import time

if __package__:
    from .lib import result, status
    from .lib.routers import Router, RouterError, answer_field, normal_url, state_of
else:  # run as a script: our scripts' directory is on sys.path
    from lib import result, status
    from lib.routers import Router, RouterError, answer_field, normal_url, state_of


def readiness_reason(text):
    """The reason of a /readiness answer (smg's JSON body), or None."""
    return answer_field(text, "reason")


def view(router, expected, probe=None):
    """(readiness status or None, {expected url: state}, why not ready or None); readiness
    is asked of ``probe`` (the probe port's Router) when given."""
    try:
        code, text = (probe or router).readiness()
        listed = router.workers()
    except RouterError as exc:
        return None, {}, str(exc)
    states = {}
    for url in expected:
        state = state_of(listed.get(normal_url(url)))
        states[url] = "not listed" if state == "absent" else state
    bad = ["%s %s" % (url, state) for url, state in states.items() if state != "healthy"]
    why = None
    if code != 200:
        reason = readiness_reason(text)
        where = " on its probe port" if probe else ""
        why = "/readiness%s answered %d%s" % (where, code, " (%s)" % reason if reason else "")
    if bad:
        why = (why + "; " if why else "") + ", ".join(bad)
    return code, states, why


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--probe-url", help="the gateway's probe port, where /readiness is asked")
    parser.add_argument("--worker", action="append", default=[])
    parser.add_argument("--timeout", type=float, required=True)  # the router_gate_timeout_s setting
    parser.add_argument("--interval", type=float, default=0.5)
    args = parser.parse_args(argv)
    router = Router(args.url)
    probe = Router(args.probe_url) if args.probe_url else None
    deadline = time.monotonic() + args.timeout
    while True:
        code, states, why = view(router, args.worker, probe)
        if why is None or time.monotonic() >= deadline:
            break
        time.sleep(args.interval)
    if why is None:
        print("router %s ready: %d worker(s) healthy" % (args.url, len(states)), flush=True)
        return result.emit(status.READY, None, workers=states, readiness=code)
    return result.emit(
        status.TIMEOUT,
        "router %s not ready after %.0fs: %s" % (args.url, args.timeout, why),
        workers=states,
        readiness=code,
    )


if __name__ == "__main__":
    sys.exit(main())
