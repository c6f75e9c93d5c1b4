"""Download a model from the Hugging Face Hub into a model directory, pinned to a commit.

    <hf-venv>/bin/python hf_stage.py --repo ORG/NAME --revision COMMIT --dir /models/m \\
        [--token-file F] [--deep]

Run by the interpreter of the deploy's own venv holding the pinned huggingface_hub (never the
engine's). Asks the hub for the revision's files first: a revision the hub does not know fails
with the hub's answer, a disk that cannot hold what is left is named ("needs X GB, Y GB free on
host:dir") before anything is downloaded. The files go into the staging sibling (model_stage.py;
beside its target for a symlinked directory), where the hub's own download resumes a partial
file on the next run. A file the served copy has unchanged (the hub's LFS sha256, its etag, is
the live manifest's, at the same path) is hard-linked from it first (model_stage.link_unchanged)
and not downloaded again: the hub's download hashes a file it finds against that sha256 and
keeps it. Every file is checked against the hub's size (and LFS sha256), the manifest written
and the staging directory verified (model_stage.py finish): the restart cycle swaps it in after
preflight (`--in-place`, model_keep_previous: false: now, the old weights removed first where
the disk cannot hold both). A verified staged copy of this revision left by a deploy that died
is not downloaded again: it still waits. The token is read from a file, never an argument, and
never printed (the hub's messages are scrubbed of it).
"""

import argparse
import os
import shutil
import socket
import sys

if __package__:
    from . import model_manifest, model_stage
    from .lib import result, status
    from .lib.guard import guarded
else:  # run as a script: our scripts' directory is on sys.path
    import model_manifest
    import model_stage
    from lib import result, status
    from lib.guard import guarded

GB = 1e9


class HubError(Exception):
    """The hub's answer, in one line, scrubbed of the token."""


def _hub_call(secret, call, *args, **kwargs):
    try:
        return call(*args, **kwargs)
    except Exception as exc:  # the hub's own error classes, whatever this release calls them
        text = " ".join(str(exc).split())
        if secret:
            text = text.replace(secret, "***")
        raise HubError("%s: %s" % (type(exc).__name__, text)) from None


def expected_files(info):
    """{path: (size, sha256 or None)} of a revision, from the hub's file metadata."""
    found = {}
    for sibling in info.siblings or []:
        lfs = getattr(sibling, "lfs", None)
        sha = getattr(lfs, "sha256", None) if lfs is not None else None
        found[sibling.rfilename] = (sibling.size, sha)
    return found


def stage(hub, repo, revision, directory, token=None, deep=False, in_place=False, now=False):
    """Stage ``repo`` at ``revision`` into ``directory``; returns (status, cause, details)."""
    source = {"huggingface": {"repo": repo, "revision": revision}}
    model_stage.settle(directory)  # a mount point's swap killed halfway: finished first
    live = model_manifest.read(directory)
    if live and live.get("source") == source and not model_manifest.compare(live, directory, deep=deep):
        return status.READY, None, {"changed": False}
    waiting = model_stage.pending(directory)
    if waiting and waiting.get("source") == source:  # staged by a run that died before its restart
        if in_place or now:
            model_stage.finish(directory, in_place=in_place, now=now)
        print("model %s: %s@%s staged and verified, waits for the restart" % (directory, repo, revision[:12]))
        return status.READY, None, {"changed": True, "pending": True}
    info = _hub_call(
        token, hub.HfApi().model_info, repo, revision=revision, files_metadata=True, token=token or None
    )
    expected = expected_files(info)
    staging = model_stage.staging_of(directory)
    # A file whose LFS sha256 (the hub's etag for it) is the live copy's is not downloaded again:
    # linked into the staging directory, where the hub's download hashes it and keeps it.
    hashed = {path: entry for path, entry in expected.items() if entry[1] and entry[0] is not None}
    reused = model_stage.link_unchanged(directory, hashed, deep=deep)
    have = dict(model_manifest.listing(staging)) if os.path.isdir(staging) else {}
    need = sum(size or 0 for path, (size, _) in expected.items() if have.get(path) != size)
    free = model_stage.free_bytes(staging)
    previous = model_stage.previous_dir(directory)
    if os.path.isdir(previous):  # the weights an earlier swap replaced: the next swap drops them
        free += model_stage.own_bytes(previous)
    if need > free and in_place:  # no two copies: the live weights go first, no weight rollback
        model_stage.drop_live(directory)
        free = model_stage.free_bytes(staging)
    if need > free:
        return (
            status.NO_SPACE,
            "needs %.2f GB, %.2f GB free on %s:%s: the new weights are staged beside the served ones "
            "(kept for a rollback); `model_keep_previous: false` replaces them in place instead "
            "(no weight rollback)"
            % (need / GB, free / GB, socket.gethostname(), os.path.dirname(staging) or "/"),
            {},
        )
    if os.path.isdir(previous):
        shutil.rmtree(previous)
    os.makedirs(staging, exist_ok=True)
    print(
        "model %s: downloading %s@%s, %.2f GB left of %.2f GB%s"
        % (
            directory,
            repo,
            revision[:12],
            need / GB,
            sum(s or 0 for s, _ in expected.values()) / GB,
            ", %d unchanged file(s) kept from the live copy" % len(reused) if reused else "",
        ),
        flush=True,
    )
    _hub_call(token, hub.snapshot_download, repo, revision=revision, local_dir=staging, token=token or None)
    shutil.rmtree(os.path.join(staging, ".cache"), ignore_errors=True)
    manifest = model_manifest.build(staging)
    got = {e["path"]: e for e in manifest["files"]}
    problems = []
    for path, (size, sha) in sorted(expected.items()):
        entry = got.get(path)
        if entry is None:
            problems.append("%s: missing after the download" % path)
        elif size is not None and entry["size"] != size:
            problems.append("%s: %d bytes, the hub says %d" % (path, entry["size"], size))
        elif sha and entry["sha256"] != sha:
            problems.append("%s: sha256 %s, the hub says %s" % (path, entry["sha256"][:12], sha[:12]))
    if problems:
        for problem in problems:  # the next run downloads them again
            path = os.path.join(staging, problem.split(":", 1)[0])
            if os.path.isfile(path):
                os.unlink(path)
        return status.MODEL_MISMATCH, model_manifest.describe(problems, staging), {}
    model_manifest.write(staging, dict(manifest, source=source))
    problems = model_stage.finish(directory, in_place=in_place, now=now)
    if problems:
        return status.MODEL_MISMATCH, model_manifest.describe(problems, staging), {}
    return (
        status.READY,
        None,
        {"changed": True, "files": len(manifest["files"]), "bytes": model_manifest.total_size(manifest)},
    )


@guarded
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", required=True)
    parser.add_argument("--revision", required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--token-file", help="a file holding HF_TOKEN (removed after reading)")
    parser.add_argument("--deep", action="store_true", help="hash the live files too (repair)")
    parser.add_argument(
        "--in-place", action="store_true", help="model_keep_previous: false: swap now, no old weights kept"
    )
    parser.add_argument("--now", action="store_true", help="swap now (a serving group's member)")
    args = parser.parse_args(argv)
    token = None
    if args.token_file:
        with open(args.token_file) as f:
            token = f.read().strip() or None
        os.unlink(args.token_file)
    import huggingface_hub  # the deploy's hf venv, pinned in group_data/all.py

    try:
        code, cause, details = stage(
            huggingface_hub,
            args.repo,
            args.revision,
            args.dir.rstrip("/"),
            token=token,
            deep=args.deep,
            in_place=args.in_place,
            now=args.now,
        )
    except HubError as exc:
        code, cause, details = status.HUB_ERROR, "the hub answered: %s" % exc, {}
    if cause:
        print("staging failed: %s" % cause, file=sys.stderr)
    return result.emit(code, cause, **details)


if __name__ == "__main__":
    sys.exit(main())
