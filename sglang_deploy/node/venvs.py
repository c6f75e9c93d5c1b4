"""The engine venvs of this node: one per pin set under a venvs directory, and the stable link
the unit runs through (the profile's engine.venv), switched only by the restart cycle.

    python3 venvs.py mark --venv DIR [--lock LOCK]     # a finished build (written last)
    python3 venvs.py list --dir D --link L [--last-good-dir G]
    python3 venvs.py switch --link L                   # commit L.next (staged by the deploy)
    python3 venvs.py usage --path P                    # disk used by P and free beside it
    python3 venvs.py wheelhouses --deploy-dir D        # each lock's wheelhouse and its venvs

`list`'s result line: {"venvs": [{"name", "built_at" (null: unfinished build)}], "live": the
name L points at (null: none, or a directory: "legacy"), "pending": the name L.next points at,
"last_good": the name the last known good runs, "in_use": {name: [why]} of every venv any
service on this node runs or goes back to (every service's link and staged switch, every last
known good, every running process): the venvs directory is shared, pruning keeps all of them}. `switch` renames L.next over L (atomic; a
fresh link, so its time is the switch's); a venv directory from before venvs existed at L is
moved aside to L.legacy first. Without L.next it changes nothing.

A venv built from a lock (`mark --lock <deploy dir>/locks/<lock>.txt`) names it in its marker
and registers itself beside the lock (`locks/<lock>.venvs/`, a link to the venv: every service's
venvs of the node, wherever their directory). `wheelhouses` lists each lock on the node (its
file, `wheelhouse/<lock>/`): bytes, the venvs built from it that still stand, and how long ago
it arrived (a deploy of another service may be about to build from one none was built from
yet). Standard library only.
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
    from .lib import last_good_record, result, status
    from .lib.guard import guarded
else:  # run as a script: our scripts' directory is on sys.path
    from lib import last_good_record, result, status
    from lib.guard import guarded

MARKER = ".sglang-deploy-venv.json"  # in a venv: written once its build finished
PENDING = ".next"  # L.next: the venv the next restart switches to
LEGACY = ".legacy"  # L.legacy: a pre-venvs directory at L, kept for rollback


USERS = ".venvs"  # <locks>/<lock>.venvs/: a link to each venv built from <lock>.txt


def mark(venv, lock=None):
    record = {"built_at": time.time()}
    if lock:
        record["lock"] = os.path.basename(lock)
        users = os.path.splitext(lock)[0] + USERS
        os.makedirs(users, exist_ok=True)
        link = os.path.join(users, hashlib.sha256(os.path.realpath(venv).encode()).hexdigest()[:16])
        if os.path.lexists(link + ".tmp"):
            os.unlink(link + ".tmp")
        os.symlink(os.path.realpath(venv), link + ".tmp")
        os.replace(link + ".tmp", link)
    with open(os.path.join(venv, MARKER + ".tmp"), "w") as f:
        json.dump(record, f)
    os.replace(os.path.join(venv, MARKER + ".tmp"), os.path.join(venv, MARKER))
    return result.emit(status.READY)


def _bytes(path):
    """Bytes of the files under ``path`` (links not followed)."""
    found = 0
    for root, _, files in os.walk(path):
        found += sum(os.lstat(os.path.join(root, name)).st_size for name in files)
    return found


def wheelhouses(deploy_dir, now=None):
    """[{"name", "bytes", "venvs": [built from it, still there], "age_s"}] for every lock on
    this node (its file under locks/, its directory under wheelhouse/)."""
    locks, houses = os.path.join(deploy_dir, "locks"), os.path.join(deploy_dir, "wheelhouse")
    names = {n[:-4] for n in (os.listdir(locks) if os.path.isdir(locks) else []) if n.endswith(".txt")}
    names |= {
        n
        for n in (os.listdir(houses) if os.path.isdir(houses) else [])
        if not n.startswith(".") and ".sglang-deploy-" not in n and os.path.isdir(os.path.join(houses, n))
    }
    found = []
    for name in sorted(names):
        users = os.path.join(locks, name + USERS)
        built = []
        for link in sorted(os.listdir(users)) if os.path.isdir(users) else []:
            venv = os.path.realpath(os.path.join(users, link))
            if os.path.isfile(os.path.join(venv, MARKER)):
                built.append(venv)
        paths = [os.path.join(locks, name + ".txt"), os.path.join(houses, name)]
        arrived = max([os.lstat(p).st_mtime for p in paths if os.path.lexists(p)] or [0])
        found.append(
            {
                "name": name,
                "bytes": _bytes(paths[1]),
                "venvs": built,
                "age_s": round((now or time.time()) - arrived),
            }
        )
    return found


def built_at(venv):
    try:
        with open(os.path.join(venv, MARKER)) as f:
            return json.load(f)["built_at"]
    except (OSError, ValueError, KeyError):
        return None


def target_name(link, directory):
    """The venv name ``link`` points at, if it is a venv of ``directory``; "legacy" for a
    directory at ``link``; None when there is nothing there."""
    if os.path.islink(link):
        target = os.path.realpath(link)
        if os.path.dirname(target) == os.path.realpath(directory):
            return os.path.basename(target)
        return target
    return "legacy" if os.path.isdir(link) else None


def last_good_venv(last_good_dir):
    try:
        return (last_good_record.load(last_good_dir) or {}).get("venv_target")
    except (OSError, ValueError):
        return None


def _venv_of(path, venvs_real):
    """The name of the venv of ``venvs_real`` that ``path`` lies in (links on the way, the
    engine link among them, resolved), or None."""
    for candidate in (os.path.realpath(os.path.dirname(path)), os.path.realpath(path)):
        rel = os.path.relpath(candidate, venvs_real)
        if rel != "." and not rel.startswith(".."):
            return rel.split(os.sep)[0]
    return None


def _records(last_good_dir):
    """Every last known good on this node: this service's, its siblings in the state
    directory (<state>/<service>/<name>), and every one a save here remembered."""
    found = set(last_good_record.saved_dirs())
    if last_good_dir:
        found.add(last_good_dir)
        state = os.path.dirname(os.path.dirname(last_good_dir.rstrip("/")))
        name = os.path.basename(last_good_dir.rstrip("/"))
        if os.path.isdir(state):
            found.update(os.path.join(state, service, name) for service in os.listdir(state))
    return sorted(found)


def _process_paths(proc):
    """(pid, path) of what each process runs: its executable, and argv's first two words when
    they are paths (`<venv>/bin/python -m sglang…`, a script's shebang)."""
    try:
        pids = [pid for pid in os.listdir(proc) if pid.isdigit()]
    except OSError:
        return
    for pid in pids:
        try:
            yield pid, os.readlink(os.path.join(proc, pid, "exe"))
        except OSError:
            pass
        try:
            with open(os.path.join(proc, pid, "cmdline"), "rb") as f:
                argv = f.read().split(b"\0")[:2]
        except OSError:
            continue
        for word in argv:
            if word.startswith(b"/"):
                yield pid, os.fsdecode(word)


def in_use(directory, last_good_dir=None, proc="/proc"):
    """{venv name: [why]} for every venv of ``directory`` something on this node runs or goes
    back to: the venvs dir is shared by every service here, so each one's engine link (and its
    staged switch), each one's last known good, and every running process count."""
    venvs_real = os.path.realpath(directory)
    found = {}

    def note(path, why):
        name = _venv_of(path, venvs_real) if path else None
        if name:
            found.setdefault(name, []).append(why)

    for record_dir in _records(last_good_dir):
        try:
            manifest = last_good_record.load(record_dir) or {}
        except (OSError, ValueError):
            continue
        note(manifest.get("venv_target"), "the last known good in %s" % record_dir)
        link = manifest.get("venv")
        if link:
            note(os.path.join(link, "bin"), "live at %s" % link)
            if os.path.islink(link + PENDING):
                note(os.path.join(link + PENDING, "bin"), "staged at %s" % (link + PENDING))
    for pid, path in _process_paths(proc):
        note(path, "run by process %s" % pid)
    return {name: sorted(set(whys)) for name, whys in sorted(found.items())}


def listing(directory, link, last_good_dir=None, proc="/proc"):
    names = sorted(os.listdir(directory)) if os.path.isdir(directory) else []
    venvs = [
        {"name": name, "built_at": built_at(os.path.join(directory, name))}
        for name in names
        if os.path.isdir(os.path.join(directory, name))
        and not name.startswith(".")
        and not os.path.islink(os.path.join(directory, name))
    ]
    good = last_good_venv(last_good_dir) if last_good_dir else None
    return {
        "venvs": venvs,
        "live": target_name(link, directory),
        "pending": target_name(link + PENDING, directory) if os.path.islink(link + PENDING) else None,
        "last_good": os.path.basename(good) if good else None,
        "in_use": in_use(directory, last_good_dir, proc),
    }


def point(link, target):
    """Point ``link`` at ``target`` in one rename; a directory at ``link`` is moved aside."""
    fresh = link + ".tmp"
    if os.path.lexists(fresh):
        os.unlink(fresh)
    os.symlink(target, fresh)
    if os.path.isdir(link) and not os.path.islink(link):
        legacy = link + LEGACY
        shutil.rmtree(legacy, ignore_errors=True)
        os.rename(link, legacy)
    os.replace(fresh, link)


def switch(link):
    pending = link + PENDING
    if not os.path.islink(pending):
        print("%s: no switch pending" % link)
        return result.emit(status.READY, switched=False, venv=os.path.realpath(link))
    target = os.readlink(pending)
    if not os.path.isfile(os.path.join(target, MARKER)):
        why = "%s is not a finished venv: not switching to it" % target
        print(why)
        return result.emit(status.PREFLIGHT_FAILED, why)
    point(link, target)
    os.unlink(pending)
    print("switched %s -> %s" % (link, target))
    return result.emit(status.READY, switched=True, venv=target)


def usage(path):
    """(bytes used under ``path``, bytes free on its filesystem)."""
    used = subprocess.run(["du", "-sb", path], stdout=subprocess.PIPE, text=True)
    size = int(used.stdout.split()[0]) if used.returncode == 0 and used.stdout else 0
    return size, shutil.disk_usage(path).free


@guarded
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("mark", "list", "switch", "usage", "wheelhouses"))
    parser.add_argument("--venv")
    parser.add_argument("--dir")
    parser.add_argument("--link")
    parser.add_argument("--last-good-dir")
    parser.add_argument("--path")
    parser.add_argument("--lock", help="mark: the lock the venv was built from")
    parser.add_argument("--deploy-dir")
    args = parser.parse_args(argv)
    if args.action == "mark":
        return mark(args.venv, args.lock)
    if args.action == "wheelhouses":
        return result.emit(status.READY, wheelhouses=wheelhouses(args.deploy_dir))
    if args.action == "list":
        return result.emit(status.READY, **listing(args.dir, args.link, args.last_good_dir))
    if args.action == "switch":
        return switch(args.link)
    used, free = usage(args.path)
    return result.emit(status.READY, used=used, free=free)


if __name__ == "__main__":
    sys.exit(main())
