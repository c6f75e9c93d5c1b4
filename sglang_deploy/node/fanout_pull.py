"""Copy a model directory (or the engine wheelhouse) from another node, then verify it: the
child's side of fan-out (sglang_deploy/plan/fanout.py).

    python3 fanout_pull.py seed --dir /models/m
    python3 fanout_pull.py pull --dir /models/m --source USER@ADDR --port 22 --key KEY \\
        --known-hosts FILE --alias NAME [--bwlimit KIB] [--timeout S]

The controller has put the wanted manifest into the directory's staging sibling first
(node/model_stage.py; for a model, `model_stage.py seed` has linked the live files it keeps).
`seed` hard-links into staging the live files that hash to the manifest's entries when the
live directory has no manifest of its own (a wheelhouse a copy that died left behind). `pull`
does that, copies what staging still lacks with rsync over SSH from the source (a node whose
copy was verified, which accepts this run's key for a read-only rrsync of that directory
alone: the remote path is always ".", no path of ours goes through its shell), and then runs
`model_stage.finish`: every file hashed against the manifest (the controller's, never the
source's), the staging directory marked verified only when all match (swapped in by the
restart; `--now`/`--in-place`: at once, as finish's flags). A verified staging directory is
what this node then serves to its own children, until the restart swaps it in. A copy that dies, a source
that goes away or serves other bytes leave the live directory untouched and nothing in place
that a child could read: a node serves only its live, verified directory.

Exit statuses: READY; FANOUT_SOURCE_FAILED when the source could not be read (ssh refused or
unreachable, the link dropped or stalled, files missing there: copy from another source);
FANOUT_COPY_FAILED when rsync failed here; MODEL_MISMATCH when the copy does not match the
manifest (the files that did not are removed).
"""

import argparse
import os
import shlex
import subprocess
import sys
import time

if __package__:
    from . import model_manifest, model_stage
    from .lib import result, status
    from .lib.guard import guarded
else:  # run as a script: our scripts' directory is on sys.path
    import model_manifest
    import model_stage
    from lib import result, status
    from lib.guard import guarded

# rsync's exit statuses that mean the other end (or the link to it) failed: 5 the protocol
# could not start (rrsync refused), 10 socket I/O, 12 the data stream broke, 23/24 files
# unreadable or gone there, 30/35 timeouts, 255 ssh itself (refused, unreachable).
SOURCE_EXITS = (5, 10, 12, 23, 24, 30, 35, 255)


def seed_by_hash(directory):
    """Hard-link into staging the live files whose sha256 is the manifest's, when the live
    directory has no manifest (model_stage.seed keeps those of a manifest); the paths linked."""
    live = model_stage.staged_at(directory)
    staging = model_stage.staging_of(directory)
    wanted = model_manifest.read(staging)
    if wanted is None or not os.path.isdir(live) or model_manifest.read(live) is not None:
        return []
    linked = []
    for entry in wanted["files"]:
        source, target = os.path.join(live, entry["path"]), os.path.join(staging, entry["path"])
        if os.path.exists(target) or not os.path.isfile(source) or os.path.getsize(source) != entry["size"]:
            continue
        if model_manifest.sha256_file(source) != entry["sha256"]:
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.link(source, target)
        linked.append(entry["path"])
    return linked


def still_needed(staging, manifest):
    """The manifest's entries not in ``staging`` at their size (a whole file there is kept:
    finish hashes it)."""
    staged = dict(model_manifest.listing(staging))
    return [e for e in manifest["files"] if staged.get(e["path"]) != e["size"]]


def ssh_command(key, known_hosts, alias, port):
    """ssh as rsync runs it: this run's key only, the source's host key pinned (the controller
    read it from the source and wrote it under ``alias``), never a prompt, a dead link noticed."""
    return shlex.join(
        [
            "ssh",
            "-i",
            key,
            "-p",
            str(port),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "IdentityAgent=none",
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "UserKnownHostsFile=" + known_hosts,
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            "HostKeyAlias=" + alias,
            "-o",
            "ConnectTimeout=10",
            "-o",
            "ServerAliveInterval=10",
            "-o",
            "ServerAliveCountMax=3",
            "-o",
            "LogLevel=ERROR",
        ]
    )


def rsync_argv(ssh, source, staging, bwlimit=None, timeout=60):
    """rsync pulling the files named on stdin from the source's restricted directory (".",
    rrsync's root) into ``staging``: resumable (--partial-dir), stalls fail (--timeout). No -s:
    rrsync refuses it, and the one path on the command line is "."."""
    argv = ["rsync", "--times", "--perms", "--partial", "--partial-dir=.rsync-partial"]
    argv += ["--files-from=-", "--info=progress2", "--no-inc-recursive", "--timeout=%d" % timeout]
    if bwlimit:
        argv.append("--bwlimit=%d" % bwlimit)
    return argv + ["-e", ssh, source + ":.", staging.rstrip("/") + "/"]


def pull(args):
    directory = args.dir.rstrip("/")
    staging = model_stage.staging_of(directory)
    manifest = model_manifest.read(staging)
    if manifest is None:
        return result.emit(status.MODEL_MISMATCH, "%s has no manifest: nothing to copy into" % staging)
    model_stage.seed(directory)
    linked = seed_by_hash(directory)
    need = still_needed(staging, manifest)
    size = sum(e["size"] for e in need)
    print(
        "fan-out: %d file(s), %.1f MB from %s (%d kept here)"
        % (len(need), size / 1e6, args.alias, len(manifest["files"]) - len(need)),
        flush=True,
    )
    started = time.monotonic()
    if need:
        ssh = ssh_command(args.key, args.known_hosts, args.alias, args.port)
        proc = subprocess.run(
            rsync_argv(ssh, args.source, staging, args.bwlimit, args.timeout),
            input="".join(e["path"] + "\n" for e in need),
            text=True,
            stderr=subprocess.PIPE,
        )
        if proc.returncode != 0:
            said = proc.stderr.strip()[-300:]
            print(said, file=sys.stderr)
            code = (
                status.FANOUT_SOURCE_FAILED if proc.returncode in SOURCE_EXITS else status.FANOUT_COPY_FAILED
            )
            cause = "rsync from %s failed (exit %d): %s" % (args.alias, proc.returncode, said)
            return result.emit(code, cause, rsync_exit=proc.returncode, source=args.alias)
    took = time.monotonic() - started
    problems = model_stage.finish(directory, in_place=args.in_place, now=args.now)
    if problems:
        cause = model_manifest.describe(problems, staging)
        print("fan-out copy failed its check: %s" % cause, file=sys.stderr)
        return result.emit(status.MODEL_MISMATCH, cause, problems=problems, source=args.alias)
    waits = model_stage.pending(directory) is not None
    print(
        "fan-out: %s staged and verified (%.1f MB in %.1f s)%s"
        % (directory, size / 1e6, took, ": swapped in at the restart" if waits else ", swapped in")
    )
    return result.emit(
        status.READY,
        None,
        bytes=size,
        seconds=round(took, 3),
        files=len(need),
        kept=linked,
        source=args.alias,
    )


@guarded
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["seed", "pull"])
    parser.add_argument("--dir", required=True)
    parser.add_argument("--source", help="USER@ADDRESS of the node copied from")
    parser.add_argument("--port", type=int, default=22)
    parser.add_argument("--key", help="this run's private key (0600)")
    parser.add_argument("--known-hosts", help="the source's host keys, under --alias")
    parser.add_argument("--alias", help="the source's name (its host keys' name)")
    parser.add_argument("--bwlimit", type=int, default=None, help="KiB/s")
    parser.add_argument("--timeout", type=int, default=60, help="seconds without data before rsync fails")
    parser.add_argument("--in-place", action="store_true", help="swap now, the old copy removed")
    parser.add_argument("--now", action="store_true", help="swap now, the old copy kept as previous")
    args = parser.parse_args(argv)
    if args.action == "seed":
        linked = seed_by_hash(args.dir.rstrip("/"))
        print("fan-out: %d file(s) kept from %s" % (len(linked), args.dir))
        return result.emit(status.READY, None, linked=linked)
    for name in ("source", "key", "known_hosts", "alias"):
        if not getattr(args, name):
            parser.error("pull needs --%s" % name.replace("_", "-"))
    return pull(args)


if __name__ == "__main__":
    sys.exit(main())
