"""pyinfra facts about an SGLang node: what the venv holds, where its interpreter loads start-up
hooks from, the unit's state, whether the server answers, and what its workers carry."""

from __future__ import annotations

import json
import shlex

from pyinfra.api import FactBase

from .node.installed import VERSIONS_PY, canonical

# Run by the node's interpreters: standard library only, one JSON line out.
_STARTUP_PY = (
    "import importlib.util, json, site, sys, sysconfig; "
    "spec = importlib.util.find_spec('sitecustomize'); "
    "print(json.dumps({'purelib': sysconfig.get_path('purelib'), "
    "'site_dirs': site.getsitepackages(), "
    "'sitecustomize': spec.origin if spec else None, "
    "'version': '%d.%d' % sys.version_info[:2]}))"
)
# Run on the node by the Serving fact and by `make verify`: health status, model ids, verdict.
# The deploy asks /ping (a flag, instant); verify asks /health (0.5.23: a 1-token generation, >= 1 s).
SERVING_PROBE_PY = """
import json, sys, urllib.request
base, name, health_path = sys.argv[1], sys.argv[2], sys.argv[3]
def get(path):
    try:
        with urllib.request.urlopen(base + path, timeout=3) as r:
            return r.status, r.read()
    except OSError as e:
        return getattr(e, 'code', None), b''
health, _ = get(health_path)
code, body = get('/v1/models')
try:
    models = [m['id'] for m in json.loads(body)['data']] if code == 200 else []
except ValueError:
    models = []
print(json.dumps({'health': health, 'models': models, 'ready': health == 200 and name in models}))
"""


def _json_output(output):
    """The JSON document a node-side command printed, or None if it printed nothing."""
    text = "\n".join(output).strip()
    return json.loads(text) if text else None


class InstalledDistributions(FactBase):
    """
    Distributions installed in a venv, as ``{canonical name: version}``; ``None`` if the venv
    has no interpreter yet.
    """

    def command(self, venv):
        python = shlex.quote(f"{venv}/bin/python")
        return f"! test -x {python} || {python} -c {shlex.quote(VERSIONS_PY)}"

    def process(self, output):
        found = _json_output(output)
        if found is None:
            return None
        return {canonical(name): version for name, version in found.items()}


class InterpreterStartup(FactBase):
    """
    Where an interpreter really loads start-up code from: ``purelib`` and ``site_dirs`` (the
    directories whose ``.pth`` files run at start-up) and the ``sitecustomize`` module it would
    import (on Debian, the distro's own, which shadows any in a venv). ``None`` if the
    interpreter does not exist yet.
    """

    def command(self, python):
        python = shlex.quote(python)
        return f"! test -x {python} || {python} -c {shlex.quote(_STARTUP_PY)}"

    def process(self, output):
        return _json_output(output)


class UnitState(FactBase):
    """
    A systemd unit's state from ``systemctl show``: ``LoadState``, ``ActiveState``,
    ``SubState``, ``UnitFileState``, ``MainPID``, ``NRestarts``, ``ExecMainStartTimestamp``.
    """

    PROPERTIES = ("LoadState", "ActiveState", "SubState", "UnitFileState", "MainPID",
                  "NRestarts", "ExecMainStartTimestamp")

    def command(self, unit):
        props = ",".join(self.PROPERTIES)
        return f"systemctl show -p {props} {shlex.quote(unit)}"

    def process(self, output):
        return dict(line.split("=", 1) for line in output if "=" in line)


class Serving(FactBase):
    """
    Whether the server on ``port`` serves ``served_name``: the status of ``health_path``
    (``/ping``: healthy flag, instant; ``/health``: a generation, >= 1 s on SGLang 0.5.23), the
    model ids of ``/v1/models`` and ``ready`` (health 200 and the name listed).
    """

    def command(self, port, served_name, health_path="/health"):
        args = f"http://127.0.0.1:{int(port)} {shlex.quote(served_name)} {shlex.quote(health_path)}"
        return f"python3 -c {shlex.quote(SERVING_PROBE_PY)} {args}"

    def process(self, output):
        return _json_output(output)


class WorkerEnvironment(FactBase):
    """
    The environment check of every scheduler process of a unit (``workers.py --json`` run on
    the node): ``None`` when the on-node scripts are not installed yet.
    """

    def command(self, scripts_dir, unit, expect):
        script = shlex.quote(f"{scripts_dir}/workers.py")
        return (f"! test -f {script} || python3 {script} --json --unit {shlex.quote(unit)} "
                f"--expect-json {shlex.quote(json.dumps(expect, sort_keys=True))} || true")

    def process(self, output):
        return _json_output(output)


class Preflight(FactBase):
    """
    The outcome of our preflight script run on the node: ``{"status": exit status, "lines":
    [its output lines]}``. The command is built by ``NodeScripts.preflight``.
    """

    def command(self, command):
        return f"{command}; echo \"exit=$?\""

    def process(self, output):
        *lines, last = output
        return {"status": int(last.split("=", 1)[1]), "lines": lines}


class EngineDrift(FactBase):
    """
    ``drift.py --json`` run by the venv's interpreter: per distribution its version and the
    installed files that differ from its wheel's RECORD. ``None`` before the venv or our
    scripts exist.
    """

    def command(self, venv, scripts_dir, distributions):
        python = shlex.quote(f"{venv}/bin/python")
        script = shlex.quote(f"{scripts_dir}/drift.py")
        names = " ".join(shlex.quote(name) for name in distributions)
        return (f"! test -x {python} || ! test -f {script} || "
                f"{python} {script} --json {names} || true")

    def process(self, output):
        return _json_output(output)


class EngineManifest(FactBase):
    """
    ``drift.py --manifest``: name, version and sha256 of RECORD per distribution.
    """

    def command(self, venv, scripts_dir, distributions):
        names = " ".join(shlex.quote(name) for name in distributions)
        return f"{shlex.quote(venv)}/bin/python {shlex.quote(scripts_dir)}/drift.py --manifest {names} || true"

    def process(self, output):
        return _json_output(output)


class LastGood(FactBase):
    """
    ``lastgood.py compare`` run on the node: ``{"last_good": profile or None, "differs": [what
    differs between the last known good and what is installed], "not_running": why the unit's
    server does not run what is installed, or None}``. ``None`` before our scripts exist. The
    command is built by ``NodeScripts.compare_last_good``.
    """

    def command(self, scripts_dir, command):
        script = shlex.quote(f"{scripts_dir}/lastgood.py")
        return f"! test -f {script} || {command} || true"

    def process(self, output):
        return _json_output(output)


class FileDigests(FactBase):
    """
    ``{path: {"mode": "644", "user": "root", "sha256": hex}}`` of the given remote files, in
    one command (pyinfra's File + Sha1File cost two per file); missing files are absent.
    """

    default = dict  # no file found: pyinfra does not call process() on empty output

    def command(self, paths):
        quoted = " ".join(shlex.quote(path) for path in paths)
        return (f"for f in {quoted}; do test -f \"$f\" && echo \"$(stat -c '%a %U' \"$f\") "
                f"$(sha256sum < \"$f\" | cut -d' ' -f1) $f\"; done; true")

    def process(self, output):
        found = {}
        for line in output:
            mode, user, digest, path = line.split(" ", 3)
            found[path] = {"mode": mode, "user": user, "sha256": digest}
        return found
