"""pyinfra facts about an SGLang node: what the venv holds, where its interpreter loads start-up
hooks from, the unit's state, whether the server answers, and what its workers carry."""

from __future__ import annotations

import json
import shlex

from pyinfra.api import FactBase

from sglang_deploy.node.lib import engine_auth, result, systemd
from sglang_deploy.node.lib.http_probe import server_url
from sglang_deploy.node.lib.installed import VERSIONS_PY, canonical
from sglang_deploy.plan.commands import (
    drift_command,
    manifest_command,
    model_stage_command,
    workers_command,
)
from sglang_deploy.plan.commands.builder import inline

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
# After node/lib/engine_auth.py's program (inline_source): the server's API key, read on the node.
SERVING_PROBE_PY = """
import argparse, json, sys
base, name, health_path = sys.argv[1], sys.argv[2], sys.argv[3]
flags = argparse.ArgumentParser()
add_arguments(flags)
server = opener(key_of(flags.parse_args(sys.argv[4:])))
def get(path):
    try:
        with server.open(base + path, timeout=3) as r:
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
    ``SubState``, ``UnitFileState``, ``MainPID``, ``NRestarts``, ``ExecMainStartTimestamp``, or
    the ``properties`` asked for. The controller's one reading of ``systemctl show`` (the node's
    is node/lib/systemd.py, whose parser this uses); read afresh, outside pyinfra's fact cache,
    through ``command``/``process`` (group_restart.unit_show, the verify checks).
    """

    PROPERTIES = (
        "LoadState",
        "ActiveState",
        "SubState",
        "UnitFileState",
        "MainPID",
        "NRestarts",
        "ExecMainStartTimestamp",
    )

    def command(self, unit, properties=PROPERTIES):
        return unit_show_command(unit, properties)

    def process(self, output):
        return systemd.parse_show("\n".join(output))


def unit_show_command(unit, properties=UnitState.PROPERTIES):
    """``systemctl show`` of ``properties`` (UnitState.process, systemd.parse_show read it)."""
    return f"systemctl show -p {','.join(properties)} -- {shlex.quote(unit)}"


class Serving(FactBase):
    """
    Whether the server on ``port`` serves ``served_name``: the status of ``health_path``
    (``/ping``: healthy flag, instant; ``/health``: a generation, >= 1 s on SGLang 0.5.23), the
    model ids of ``/v1/models`` and ``ready`` (health 200 and the name listed). Asked at
    ``host``: the node's own server at service.probe_host, a group's rank 0 at its address;
    ``auth``: NodeScripts.api_key_args(), with which the node reads the key it sends.
    """

    def command(self, port, served_name, health_path="/health", host="127.0.0.1", auth=()):
        args = [server_url(host, int(port)), served_name, health_path, *auth]
        program = engine_auth.inline_source() + SERVING_PROBE_PY
        return inline(program, *args)

    def process(self, output):
        return _json_output(output)


class ScriptResult(FactBase):
    """
    The result line (node/lib/result.py) of one of our on-node scripts: ``None`` when the script
    printed none (not on the node yet, or it died). Subclasses name which script.
    """

    script = None  # the file that must exist on the node, else the fact is None

    def _guarded(self, scripts_dir, command):
        return f"! test -f {shlex.quote(f'{scripts_dir}/{self.script}')} || {command} || true"

    def process(self, output):
        return result.parse(output)


class WorkerEnvironment(ScriptResult):
    """
    The environment check of every scheduler process of a unit (workers.py's result line):
    ``{"status", "workers", "message", ...}``.
    """

    script = "workers.py"

    def command(self, scripts_dir, unit, expect):
        return self._guarded(scripts_dir, workers_command(scripts_dir, unit, expect))


class Preflight(ScriptResult):
    """
    Preflight's result line: ``{"status", "cause": the failures, "checks": [{"verdict",
    "text"}], "warnings": [...]}``. The command is built by ``NodeScripts.preflight``.
    """

    def command(self, command):
        return f"{command} || true"


class EngineDrift(ScriptResult):
    """
    drift.py's result line, run by the venv's interpreter: per distribution its version and
    the installed files that differ from its wheel's RECORD. ``None`` before the venv or our
    scripts exist.
    """

    script = "drift.py"

    def command(self, venv, scripts_dir, distributions):
        python = shlex.quote(f"{venv}/bin/python")
        return f"! test -x {python} || " + self._guarded(
            scripts_dir, drift_command(venv, scripts_dir, distributions)
        )


class EngineManifest(ScriptResult):
    """
    ``drift.py --manifest``'s result line: name, version and sha256 of RECORD per distribution.
    """

    def command(self, venv, scripts_dir, distributions):
        return f"{manifest_command(venv, scripts_dir, distributions)} || true"


class LastGood(ScriptResult):
    """
    ``lastgood.py compare``'s result line: ``{"last_good": profile or None, "differs": [what
    differs between the last known good and what is installed], "not_running": why the unit's
    server does not run what is installed, or None}``. ``None`` before our scripts exist. The
    command is built by ``NodeScripts.compare_last_good``.
    """

    script = "lastgood.py"

    def command(self, scripts_dir, command):
        return self._guarded(scripts_dir, command)


class FileDigests(FactBase):
    """
    ``{path: {"mode": "644", "user": "root", "sha256": hex}}`` of the given remote files, in
    one command (pyinfra's File + Sha1File cost two per file); missing files are absent.
    """

    default = dict  # no file found: pyinfra does not call process() on empty output

    def command(self, paths):
        quoted = " ".join(shlex.quote(path) for path in paths)
        return (
            f'for f in {quoted}; do test -f "$f" && echo "$(stat -c \'%a %U\' "$f") '
            f'$(sha256sum < "$f" | cut -d\' \' -f1) $f"; done; true'
        )

    def process(self, output):
        found = {}
        for line in output:
            mode, user, digest, path = line.split(" ", 3)
            found[path] = {"mode": mode, "user": user, "sha256": digest}
        return found


class ModelState(ScriptResult):
    """
    What the node holds for one model directory (node/model_stage.py state): the live
    manifest's digest and files, their problems (sizes; hashes with ``deep``), the staging
    directory's files, free disk, whether rsync is there. ``None`` before our scripts exist.
    """

    script = "model_stage.py"

    def command(self, scripts_dir, directory, deep=False):
        return self._guarded(scripts_dir, model_stage_command(scripts_dir, "state", directory, deep=deep))
