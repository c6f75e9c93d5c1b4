"""A model directory's manifest: every file's relative path, size and sha256.

    python3 model_manifest.py check --dir /models/m [--deep]   # sizes; --deep: hashes too
    python3 model_manifest.py build --dir /models/m [--workers N]

Written as `.sglang-deploy-manifest.json` inside the directory once it is staged and verified;
the deploy skips staging when the node's manifest equals the source's, preflight refuses a
directory whose files' sizes differ from it and `make verify` checks sizes (hashes on request).
Standard library only: it runs on the node and on the controller.
"""

import argparse
import hashlib
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor

if __package__:
    from .lib import result, status
else:  # run as a script: our scripts' directory is on sys.path
    from lib import result, status

MANIFEST_NAME = ".sglang-deploy-manifest.json"
# Never part of a model: at its root our own entries (the manifest; inside a mount point the
# staging and previous copies and the swap's journal: model_stage.py) and fsck's directory of a
# filesystem's root; anywhere, what an interrupted download or copy leaves.
OURS = ".sglang-deploy-"
IGNORED_AT_ROOT = ("lost+found",)
IGNORED_DIRS = (".cache", ".rsync-partial")
CHUNK = 4 << 20  # hashlib releases the GIL on buffers this size: threads hash in parallel


def default_workers():
    return min(8, os.cpu_count() or 1)


def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def listing(directory):
    """(relative path, size) of every regular file under ``directory``, sorted; our own entries
    and download caches left out."""
    found = []
    for root, dirs, files in os.walk(directory):
        top = root == directory
        dirs[:] = sorted(d for d in dirs if d not in IGNORED_DIRS and not (top and _ours(d)))
        for name in files:
            if top and _ours(name):
                continue
            path = os.path.join(root, name)
            if os.path.isfile(path):  # a symlink to a file counts as the file
                found.append((os.path.relpath(path, directory), os.path.getsize(path)))
    return sorted(found)


def _ours(name):
    return name.startswith(OURS) or name in IGNORED_AT_ROOT


def build(directory, workers=None):
    """The manifest of ``directory``: {"files": [{"path", "size", "sha256"}, ...]} sorted by
    path, files hashed by a pool of ``workers`` threads."""
    files = listing(directory)
    with ThreadPoolExecutor(max_workers=workers or default_workers()) as pool:
        hashes = list(pool.map(lambda item: sha256_file(os.path.join(directory, item[0])), files))
    return {"files": [{"path": rel, "size": size, "sha256": sha} for (rel, size), sha in zip(files, hashes)]}


def total_size(manifest):
    return sum(entry["size"] for entry in manifest["files"])


def digest(manifest):
    """One sha256 for a whole manifest: equal digests, equal models."""
    canonical = json.dumps(manifest["files"], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def read(directory):
    """The manifest written in ``directory``, or None (none, or not one of ours)."""
    try:
        with open(os.path.join(directory, MANIFEST_NAME)) as f:
            found = json.load(f)
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) and isinstance(found.get("files"), list) else None


def write(directory, manifest):
    """Write ``manifest`` into ``directory`` (through a temporary file: never half a manifest)."""
    path = os.path.join(directory, MANIFEST_NAME)
    with open(path + ".tmp", "w") as f:
        json.dump(dict(manifest, digest=digest(manifest)), f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(path + ".tmp", path)


def compare(manifest, directory, deep=False, workers=None):
    """What differs between ``directory`` and ``manifest``: one line per file, naming it
    (missing, size, sha256); [] when they match. Sizes always, hashes when ``deep``."""
    problems, to_hash = [], []
    for entry in manifest["files"]:
        path = os.path.join(directory, entry["path"])
        if not os.path.isfile(path):
            problems.append("%s: missing" % entry["path"])
            continue
        size = os.path.getsize(path)
        if size != entry["size"]:
            problems.append(
                "%s: %d bytes, the manifest says %d (truncated or partial?)"
                % (entry["path"], size, entry["size"])
            )
        elif deep:
            to_hash.append(entry)
    with ThreadPoolExecutor(max_workers=workers or default_workers()) as pool:
        hashes = pool.map(lambda e: sha256_file(os.path.join(directory, e["path"])), to_hash)
        for entry, sha in zip(to_hash, hashes):
            if sha != entry["sha256"]:
                problems.append(
                    "%s: sha256 %s, the manifest says %s" % (entry["path"], sha[:12], entry["sha256"][:12])
                )
    return problems


def check(directory, deep=False):
    """(problems, manifest) of ``directory`` against its own manifest; a directory without
    one is ([], None): staged by hand, nothing to compare."""
    manifest = read(directory)
    if manifest is None:
        return [], None
    return compare(manifest, directory, deep=deep), manifest


def describe(problems, directory, limit=5):
    shown = "; ".join(problems[:limit])
    more = " (and %d more)" % (len(problems) - limit) if len(problems) > limit else ""
    return "%s does not match its manifest: %s%s" % (directory, shown, more)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["check", "build"])
    parser.add_argument("--dir", required=True)
    parser.add_argument("--deep", action="store_true", help="hash every file (check)")
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args(argv)
    if args.action == "build":
        print(json.dumps(build(args.dir, args.workers), sort_keys=True))
        return status.READY
    if not os.path.isdir(args.dir):
        return result.emit(
            status.MODEL_MISMATCH,
            "%s is not a directory" % args.dir,
            dir=args.dir,
            problems=[],
            manifest=False,
        )
    problems, manifest = check(args.dir, deep=args.deep)
    if manifest is None:
        print("%s: no manifest (not staged by sglang-deploy): nothing to compare" % args.dir)
        return result.emit(status.READY, None, dir=args.dir, problems=[], manifest=False)
    for problem in problems:
        print("model file %s" % problem)
    return result.emit(
        status.MODEL_MISMATCH if problems else status.READY,
        describe(problems, args.dir) if problems else None,
        dir=args.dir,
        problems=problems,
        manifest=True,
        files=len(manifest["files"]),
        bytes=total_size(manifest),
        deep=args.deep,
    )


if __name__ == "__main__":
    sys.exit(main())
