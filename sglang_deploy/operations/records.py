"""Records kept on the controller."""

from pyinfra import host
from pyinfra.api import operation

from sglang_deploy.facts.serving import EngineManifest
from sglang_deploy.report import manifest


@operation()
def manifest_recorded(scripts, profile):
    """
    Record on the controller what the node's engine holds (distribution, version, RECORD
    digest), so two nodes or two dates can be diffed. Writes only local files: never a change.

    + scripts: ``NodeScripts`` for this node
    + profile: the host's profile (its pins and the drift-checked distributions are recorded:
      scripts.manifest_names, every locked distribution for a locked engine)
    """
    from pyinfra.context import state

    if state.is_executing:  # not while planning a --dry run
        _record_manifest(scripts, profile)
    yield from ()  # writes on the controller only: no command for the node


def _record_manifest(scripts, profile):
    names = scripts.manifest_names
    found = host.get_fact(
        EngineManifest, venv=scripts.venv, scripts_dir=scripts.directory, distributions=names
    )
    if not found:
        host.noop("no engine manifest: the venv or our scripts are missing")
        return
    path = manifest.record(host.name, profile.name, found)
    host.noop(f"engine manifest recorded in {path.relative_to(manifest.REPO_ROOT)}")
