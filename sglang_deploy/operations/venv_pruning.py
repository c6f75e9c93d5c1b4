"""Old engine venvs removed: the newest few kept; every venv a service on the node runs or goes
back to, always (each service has a venvs directory of its own by default, but the venvs_dir
setting may give several services one)."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import operation

from sglang_deploy.facts.engine_venvs import EngineVenvs, Wheelhouses
from sglang_deploy.plan.venv_names import venvs_to_remove, wheelhouses_to_remove


@operation()
def old_venvs_pruned(
    venvs_dir: str,
    link: str,
    keep: int,
    wanted: str,
    scripts_dir: str,
    last_good_dir: str,
    deploy_dir: str | None = None,
    lock: str | None = None,
):
    """
    Remove the engine venvs beyond the newest ``keep`` that nothing uses.

    A venv nothing uses is neither the one the unit's link points at, nor the last known good's (a
    rollback switches back to it, with no download), nor ``wanted``, nor in use by any other service
    of the node (its link, staged switch or last known good, or a running process: venvs.py list's
    ``in_use``).

    + venvs_dir: where the venvs are
    + link: the path the unit runs through (the profile's ``engine.venv``)
    + keep: how many of the newest finished venvs stay
    + wanted: the venv this deploy built or keeps
    + scripts_dir: where our on-node scripts are (venvs.py lists the venvs)
    + last_good_dir: the last known good (its manifest names its venv)
    + deploy_dir: where the locks and their wheelhouses are: those no venv left was built
      from, nor ``lock`` (the one this deploy installs), nor arrived within a day, go too
    + lock: the lock file this deploy installs from (its name), or None

    **Examples:**

    .. code:: python

        sglang.old_venvs_pruned(
            name="Old engine venvs",
            venvs_dir=plan.venvs_dir,
            link=plan.profile.engine.venv,
            keep=plan.settings.venvs_keep,
            wanted=plan.venv,
            scripts_dir=plan.scripts.directory,
            last_good_dir=plan.scripts.last_good_dir,
        )
    """
    found = host.get_fact(
        EngineVenvs, scripts_dir=scripts_dir, venvs_dir=venvs_dir, link=link, last_good_dir=last_good_dir
    )
    if found is None:
        host.noop("no engine venvs yet")
        return
    protected = [found["live"], found["last_good"], found["pending"], wanted.rsplit("/", 1)[1]]
    protected += list(found.get("in_use") or {})
    gone = venvs_to_remove(found["venvs"], keep, protected)
    houses = (
        (host.get_fact(Wheelhouses, scripts_dir=scripts_dir, deploy_dir=deploy_dir) or {})
        if deploy_dir
        else {}
    )
    keep_lock = lock.rsplit("/", 1)[-1].removesuffix(".txt") if lock else None
    stale = wheelhouses_to_remove(
        houses.get("wheelhouses", []), [f"{venvs_dir}/{n}" for n in gone], keep_lock
    )
    if not gone and not stale:
        host.noop(
            f"{len(found['venvs'])} engine venvs, at most {keep} kept besides the live and those in use"
        )
        return
    if gone:
        host.log(f"removing engine venvs {', '.join(gone)} (keeping {keep})")
        yield "rm -rf -- " + " ".join(shlex.quote(f"{venvs_dir}/{name}") for name in gone)
    if stale:  # what a deploy that goes back to one of them uploads again
        host.log(f"removing the wheelhouses of {', '.join(stale)}: no venv left was built from them")
        paths = [f"{deploy_dir}/{where}" for name in stale for where in _lock_paths(name)]
        yield "rm -rf -- " + " ".join(shlex.quote(path) for path in paths)


def _lock_paths(name):
    return (f"wheelhouse/{name}", f"locks/{name}.txt", f"locks/{name}.venvs")
