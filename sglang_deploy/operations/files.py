"""Files the server runs from: the env file (secret-safe), the start-up hook, the unit.

Each is written whole or not at all (``written_whole``): into a temporary file beside it (same
directory, so same filesystem), created empty and private before any content lands, its owner
and mode set, flushed, then renamed over the file. A full disk or a dropped link mid-upload
leaves the file the server starts from as it was (pyinfra, as root, uploads in place). The env
file's content goes on a command's stdin (remote.secret_write): pyinfra's upload as a sudo
user would first leave it in a /tmp file every local user can read.
"""

from __future__ import annotations

import difflib
import hashlib
import shlex
from io import StringIO
from typing import TYPE_CHECKING

from pyinfra import host, logger
from pyinfra.api import operation
from pyinfra.api.command import FileUploadCommand
from pyinfra.facts.files import FileContents

from sglang_deploy.facts.serving import FileDigests, InterpreterStartup
from sglang_deploy.operations.remote import NEW_SUFFIX, secret_write
from sglang_deploy.plan.render import HOOK_MODULE
from sglang_deploy.plan.settings import default

if TYPE_CHECKING:
    from collections.abc import Sequence

HOOK_FILE = f"{HOOK_MODULE}.py"  # the module's one name is render.HOOK_MODULE
HOOK_PTH = f"{HOOK_MODULE}.pth"
# NEW_SUFFIX: ".<name>.sglang-deploy-new" beside the file: hidden, and no name a reader picks up
# (not a .pth or .py for the interpreter, not a unit name for systemd).


def written_whole(dest, source, mode, owner="root:root"):
    """The commands that replace ``dest`` by ``source`` (a local path or a file object) in one
    rename: a temporary file beside it, created empty with mode 0600 before the upload writes
    into it (so a secret never lands in a readable file), chowned to ``owner``, set to
    ``mode``, flushed to disk and renamed over ``dest``."""
    directory, name = dest.rsplit("/", 1)
    temp = shlex.quote(f"{directory}/.{name}{NEW_SUFFIX}")
    yield f"rm -f {temp} && (umask 077 && : > {temp})"
    yield FileUploadCommand(
        source,
        f"{directory}/.{name}{NEW_SUFFIX}",
        remote_temp_filename=host.get_temp_filename(dest),
    )
    yield f"chown {owner} {temp} && chmod {mode} {temp} && sync {temp} && mv -f {temp} {shlex.quote(dest)}"


@operation()
def secret_file(dest: str, content: str, secret_values: Sequence[str] = (), mode: str = "0600"):
    """
    Write a file that may hold secrets, whole or not at all, never showing them.

    ``dest`` is root-owned, ``mode``; the content travels on a command's stdin into a file beside
    ``dest``, 0600 from its creation, removed on any failure (no copy in /tmp, none left behind),
    and ``--diff`` shows secret values as ``***``.

    + dest: remote path; its directory must exist and be private
    + content: the file's text
    + secret_values: strings to hide in diffs
    + mode: file mode

    **Examples:**

    .. code:: python

        sglang.secret_file(
            name="Env file",
            dest=plan.env_path,
            content=plan.env_text,
            secret_values=plan.secret_values,
        )
    """
    own = f"chown root:root {shlex.quote(dest)} && chmod {mode} {shlex.quote(dest)}"
    remote = _remote(dest)
    if same_content(remote, content):
        if remote["mode"] != mode.lstrip("0") or remote["user"] != "root":
            yield own
        else:
            host.noop(f"{dest} is up to date")
        return
    log_redacted_diff(dest, content, secret_values)
    yield secret_write(dest, content, mode)


@operation()
def binary_file(src: str, dest: str, mode: str = "0644"):
    """
    Upload a local binary file (a wheel) when its checksum differs.

    The checksums compared are SHA-1s. ``--diff`` names the file and both checksums: a binary file
    has no text diff (pyinfra's files.put would try one and fail on it).

    + src: local path
    + dest: remote path; its directory is created
    + mode: file mode

    **Examples:**

    .. code:: python

        sglang.binary_file(
            name=f"Wheel {wheel.name}",
            src=str(wheel),
            dest=f"{plan.wheels_dir}/{wheel.name}",
        )
    """
    with open(src, "rb") as local:
        wanted = hashlib.sha256(local.read()).hexdigest()
    present = (_remote(dest) or {}).get("sha256")
    if present == wanted:
        host.noop(f"{dest} is up to date")
        return
    if _diff_wanted():
        verb = f"replace {dest} (sha256 {present})" if present else f"create {dest}"
        host.log(f"Will {verb} with {src} (binary, sha256 {wanted})", logger.info)
    yield f"mkdir -p {shlex.quote(dest.rsplit('/', 1)[0] or '/')}"
    yield from written_whole(dest, src, mode)


def _remote(dest):
    """Mode, owner and sha256 of a remote file (one command), or None if it does not exist."""
    return host.get_fact(FileDigests, paths=[dest]).get(dest)


def same_content(remote, content):
    return remote is not None and remote["sha256"] == hashlib.sha256(content.encode()).hexdigest()


def _diff_wanted():
    from pyinfra.context import state

    return state.config.DIFF


def log_redacted_diff(dest, content, secret_values):
    if not _diff_wanted():
        return
    current = host.get_fact(FileContents, path=dest)
    redact = _redactor(secret_values)
    before = [redact(line) + "\n" for line in (current or [])]
    after = [redact(line) + "\n" for line in content.splitlines()]
    note = " (secrets shown as ***)" if secret_values else ""
    host.log(f"Will write {dest}{note}", logger.info)
    for line in difflib.unified_diff(before, after, "remote", "desired", n=1):
        logger.info("  %s", line.rstrip("\n"))


def _redactor(secret_values):
    secrets = [value for value in secret_values if value]

    def redact(line):
        for value in secrets:
            line = line.replace(value, "***")
        return line

    return redact


@operation()
def startup_hook(python: str, module_text: str, pth_text: str):
    """
    Install the environment hook where an interpreter runs start-up code.

    The hook is a module plus a ``.pth`` that imports it, in a directory the interpreter processes
    ``.pth`` files from. A ``.pth`` cannot be shadowed the way a venv's ``sitecustomize.py`` is on
    Debian.

    + python: the interpreter whose start-up gets the hook (the venv's, or the system's)
    + module_text: the hook module's source
    + pth_text: the ``.pth`` line that imports it

    **Examples:**

    .. code:: python

        sglang.startup_hook(
            name="Start-up hook",
            python=plan.hook_python,
            module_text=plan.hook_module,
            pth_text=plan.hook_pth,
        )
    """
    paths = hook_paths(python)
    if paths is None:
        host.noop(f"{python} does not exist yet (a dry run before the engine step)")
        return
    wanted = {paths["hook"]: module_text, paths["hook_pth"]: pth_text}
    remote = host.get_fact(FileDigests, paths=list(wanted))
    for dest, text in wanted.items():
        found = remote.get(dest)
        if not same_content(found, text):
            log_redacted_diff(dest, text, ())
            yield from written_whole(dest, StringIO(text), "0644")
        elif found["mode"] != "644":
            yield f"chmod 0644 {shlex.quote(dest)}"
    if all(
        same_content(remote.get(dest), text) and remote[dest]["mode"] == "644"
        for dest, text in wanted.items()
    ):
        host.noop(f"start-up hook {paths['hook_pth']} is up to date")


def hook_paths(python):
    """Where ``python``'s start-up hook lives: ``{"hook": module, "hook_pth": .pth}``, asked of
    the interpreter (a fact); None while it does not exist."""
    startup = host.get_fact(InterpreterStartup, python=python)
    if startup is None:
        return None
    directory = pth_directory(startup)
    return {"hook": f"{directory}/{HOOK_FILE}", "hook_pth": f"{directory}/{HOOK_PTH}"}


def pth_directory(startup):
    """The site directory for our ``.pth``: the purelib one if the interpreter processes it."""
    if startup["purelib"] in startup["site_dirs"]:
        return startup["purelib"]
    return startup["site_dirs"][0]


@operation()
def unit_file(unit: str, content: str, staging_dir: str, unit_dir: str = default("unit_dir")):
    """
    Install a systemd unit file once systemd-analyze verify accepted it.

    Then daemon-reload; a rejected unit never replaces the one a running server came from.

    + unit: unit name, e.g. ``sglang.service``
    + content: the unit file's text
    + staging_dir: where the candidate is verified (its file name must be the unit's)
    + unit_dir: where units are installed

    **Examples:**

    .. code:: python

        sglang.unit_file(
            name="systemd unit",
            unit=plan.unit,
            content=plan.unit_text,
            staging_dir=plan.settings.run_dir,
        )
    """
    dest = f"{unit_dir}/{unit}"
    if same_content(_remote(dest), content):
        host.noop(f"{dest} is up to date")
        return
    log_redacted_diff(dest, content, ())
    staged = f"{staging_dir}/{unit}"
    yield f"mkdir -p {shlex.quote(staging_dir)}"
    yield FileUploadCommand(StringIO(content), staged, remote_temp_filename=host.get_temp_filename(staged))
    yield f"systemd-analyze verify {shlex.quote(staged)}"
    # install(1) removes its target, then writes a new one there: for a moment no unit or half
    # of one. A copy beside it, renamed over it, is never seen half-written.
    temp = shlex.quote(f"{unit_dir}/.{unit}{NEW_SUFFIX}")
    yield (
        f"install -m 0644 -o root -g root {shlex.quote(staged)} {temp} && sync {temp} && "
        f"mv -f {temp} {shlex.quote(dest)}"
    )
    yield "systemctl daemon-reload"
