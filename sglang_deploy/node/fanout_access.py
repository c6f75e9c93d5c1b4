"""Who may read a node's verified copy during fan-out: this run's key, for one directory,
read only; and what is left of it afterwards.

    python3 fanout_access.py grant --user U --dir /models/m --marker M    # stdin: the public key
    python3 fanout_access.py revoke --user U --marker M
    python3 fanout_access.py hostkeys
    python3 fanout_access.py leftovers --user U --run-dir /run/sglang-deploy
    python3 fanout_access.py clean --user U --run-dir /run/sglang-deploy

`grant` adds one line to the login user's authorized_keys:

    restrict,command="/usr/bin/rrsync -ro '/models/m'" ssh-ed25519 AAAA... M

`restrict` takes away forwarding, a pty and ~/.ssh/rc; the forced command is rsync's own
rrsync, which runs only `rsync --server --sender` inside that directory (no `..`, no path out
of it, no write). The key pair is the controller's, made for one run and one directory; the
marker names both, so `revoke` removes exactly that line (the file written whole, through a
temporary file: never half an authorized_keys). `hostkeys` prints this node's SSH host keys (a
child pins them). `leftovers` counts what a run that died left (lines with the fan-out prefix,
key directories `fanout-*` under the run directory) and `clean` removes them; the deploy lock
this node's deploy holds means no other run of ours is reading from it then.
"""

import argparse
import glob
import os
import pwd
import shlex
import shutil
import sys

if __package__:
    from .lib import result, status
    from .lib.guard import guarded
else:  # run as a script: our scripts' directory is on sys.path
    from lib import result, status
    from lib.guard import guarded

PREFIX = "sglang-deploy-fanout:"
KEY_DIR_PREFIX = "fanout-"
HOST_KEYS = "/etc/ssh/ssh_host_*_key.pub"


def rrsync_path():
    return shutil.which("rrsync") or ("/usr/bin/rrsync" if os.path.isfile("/usr/bin/rrsync") else None)


def key_line(public_key, directory, marker, rrsync="/usr/bin/rrsync"):
    """The authorized_keys line: ``public_key`` (type and base64) may only read ``directory``."""
    kind_and_key = " ".join(public_key.split()[:2])
    if len(kind_and_key.split()) != 2 or not kind_and_key.startswith("ssh-"):
        raise SystemExit("not an SSH public key")
    if any(c in directory for c in '"\\\n\r') or not marker.startswith(PREFIX) or " " in marker:
        raise SystemExit("refused: a double quote, backslash or newline in %r, or a bad marker" % directory)
    command = "%s -ro %s" % (shlex.quote(rrsync), shlex.quote(directory))
    return 'restrict,command="%s" %s %s' % (command, kind_and_key, marker)


def authorized_keys(user):
    entry = pwd.getpwnam(user)
    return os.path.join(entry.pw_dir, ".ssh", "authorized_keys"), entry.pw_uid, entry.pw_gid


def _read(path):
    try:
        with open(path) as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def _marker(line):
    words = line.split()
    return words[-1] if words else ""


def _write(path, lines, uid, gid):
    """``lines`` as ``path``, owned by the user, 0600, renamed over it whole."""
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory, mode=0o700)
        os.chown(directory, uid, gid)
    new = path + ".sglang-deploy-new"
    fd = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write("".join(line + "\n" for line in lines))
            f.flush()
            os.fsync(f.fileno())
        os.chown(new, uid, gid)
        os.chmod(new, 0o600)
        os.replace(new, path)
    finally:
        if os.path.exists(new):
            os.unlink(new)


def grant(user, directory, marker, public_key):
    rrsync = rrsync_path()
    if rrsync is None:
        raise SystemExit("no rrsync on this node (Debian's rsync package ships /usr/bin/rrsync)")
    if not os.path.isdir(directory):
        raise SystemExit("%s is not a directory" % directory)
    path, uid, gid = authorized_keys(user)
    line = key_line(public_key, directory, marker, rrsync)
    lines = [kept for kept in _read(path) if _marker(kept) != marker]
    _write(path, lines + [line], uid, gid)
    return path


def revoke(user, only=None):
    """Remove the fan-out lines (``only``: the one marker); the number removed."""
    path, uid, gid = authorized_keys(user)
    lines = _read(path)
    ours = [
        line for line in lines if _marker(line).startswith(PREFIX) and (only is None or _marker(line) == only)
    ]
    if ours:
        _write(path, [line for line in lines if line not in ours], uid, gid)
    return len(ours)


def key_dirs(run_dir):
    return sorted(glob.glob(os.path.join(run_dir, KEY_DIR_PREFIX + "*")))


def host_keys(pattern=HOST_KEYS):
    found = []
    for path in sorted(glob.glob(pattern)):
        with open(path) as f:
            words = f.read().split()
        if len(words) >= 2:
            found.append(" ".join(words[:2]))
    return found


@guarded
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["grant", "revoke", "hostkeys", "leftovers", "clean"])
    parser.add_argument("--user", default="root")
    parser.add_argument("--dir")
    parser.add_argument("--marker")
    parser.add_argument("--run-dir", default="/run/sglang-deploy")
    args = parser.parse_args(argv)
    if args.action == "grant":
        if not args.dir or not args.marker:
            parser.error("grant needs --dir and --marker")
        path = grant(args.user, args.dir.rstrip("/") or "/", args.marker, sys.stdin.read())
        print("fan-out: %s may read %s (read only) for %s" % (args.marker, args.dir, args.user))
        return result.emit(status.READY, None, authorized_keys=path)
    if args.action == "revoke":
        if not args.marker:
            parser.error("revoke needs --marker")
        return result.emit(status.READY, None, removed=revoke(args.user, only=args.marker))
    if args.action == "hostkeys":
        keys = host_keys()
        if not keys:
            return result.emit(status.FANOUT_SOURCE_FAILED, "no SSH host key under /etc/ssh", keys=[])
        return result.emit(status.READY, None, keys=keys)
    try:
        lines = [line for line in _read(authorized_keys(args.user)[0]) if _marker(line).startswith(PREFIX)]
    except KeyError:
        lines = []
    dirs = key_dirs(args.run_dir)
    if args.action == "leftovers":
        return result.emit(status.READY, None, lines=len(lines), key_dirs=len(dirs))
    removed = revoke(args.user) if lines else 0
    for directory in dirs:
        shutil.rmtree(directory, ignore_errors=True)
    print(
        "fan-out: removed %d authorized key(s) and %d key director(ies) left by a run" % (removed, len(dirs))
    )
    return result.emit(status.READY, None, lines=removed, key_dirs=len(dirs))


if __name__ == "__main__":
    sys.exit(main())
