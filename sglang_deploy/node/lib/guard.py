"""A node script's main, guarded: whatever it raises, the script still ends with its result
line and a cause (status.UNEXPECTED), its traceback on stderr for whoever reads the node.

    @guarded
    def main(argv=None): ...

A SystemExit with a message (``raise SystemExit("why")``) ends the same way, its message the
cause; one with a status (argparse's usage error, 2) is the script's own ending and passes.
"""

import functools
import sys
import traceback

from . import result, status


def guarded(main):
    @functools.wraps(main)
    def run(argv=None):
        try:
            return main(argv)
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                raise
            cause = str(exc.code)
        except Exception as exc:
            traceback.print_exc()
            cause = "unexpected error: %s: %s" % (type(exc).__name__, exc)
        print(cause, file=sys.stderr, flush=True)
        return result.emit(status.UNEXPECTED, cause)

    return run
