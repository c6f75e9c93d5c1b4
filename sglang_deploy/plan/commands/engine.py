"""Command lines of the scripts that judge the engine's venvs: which ones the node holds, whether
one holds exactly its lock, what drifted from the pins (built by builder.script)."""

from sglang_deploy.plan.commands.builder import optional, script


def venvs_list_command(directory, venvs_dir, link, last_good_dir=None):
    """venvs.py list: the engine venvs, the live one, the pending one, the last known good's."""
    return script(
        "python3",
        directory,
        "venvs.py",
        "list",
        "--dir",
        venvs_dir,
        "--link",
        link,
        *optional(last_good_dir, "--last-good-dir", last_good_dir),
    )


def venvs_mark_command(directory, venv, lock=None):
    """venvs.py mark: a finished build (written last, so a half-built venv is never used),
    registered with the lock it was built from."""
    return script("python3", directory, "venvs.py", "mark", "--venv", venv, *optional(lock, "--lock", lock))


def venvs_wheelhouses_command(directory, deploy_dir):
    """venvs.py wheelhouses: each lock's wheelhouse on the node and the venvs built from it."""
    return script("python3", directory, "venvs.py", "wheelhouses", "--deploy-dir", deploy_dir)


def exact_command(python, directory, lock):
    """exact.py run by the venv's interpreter: does the venv hold exactly ``lock``?"""
    return script(python, directory, "exact.py", "--lock", lock)


def drift_command(venv, directory, distributions, pins=(), textfile=()):
    """drift.py run by the venv's interpreter: the report in its result line; ``textfile``:
    textfile_args(), for the node's drift sample."""
    pin_args = ["--pins", *pins] if pins else []
    return script(f"{venv}/bin/python", directory, "drift.py", "--json", *textfile, *distributions, *pin_args)


def manifest_command(venv, directory, distributions):
    """drift.py --manifest: name, version and sha256 of RECORD per distribution."""
    return script(f"{venv}/bin/python", directory, "drift.py", "--manifest", *distributions)
