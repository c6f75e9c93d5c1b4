"""A profile error in a run of several hosts: pyinfra runs deploy.py per host, each in a gevent
greenlet; each host says its error in its own line(s) and the run stops, with no traceback."""

import subprocess
import sys
import textwrap

from conftest import REPO_ROOT

# pyinfra's own loading of deploy.py (pyinfra_cli.util._parallel_load_hosts, gevent patched as
# the CLI patches it) for three hosts whose deploy code fails like a bad profile; the main
# greenlet ends as pyinfra's CLI does (one line for a pyinfra error), at interpreter exit.
RUN = textwrap.dedent(
    """
    import sys
    from types import SimpleNamespace

    import gevent
    from gevent.pool import Pool
    from pyinfra.api.exceptions import PyinfraError
    from pyinfra_cli.util import _parallel_load_hosts

    from sglang_deploy.cli import exit_on_deploy_error
    from sglang_deploy.errors import ProfileError

    hosts = [SimpleNamespace(name=n, print_prefix=f"[{n}] ") for n in ("node1", "node2", "node3")]
    state = SimpleNamespace(
        pool=Pool(10),
        config=SimpleNamespace(copy=lambda: None),
        inventory=SimpleNamespace(get_active_hosts=lambda: hosts),
    )

    def deploy():
        from pyinfra import host

        gevent.sleep(0)  # another host's deploy code runs meanwhile (as facts and I/O let it)
        with exit_on_deploy_error(host.name):
            raise ProfileError("unknown key", file="profiles/bad.yml", line=3, key="service.portt")

    try:
        _parallel_load_hosts(state, deploy, "deploy.py")
    except PyinfraError as exc:
        print(f"--> pyinfra error: {exc}", file=sys.stderr)
        sys.exit(1)
    """
)


def test_each_host_says_its_profile_error_in_one_line_and_no_traceback():
    run = subprocess.run(
        [sys.executable, "-c", RUN], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 1
    assert "Traceback" not in run.stderr and "SystemExit" not in run.stderr, run.stderr
    for name in ("node1", "node2", "node3"):
        line = f"sglang-deploy: {name}: profiles/bad.yml:3: service.portt: unknown key"
        assert run.stderr.count(line) == 1, run.stderr
