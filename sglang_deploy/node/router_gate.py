"""The router's readiness gate: /readiness answers 200 and /workers lists every expected worker
healthy, polled until --timeout (0: look once).

    python3 router_gate.py --url http://127.0.0.1:30000 --worker http://10.0.0.11:30001 ...
        --timeout SECONDS

Ends with one result line: {"workers": {url: "healthy" | "unhealthy" | "not listed"},
"readiness": status code}; exit 0 when ready, 4 (TIMEOUT) otherwise, naming what is missing.
"""

import argparse
import sys
import time

if __package__:
    from .lib import result, status
    from .lib.routers import Router, RouterError, normal_url
else:  # run as a script: our scripts' directory is on sys.path
    from lib import result, status
    from lib.routers import Router, RouterError, normal_url


def view(router, expected):
    """(readiness status or None, {expected url: state}, why not ready or None)."""
    try:
        code, _ = router.readiness()
        listed = router.workers()
    except RouterError as exc:
        return None, {}, str(exc)
    states = {}
    for url in expected:
        seen = listed.get(normal_url(url))
        states[url] = "not listed" if seen is None else ("healthy" if seen["healthy"] else "unhealthy")
    bad = ["%s %s" % (url, state) for url, state in states.items() if state != "healthy"]
    why = None
    if code != 200:
        why = "/readiness answered %d" % code
    if bad:
        why = (why + "; " if why else "") + ", ".join(bad)
    return code, states, why


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--worker", action="append", default=[])
    parser.add_argument("--timeout", type=float, required=True)  # the router_gate_timeout_s setting
    parser.add_argument("--interval", type=float, default=0.5)
    args = parser.parse_args(argv)
    router = Router(args.url)
    deadline = time.monotonic() + args.timeout
    while True:
        code, states, why = view(router, args.worker)
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
