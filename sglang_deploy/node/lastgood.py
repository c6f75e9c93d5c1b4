"""The last configuration that passed the readiness gate on this node, kept for rollback.

    python3 lastgood.py save --dir D --profile NAME --venv V --file ROLE=PATH [--file ...]
        [--package DIST ...] [--model MODEL_DIR ...] [--unit U]
    python3 lastgood.py compare (as save)      # does D hold what is installed; does it run?
    python3 lastgood.py restore --dir D        # files back, daemon-reload, engine pins checked
    python3 lastgood.py show [--dir D]         # the manifest, as JSON (every one saved here
                                               # when no --dir: save remembers where it saved)
    python3 lastgood.py keep --dir D --to K    # a copy of D's record at K (before a canary)
    python3 lastgood.py reinstate --dir D --kept K   # K's record back as D's, then restore D

`save` copies each file (env file, unit, start-up hook, …) into D with a manifest of paths,
modes, sha256s, the profile's name, the engine's installed versions and, per --model
directory, its model manifest's digest (the weights it served); once recorded, the weights a
model swap replaced (`<dir>.sglang-deploy-previous`, model_stage.py) are removed. With --unit it first
makes sure the unit's running server was started from exactly these files and this engine (its
main process started after each of them was last written, and systemd has loaded the installed
unit file): files installed after the server started never passed its gate. A save of what D
already holds changes nothing; a save writes its record beside the old one and swaps it in
(node/lib/last_good_record.py): killed at any step, a complete last known good remains.
`restore` first checks the record (every copy hashes to its manifest) and the venv it ran
(still on the node), and refuses with nothing changed when either is not so; then it puts the
files back byte for byte with their modes (each one whole, by rename), runs
`systemctl daemon-reload`, points the engine venv link back at the venv the saved
configuration ran (`venv_target`, kept on the node: nothing is installed or downloaded; a
manifest from before venvs reinstalls the saved engine versions when they differ, with pip),
renames the recorded weights back where the live model directory holds others and
`<dir>.sglang-deploy-previous` holds them (model_stage.restore_weights; no copy), and
prints `restored <profile>`. Exit statuses: 0 done,
10 nothing saved (status.NO_LAST_GOOD), 11 restore refused: the record is damaged or its venv
gone (status.PREFLIGHT_FAILED), 14 the server does not run the installed configuration
(status.NOT_INSTALLED_CONFIG). Every action ends with the result line (result.py): `restore`'s
names the profile restored, `compare`'s carries {last_good, differs, not_running}, `show`'s the
manifest it printed.

`keep` and `reinstate` serve a canary (operations/canary.py): a canary that passes its gate is
saved as the last known good, so rolling it back after a failed bake needs the record it had
before: `keep` copies D's record whole to K before the canary restarts; `reinstate` makes K's
record D's again (a configuration that failed its bake is no known good) and restores it.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

if __package__:
    from . import model_manifest, model_stage, venvs
    from .lib import last_good_record as record
    from .lib import result, status
    from .lib.guard import guarded
    from .lib.last_good_check import installed_engine, installed_versions, running_check
else:  # run as a script: our scripts' directory is on sys.path
    import model_manifest
    import model_stage
    import venvs
    from lib import last_good_record as record
    from lib import result, status
    from lib.guard import guarded
    from lib.last_good_check import installed_engine, installed_versions, running_check

MANIFEST = record.MANIFEST
sha256 = record.sha256
load = record.load


def model_digests(directories):
    """{model directory: its manifest's digest (None: no manifest)}: the weights served."""
    found = {}
    for directory in directories:
        manifest = model_manifest.read(directory) if os.path.isdir(directory) else None
        found[directory] = model_manifest.digest(manifest) if manifest else None
    return found


def differences(manifest, profile, files, engine, venv_target=None, models=None):
    """What differs between a saved manifest and what is installed now, as short phrases
    (empty: the manifest is exactly this configuration). ``venv_target``: the engine venv the
    unit's link points at now; ``models``: model_digests() of the model directories."""
    if manifest is None:
        return ["nothing saved yet"]
    found = [] if manifest["profile"] == profile else ["profile %s -> %s" % (manifest["profile"], profile)]
    if venv_target and manifest.get("venv_target") not in (None, venv_target):
        found.append(
            "engine venv %s -> %s"
            % (os.path.basename(manifest["venv_target"]), os.path.basename(venv_target))
        )
    saved = manifest["files"]
    for role, path in sorted(files.items()):
        entry = saved.get(role)
        if entry is None or entry["path"] != path or entry["sha256"] != sha256(path):
            found.append(role)
    found += ["%s (no longer a file of the configuration)" % role for role in sorted(set(saved) - set(files))]
    found += [
        "%s %s -> %s" % (name, manifest["engine"].get(name), version)
        for name, version in sorted(engine.items())
        if manifest["engine"].get(name) != version
    ]
    saved_models = manifest.get("models", {})
    found += [
        "model %s %s -> %s" % (d, (saved_models.get(d) or "unrecorded")[:12], (digest or "no manifest")[:12])
        for d, digest in sorted((models or {}).items())
        if saved_models.get(d) != digest
    ]
    return found


def save(directory, profile, venv, files, packages, wheels_dir, unit=None, model_dirs=()):
    models = model_digests(model_dirs)
    if unit:
        engine_installed = installed_engine(venv)
        engine = {name: engine_installed.get(name, (None, None))[0] for name in packages}
        why = running_check(unit, files, {n: v for n, v in engine_installed.items() if n in packages}, venv)
        if why:
            print("not saved as last known good: %s" % why)
            return result.emit(status.NOT_INSTALLED_CONFIG, why)
        if not differences(load(directory), profile, files, engine, os.path.realpath(venv), models):
            print("%s is already the last known good" % profile)
            forget_previous(models)
            return result.emit(status.READY, profile=profile, saved=False)

    def fill(staging):
        entries = {}
        for role, path in files.items():
            copy = os.path.join(staging, role)
            shutil.copy2(path, copy)
            # Hashed as copied: the record's copy is what a restore writes back.
            entries[role] = {"path": path, "mode": os.stat(copy).st_mode & 0o7777, "sha256": sha256(copy)}
        versions = installed_versions(venv)
        return {
            "profile": profile,
            "saved_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "venv": venv,
            "venv_target": os.path.realpath(venv),
            "files": entries,
            "wheels_dir": wheels_dir,
            "engine": {name: versions.get(name) for name in packages},
            "models": models,
        }

    # A new record beside the old, swapped in whole: killed at any step, one complete last
    # known good remains (last_good_record.py).
    record.replace(directory, fill)
    record.remember(directory)
    print("saved %s as last known good" % profile)
    forget_previous(models)
    return result.emit(status.READY, profile=profile, saved=True)


def forget_previous(models):
    """Recorded: the weights a swap replaced are no longer a rollback's."""
    for model_dir, digest in sorted(models.items()):
        if model_stage.forget_previous(model_dir, digest):
            print("model: %s's previous weights removed (the new ones are recorded)" % model_dir)


def show(directory=None, known=None):
    """The manifest of one last known good, or ({dir: manifest}) of every one saved here."""
    if directory:
        manifest = load(directory)
    else:
        manifest = {d: load(d) for d in record.saved_dirs(known) if load(d)}
    if not manifest:
        why = "no last known good %s" % (
            "in " + directory if directory else "saved on this node yet (a deploy saves one)"
        )
        print(why)
        return result.emit(status.NO_LAST_GOOD, why)
    print(json.dumps(manifest, indent=2, sort_keys=True))
    return result.emit(status.READY, manifest=manifest)


def compare(directory, profile, venv, files, packages, unit, model_dirs=()):
    """Whether the last known good is what is installed now, and whether the unit's server
    runs what is installed: {last_good, differs, not_running}."""
    engine_installed = {n: v for n, v in installed_engine(venv).items() if n in packages}
    manifest = load(directory)
    engine = {name: engine_installed.get(name, (None, None))[0] for name in packages}
    return {
        "last_good": manifest and manifest["profile"],
        "differs": differences(
            manifest, profile, files, engine, os.path.realpath(venv), model_digests(model_dirs)
        ),
        "not_running": running_check(unit, files, engine_installed, venv) if unit else None,
    }


def restore(directory):
    where = record.locate(directory)
    manifest = record.load(directory)
    if manifest is None:
        why = "nothing to roll back to: no configuration has passed the gate here yet"
        print(why)
        return result.emit(status.NO_LAST_GOOD, why)
    # Everything checked before anything is written: a refused restore leaves the node as it is.
    why = refusal(where, manifest)
    if why:
        why = "not restoring %s: %s; nothing was changed" % (manifest["profile"], why)
        print(why)
        return result.emit(status.PREFLIGHT_FAILED, why)
    for role, entry in sorted(manifest["files"].items()):
        target = entry["path"]
        os.makedirs(os.path.dirname(target), exist_ok=True)
        temporary = target + ".lastgood"
        # A fresh mtime: these files are written now, after whatever server runs at present.
        shutil.copyfile(os.path.join(where, role), temporary)
        os.chmod(temporary, entry["mode"])
        with open(temporary, "rb") as f:
            os.fsync(f.fileno())
        os.replace(temporary, target)  # each file whole: the old one or the restored one
    subprocess.run(["systemctl", "daemon-reload"], check=True)
    if not restore_venv(manifest):
        restore_engine(manifest)
    for model_dir, digest in sorted(manifest.get("models", {}).items()):
        said = model_stage.restore_weights(model_dir, digest)
        if said:
            print("model: %s" % said)
    print("restored %s (passed the gate at %s)" % (manifest["profile"], manifest["saved_at"]))
    return result.emit(status.READY, profile=manifest["profile"])


def copy_record(source, target):
    """Copy the record at ``source`` whole to ``target`` (replaced as a save replaces it):
    its manifest, or None when there is none; SystemExit when its copies are damaged."""
    where, manifest = record.locate(source), record.load(source)
    if manifest is None:
        return None
    damaged = record.incomplete(where, manifest)
    if damaged:
        raise SystemExit("the last known good in %s is incomplete (%s)" % (where, "; ".join(damaged)))

    def fill(staging):
        for role in manifest["files"]:
            shutil.copy2(os.path.join(where, role), os.path.join(staging, role))
        return manifest

    record.replace(target, fill)
    return manifest


def keep(directory, to):
    manifest = copy_record(directory, to)
    if manifest is None:
        why = "nothing to keep: no configuration has passed the gate in %s yet" % directory
        print(why)
        return result.emit(status.NO_LAST_GOOD, why)
    print("kept %s (passed the gate at %s) at %s" % (manifest["profile"], manifest["saved_at"], to))
    return result.emit(status.READY, profile=manifest["profile"])


def reinstate(directory, kept):
    manifest = record.load(kept)
    if manifest is None:
        why = "nothing kept in %s to reinstate" % kept
        print(why)
        return result.emit(status.NO_LAST_GOOD, why)
    why = refusal(record.locate(kept), manifest)
    if why:
        why = "not reinstating %s: %s; nothing was changed" % (manifest["profile"], why)
        print(why)
        return result.emit(status.PREFLIGHT_FAILED, why)
    copy_record(kept, directory)
    print("reinstated %s as the last known good" % manifest["profile"])
    return restore(directory)


def venv_to_restore(manifest):
    """The venv the last known good ran: its own (kept on the node), the pre-venvs directory
    moved aside at the link, or None for a manifest from before venvs (the link's path itself,
    its engine reinstalled)."""
    link, target = manifest["venv"], manifest.get("venv_target")
    if target is None and os.path.islink(link) and os.path.isdir(link + venvs.LEGACY):
        target = link + venvs.LEGACY  # the directory that was at the link, moved aside
    return None if target == link else target


def refusal(where, manifest):
    """Why the record at ``where`` cannot be put back (a copy damaged, its venv gone), or None."""
    damaged = record.incomplete(where, manifest)
    if damaged:
        return "the last known good in %s is incomplete (%s)" % (where, "; ".join(damaged))
    venv = venv_to_restore(manifest) or manifest["venv"]
    if not os.path.isfile(os.path.join(venv, "bin", "python")):
        return "the last known good's engine venv %s is gone" % venv
    return None


def restore_venv(manifest):
    """Point the unit's venv link back at the last known good's own venv, kept on the node for
    this: no package is downloaded or installed. False for a manifest saved before there were
    venvs per pin set, whose venv is the link's path itself (its engine is reinstalled)."""
    link, target = manifest["venv"], venv_to_restore(manifest)
    if target is None:
        return False
    if not os.path.isfile(os.path.join(target, "bin", "python")):
        raise SystemExit("the last known good's engine venv %s is gone" % target)
    pending = link + venvs.PENDING
    if os.path.lexists(pending):
        os.unlink(pending)
    if os.path.realpath(link) != os.path.realpath(target):
        venvs.point(link, target)
    print("engine venv: %s -> %s (kept on the node: nothing downloaded)" % (link, target))
    return True


def restore_engine(manifest):
    installed = installed_versions(manifest["venv"])
    pins = [
        "%s==%s" % (name, version)
        for name, version in sorted(manifest["engine"].items())
        if version and installed.get(name) != version
    ]
    if not pins:
        return
    print("reinstalling %s" % " ".join(pins))
    source = ["--no-index", "--find-links", manifest["wheels_dir"]] if manifest["wheels_dir"] else []
    subprocess.run(
        [os.path.join(manifest["venv"], "bin", "pip"), "install", "--no-input", "--disable-pip-version-check"]
        + source
        + pins,
        check=True,
    )


def role_path(text):
    role, sep, path = text.partition("=")
    if not sep or not role or not path.startswith("/"):
        raise argparse.ArgumentTypeError("expected ROLE=/absolute/path, got %r" % text)
    return role, path


@guarded
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("save", "compare", "restore", "show", "keep", "reinstate"))
    parser.add_argument(
        "--dir", help="where the last known good is kept (show: every one saved on this node when left out)"
    )
    parser.add_argument("--profile")
    parser.add_argument("--venv")
    parser.add_argument("--file", type=role_path, action="append", default=[])
    parser.add_argument("--package", action="append", default=[], help="engine distribution name")
    parser.add_argument("--wheels-dir")
    parser.add_argument("--model", action="append", default=[], help="a model directory the profile serves")
    parser.add_argument("--unit", help="save only if this unit's server runs exactly these files and engine")
    parser.add_argument("--to", help="keep: where the copy of the record goes")
    parser.add_argument("--kept", help="reinstate: the record keep copied")
    args = parser.parse_args(argv)
    if args.action != "show" and not args.dir:
        parser.error("%s needs --dir" % args.action)
    if args.action in ("save", "compare") and not (args.profile and args.venv and args.file):
        parser.error("%s needs --profile, --venv and at least one --file" % args.action)
    if args.action == "save":
        return save(
            args.dir,
            args.profile,
            args.venv,
            dict(args.file),
            args.package,
            args.wheels_dir,
            unit=args.unit,
            model_dirs=args.model,
        )
    if args.action == "compare":
        return result.emit(
            status.READY,
            **compare(
                args.dir, args.profile, args.venv, dict(args.file), args.package, args.unit, args.model
            ),
        )
    if args.action == "restore":
        return restore(args.dir)
    if args.action == "keep":
        return keep(args.dir, args.to) if args.to else parser.error("keep needs --to")
    if args.action == "reinstate":
        return reinstate(args.dir, args.kept) if args.kept else parser.error("reinstate needs --kept")
    return show(args.dir)


if __name__ == "__main__":
    sys.exit(main())
