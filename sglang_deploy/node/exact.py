"""Whether a venv holds exactly its lock: no distribution more, none missing, the same versions,
for the Python the lock was made for.

Run BY THE VENV'S INTERPRETER, so that importlib.metadata sees that venv's site-packages:

    /opt/sglang/venvs/NAME/bin/python exact.py --lock /opt/sglang-deploy/locks/LOCK.txt [--allow pip]

Every installed distribution is compared (not a sample): listing them is metadata only, cheap
even for ~200 distributions. Whether their files still match RECORD is drift.py's job.
The result line (result.py) carries:
    {"extra": [NAME==VERSION...], "missing": [NAME==VERSION...],
     "different": [{"name", "locked", "installed"}...], "python": "X.Y", "lock_python": "X.Y",
     "locked": n, "installed": n, "status": n}
Exit status (status.py): READY when the venv is the lock; NOT_INSTALLED when a locked
distribution is missing; DRIFT when one is extra or at another version, or the lock was made
for another Python than this interpreter.

Standard library only, Python >= 3.9.
"""

import argparse
import re
import sys

if __package__:
    from .lib import installed, result, status
else:  # run as a script: our scripts' directory is on sys.path
    from lib import installed, result, status

_REQUIREMENT = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;\\]+)")
_HEADER = re.compile(r"#\s*([a-z][a-z ]*):\s*(.*)")


def read_lock(text):
    """({header key: value}, {canonical name: (name, version)}) of a lock file's text."""
    header, entries = {}, {}
    for line in text.splitlines():
        line = line.strip()
        found = _HEADER.match(line)
        if found and not entries:
            header[found.group(1).strip()] = found.group(2).strip()
            continue
        requirement = _REQUIREMENT.match(line)
        if requirement:
            entries[installed.canonical(requirement.group(1))] = (requirement.group(1), requirement.group(3))
    return header, entries


def compare(locked, present, allow=()):
    """{"extra", "missing", "different"} of ``present`` ({canonical name: version}) against
    ``locked`` ({canonical name: (name, version)}); names in ``allow`` may be extra."""
    allowed = {installed.canonical(name) for name in allow}
    extra = sorted("%s==%s" % (k, v) for k, v in present.items() if k not in locked and k not in allowed)
    missing = sorted("%s==%s" % entry for k, entry in locked.items() if k not in present)
    different = [
        {"name": locked[k][0], "locked": locked[k][1], "installed": present[k]}
        for k in sorted(locked)
        if k in present and present[k].lower() != locked[k][1].lower()
    ]
    return {"extra": extra, "missing": missing, "different": different}


def problems(found):
    """One line per difference, for a person."""
    lines = ["extra %s (not in the lock)" % name for name in found["extra"]]
    lines += ["missing %s" % name for name in found["missing"]]
    lines += ["%(name)s %(installed)s installed, %(locked)s locked" % d for d in found["different"]]
    if found.get("lock_python") and found["lock_python"] != found["python"]:
        lines.insert(
            0, "the lock is for Python %s, this venv runs %s" % (found["lock_python"], found["python"])
        )
    return lines


def check(lock_text, allow=()):
    """The report of this interpreter's environment against ``lock_text``, with 'status'."""
    header, locked = read_lock(lock_text)
    present = {name: dist.version for name, dist in installed.installed_distributions().items()}
    found = compare(locked, present, allow)
    found.update(
        python="%d.%d" % sys.version_info[:2],
        lock_python=header.get("python"),
        locked=len(locked),
        installed=len(present),
    )
    if found["missing"]:
        found["status"] = status.NOT_INSTALLED
    elif found["extra"] or found["different"] or problems(dict(found, extra=[], different=[])):
        found["status"] = status.DRIFT
    else:
        found["status"] = status.READY
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description="Does this venv hold exactly its lock?")
    parser.add_argument("--lock", required=True, help="the lock file (on this node)")
    parser.add_argument("--allow", nargs="*", default=[], metavar="DIST", help="may be installed besides")
    args = parser.parse_args(argv)
    with open(args.lock) as lock:
        found = check(lock.read(), args.allow)
    lines = problems(found)
    for line in lines:
        print(line)
    if found["status"] == status.READY:
        print("%d distributions, exactly the lock's" % found["locked"])
    return result.emit(found["status"], "; ".join(lines) or None, **found)


if __name__ == "__main__":
    sys.exit(main())
