"""The last configuration that passed the readiness gate on this node, kept for rollback.

    python3 lastgood.py save --dir D --profile NAME --venv V --file ROLE=PATH [--file ...]
    python3 lastgood.py restore --dir D        # files back, daemon-reload, engine pins checked
    python3 lastgood.py show --dir D           # the manifest, as JSON

`save` copies each file (env file, unit, start-up hook, …) into D with a manifest of paths,
modes, sha256s, the profile's name and the engine's installed versions. `restore` puts the files
back byte for byte with their modes, runs `systemctl daemon-reload`, reinstalls the saved engine
versions when they differ (pip, from the wheel directory when one was used) and prints
`restored <profile>`. Exit statuses: 0 done, 10 nothing saved (status.NO_LAST_GOOD).
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

if __package__:
    from . import installed, status
else:  # run as a script: the siblings' directory is on sys.path
    import installed
    import status

MANIFEST = "manifest.json"


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def installed_versions(venv):
    out = subprocess.run([os.path.join(venv, "bin", "python"), "-c", installed.VERSIONS_PY],
                         stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout
    return json.loads(out)


def save(directory, profile, venv, files, packages, wheels_dir):
    staging = directory + ".new"
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging, mode=0o700)
    entries = {}
    for role, path in files.items():
        shutil.copy2(path, os.path.join(staging, role))
        entries[role] = {"path": path, "mode": os.stat(path).st_mode & 0o7777, "sha256": sha256(path)}
    versions = installed_versions(venv)
    manifest = {"profile": profile, "saved_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                "venv": venv, "files": entries, "wheels_dir": wheels_dir,
                "engine": {name: versions.get(name) for name in packages}}
    with open(os.path.join(staging, MANIFEST), "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
    # Swap in whole: a crash mid-save never leaves half a last-known-good.
    shutil.rmtree(directory, ignore_errors=True)
    os.rename(staging, directory)
    print("saved %s as last known good" % profile)


def load(directory):
    try:
        with open(os.path.join(directory, MANIFEST)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def restore(directory):
    manifest = load(directory)
    if manifest is None:
        print("nothing to roll back to: no configuration has passed the gate here yet")
        return status.NO_LAST_GOOD
    for role, entry in sorted(manifest["files"].items()):
        target = entry["path"]
        os.makedirs(os.path.dirname(target), exist_ok=True)
        temporary = target + ".lastgood"
        shutil.copy2(os.path.join(directory, role), temporary)
        os.chmod(temporary, entry["mode"])
        os.replace(temporary, target)
    subprocess.run(["systemctl", "daemon-reload"], check=True)
    restore_engine(manifest)
    print("restored %s (passed the gate at %s)" % (manifest["profile"], manifest["saved_at"]))
    return status.READY


def restore_engine(manifest):
    installed = installed_versions(manifest["venv"])
    pins = ["%s==%s" % (name, version) for name, version in sorted(manifest["engine"].items())
            if version and installed.get(name) != version]
    if not pins:
        return
    print("reinstalling %s" % " ".join(pins))
    source = ["--no-index", "--find-links", manifest["wheels_dir"]] if manifest["wheels_dir"] else []
    subprocess.run([os.path.join(manifest["venv"], "bin", "pip"), "install", "--no-input",
                    "--disable-pip-version-check"] + source + pins, check=True)


def role_path(text):
    role, sep, path = text.partition("=")
    if not sep or not role or not path.startswith("/"):
        raise argparse.ArgumentTypeError("expected ROLE=/absolute/path, got %r" % text)
    return role, path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("save", "restore", "show"))
    parser.add_argument("--dir", required=True, help="where the last known good is kept")
    parser.add_argument("--profile")
    parser.add_argument("--venv")
    parser.add_argument("--file", type=role_path, action="append", default=[])
    parser.add_argument("--package", action="append", default=[], help="engine distribution name")
    parser.add_argument("--wheels-dir")
    args = parser.parse_args(argv)
    if args.action == "save":
        if not (args.profile and args.venv and args.file):
            parser.error("save needs --profile, --venv and at least one --file")
        save(args.dir, args.profile, args.venv, dict(args.file), args.package, args.wheels_dir)
        return status.READY
    if args.action == "restore":
        return restore(args.dir)
    manifest = load(args.dir)
    print(json.dumps(manifest, indent=2, sort_keys=True))
    return status.READY if manifest else status.NO_LAST_GOOD


if __name__ == "__main__":
    sys.exit(main())
