"""Exit statuses shared by the on-node scripts and the controller.

Each status is defined once here, with a one-line description. 0 is success,
1 is left to Python for an unexpected error (uncaught exception), 2 is
argparse's usage error; everything specific has its own value.

    python3 status.py            # print the table
    python3 status.py 4          # describe one status
"""

import argparse
import sys

READY = 0
UNEXPECTED = 1
USAGE = 2
FAILED_START = 3
TIMEOUT = 4
HUNG = 5
STOP_TIMEOUT = 6
WORKER_ENV_MISMATCH = 7
NO_WORKERS = 8
LOCKED = 9
NO_LAST_GOOD = 10
PREFLIGHT_FAILED = 11
DRIFT = 12
NOT_INSTALLED = 13
NOT_INSTALLED_CONFIG = 14
NO_GPU = 15
GPUS_BUSY = 16
MEASUREMENT_FAILED = 17
THROUGHPUT_REGRESSION = 18
ACS_NOT_CLEARED = 19
DECODE_UNMEASURED = 20
NO_SYSTEMD = 21
MODEL_MISMATCH = 30
NO_SPACE = 31
HUB_ERROR = 32
TARGETS_DOWN = 40
RELOAD_FAILED = 41

DESCRIPTIONS = {
    READY: "success (gate: the server is ready; restart/workers: done, all checks passed)",
    UNEXPECTED: "unexpected error (uncaught exception)",
    USAGE: "bad command line",
    FAILED_START: "the start failed: main process exited, unit failed or was restarted, or could not be started",
    TIMEOUT: "the server was not ready within the timeout",
    HUNG: "no new journal line for too long outside the long phases; start-up looks hung",
    STOP_TIMEOUT: "the old processes, the port or their GPU memory were not released in time",
    WORKER_ENV_MISMATCH: "a worker process lacks an expected environment variable or has another value",
    NO_WORKERS: "no worker process matched (unit not running, or no matching descendants)",
    LOCKED: "another restart of this unit holds the lock",
    NO_LAST_GOOD: "no configuration has passed the readiness gate on this node yet",
    PREFLIGHT_FAILED: "the configuration cannot start on this node (preflight check failed)",
    DRIFT: "installed engine files differ from their wheels' RECORD (modified, missing, unexpected)",
    NOT_INSTALLED: "a distribution the profile names is not installed",
    NOT_INSTALLED_CONFIG: "the server does not run the installed configuration (started before it was written)",
    NO_GPU: "no GPU or no CUDA-capable torch on this node: nothing was measured",
    GPUS_BUSY: "the server holds the GPUs (stop it explicitly to measure)",
    MEASUREMENT_FAILED: "the measurement itself failed (a worker died or timed out)",
    THROUGHPUT_REGRESSION: "decode tok/s below the profile's expectation (min_decode_tok_s, max_regression_pct)",
    ACS_NOT_CLEARED: "ACS could not be cleared on a PCI bridge (or pciutils is missing)",
    DECODE_UNMEASURED: "the decode check could not measure: the server did not answer, erred or streamed too few tokens",
    NO_SYSTEMD: "no systemd on this node (systemd-run): the restart cycle cannot run detached from the deploy",
    MODEL_MISMATCH: "a model directory's files do not match its manifest (missing, truncated, altered)",
    NO_SPACE: "not enough free disk for the model being staged",
    HUB_ERROR: "the Hugging Face Hub refused the model's repo or revision (its answer is the cause)",
    TARGETS_DOWN: "a scrape target Prometheus should scrape is not up (down, not scraped yet, or not listed)",
    RELOAD_FAILED: "Prometheus did not load its configuration again (it keeps serving the one before)",
}

NAMES = {
    value: name
    for name, value in list(globals().items())
    if name.isupper() and isinstance(value, int) and value in DESCRIPTIONS
}


def name(code):
    """Symbolic name of an exit status ('READY', ...), or 'EXIT_<n>' if unknown."""
    return NAMES.get(code, "EXIT_%d" % code)


def describe(code):
    """One line: '<code> <NAME>: <description>'."""
    return "%d %s: %s" % (code, name(code), DESCRIPTIONS.get(code, "unknown status"))


def main(argv=None):
    parser = argparse.ArgumentParser(description="Show the exit statuses of the on-node scripts.")
    parser.add_argument("code", nargs="?", type=int, help="one status to describe")
    args = parser.parse_args(argv)
    codes = [args.code] if args.code is not None else sorted(DESCRIPTIONS)
    for code in codes:
        print(describe(code))
    return READY


if __name__ == "__main__":
    sys.exit(main())
