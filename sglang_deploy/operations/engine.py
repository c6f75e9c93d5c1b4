"""The engine: a venv holding exactly the profile's pinned packages, repaired on request."""

import shlex

from pyinfra import host
from pyinfra.api import operation

from ..facts import EngineDrift, InstalledDistributions, InterpreterStartup
from ..node.installed import canonical
from .files import pth_directory


@operation()
def engine(venv, python, packages, wheels_dir=None, repair=None):
    """
    Create ``venv`` and install exactly the pinned ``packages`` where they differ.

    + venv: path of the virtual environment
    + python: interpreter that creates it
    + packages: exact pins, ``name==version``
    + wheels_dir: remote directory of uploaded wheels; when given pip installs from it alone
    + repair: ``(scripts_dir, distributions)``: force-reinstall those of the distributions
      whose installed files drifted from their RECORD
    """
    installed = host.get_fact(InstalledDistributions, venv=venv)
    if installed is None:
        yield f"{shlex.quote(python)} -m venv {shlex.quote(venv)}"
        installed = {}
    pip = (f"{shlex.quote(venv)}/bin/pip install --no-input --disable-pip-version-check "
           + (f"--no-index --find-links {shlex.quote(wheels_dir)} " if wheels_dir else ""))
    differing = [pin for pin in packages if _pin_differs(pin, installed)]
    if differing:
        yield pip + " ".join(shlex.quote(pin) for pin in differing)
    drifted, strays = _drift(venv, *repair) if repair and not differing else ([], [])
    if drifted:
        yield pip + "--force-reinstall --no-deps " + " ".join(shlex.quote(pin) for pin in drifted)
    if strays:
        # Files no RECORD lists survive a reinstall: remove them.
        site = pth_directory(host.get_fact(InterpreterStartup, python=f"{venv}/bin/python"))
        yield f"cd {shlex.quote(site)} && rm -f -- " + " ".join(shlex.quote(p) for p in strays)
    if not differing and not drifted and not strays:
        host.noop(f"{venv} holds {', '.join(packages)}")


def _drift(venv, scripts_dir, distributions):
    """(``name==installed version`` of each distribution whose RECORD'd files drifted, the
    unexpected files found among them, relative to site-packages)."""
    report = host.get_fact(EngineDrift, venv=venv, scripts_dir=scripts_dir,
                           distributions=distributions) or {"distributions": {}}
    found = report["distributions"].items()
    pins = [f"{name}=={r['version']}" for name, r in found if r["modified"] or r["missing"]]
    return pins, [path for _, r in found for path in r["unexpected"]]


def _pin_differs(pin, installed):
    name, _, version = pin.partition("==")
    return installed.get(canonical(name)) != version


def engine_matches(venv, packages):
    """Whether the venv already holds exactly the pinned packages (a fact read)."""
    installed = host.get_fact(InstalledDistributions, venv=venv)
    return installed is not None and not any(_pin_differs(pin, installed) for pin in packages)
