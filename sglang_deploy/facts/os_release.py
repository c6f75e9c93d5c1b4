"""Which operating systems the deploy supports, read from the node's /etc/os-release.

The recipe installs what it needs with apt (operations/prerequisites.py), so a node must be
Debian, Ubuntu, or a derivative that says it is one (`ID_LIKE`). Anything else is stopped
before anything on it changes, with `unsupported OS: <its name>`.
"""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

SUPPORTED_IDS = ("debian", "ubuntu")


class OsRelease(FactBase):
    """
    The node's ``/etc/os-release`` as a dict (``ID``, ``ID_LIKE``, ``PRETTY_NAME``, ...);
    ``{}`` when the file does not exist.
    """

    default = dict

    def command(self):
        return "cat /etc/os-release 2>/dev/null || true"

    def process(self, output):
        return parse_os_release("\n".join(output))


def parse_os_release(text: str) -> dict:
    """os-release(5): KEY=value lines, values shell-quoted; comments and blank lines ignored."""
    found = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if not sep or key.startswith("#"):
            continue
        try:
            words = shlex.split(value)
        except ValueError:  # an unbalanced quote: keep the raw text rather than fail the deploy
            words = [value.strip("\"'")]
        found[key] = words[0] if words else ""
    return found


def unsupported_os(release: dict) -> str | None:
    """None for Debian, Ubuntu or a derivative of either; else the OS's name, as the node
    calls it (or "no /etc/os-release")."""
    ids = {release.get("ID", "")} | set(release.get("ID_LIKE", "").split())
    if ids & set(SUPPORTED_IDS):
        return None
    if not release:
        return "no /etc/os-release"
    return release.get("PRETTY_NAME") or release.get("NAME") or release.get("ID") or "unknown"


def missing_packages(wanted, installed) -> list:
    """The packages of ``wanted`` that dpkg does not list as installed, in their order."""
    return [package for package in wanted if package not in installed]
