"""Every expected scrape target up in Prometheus: /api/v1/targets lists each --expect URL with
health "up". A target Prometheus has not scraped yet ("unknown") is waited for up to --settle
seconds; a down one fails at once, with the error of its last scrape.

    python3 prometheus_targets.py --url http://127.0.0.1:9090 --settle SECONDS
        --expect http://10.0.0.11:30001/metrics ...

Ends with one result line: {"targets": {url: {"health": "up" | "down" | "unknown" |
"not scraped", "error": last scrape error}}, "unexpected": URLs scraped but not expected};
exit 0 when every one is up, 40 (TARGETS_DOWN) naming every other, 4 (TIMEOUT) when
Prometheus did not answer.
"""

import argparse
import sys
import time

if __package__:
    from .lib import prometheus_api, result, status
else:  # run as a script: our scripts' directory is on sys.path
    from lib import prometheus_api, result, status


def verdict(health):
    """The targets that are not up, as "<url> <health> (<error>)", in the given order."""
    return [
        "%s %s%s" % (url, state, " (%s)" % error if error else "")
        for url, (state, error) in health.items()
        if state != "up"
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--expect", action="append", default=[])
    parser.add_argument("--settle", type=float, default=0.0)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.settle
    while True:
        code, body = prometheus_api.get(args.url + "/api/v1/targets?state=active")
        if code == 200:
            health, unexpected = prometheus_api.target_health(body, args.expect)
            pending = [url for url, (state, _) in health.items() if state == "unknown"]
            if not pending or time.monotonic() >= deadline:
                break
        elif time.monotonic() >= deadline:
            why = "answered %d" % code if code else "did not answer (%s)" % body
            return result.emit(status.TIMEOUT, "Prometheus at %s %s" % (args.url, why), targets={})
        time.sleep(args.interval)
    targets = {url: {"health": state, "error": error} for url, (state, error) in health.items()}
    bad = verdict(health)
    if bad:
        cause = "%d of %d target(s) not up: %s" % (len(bad), len(health), "; ".join(bad))
        return result.emit(status.TARGETS_DOWN, cause, targets=targets, unexpected=unexpected)
    print("%d target(s) up at %s" % (len(health), args.url), flush=True)
    return result.emit(status.READY, None, targets=targets, unexpected=unexpected)


if __name__ == "__main__":
    sys.exit(main())
