"""How our entry points fail: one line naming what went wrong, an exit status, no traceback."""

from __future__ import annotations

import sys
from contextlib import contextmanager

from pyinfra.api.exceptions import PyinfraError

from sglang_deploy.errors import DeployError

# A deploy's exit statuses (sglang_deploy/report/outcome.py sets them from the per-host outcomes).
EXIT_DEPLOY_ERROR = 1  # a bad profile or inventory, or a host's deploy failed or never ran
EXIT_UNREACHABLE = 3  # no host failed, but at least one could not be reached


class DeployStopped(PyinfraError):
    """A host's deploy code refused to go on (its lines say why): pyinfra stops the run before
    anything executes, saying so in one line, and exits 1."""


@contextmanager
def exit_on_deploy_error(host_name=None):
    """Turn a DeployError into `sglang-deploy: [host: ]<message>` on stderr (each line of it)
    and exit status 1. With ``host_name`` (deploy.py: pyinfra runs it per host, each in a
    greenlet of its own) the run is stopped with DeployStopped instead: pyinfra hands it back
    from the greenlet, where SystemExit would reach gevent's hub and, with several hosts, end
    in a traceback per host."""
    try:
        yield
    except DeployError as exc:
        where = f"{host_name}: " if host_name else ""
        for line in str(exc).splitlines() or [""]:  # each line says whose it is
            print(f"sglang-deploy: {where}{line}", file=sys.stderr)
        if host_name:
            raise DeployStopped(
                "the deploy stopped before anything changed (the lines above say why)"
            ) from None
        sys.exit(EXIT_DEPLOY_ERROR)
