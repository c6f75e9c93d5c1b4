"""Download a model from the Hugging Face Hub into a model directory, pinned to a commit.

    <hf-venv>/bin/python hf_stage.py --repo ORG/NAME --revision COMMIT --dir /models/m \\
        [--token-file F] [--deep]

Run by the interpreter of the deploy's own venv holding the pinned huggingface_hub (never the
engine's). Asks the hub for the revision's files first: a revision the hub does not know fails
with the hub's answer, a disk that cannot hold what is left is named ("needs X GB, Y GB free on
host:dir") before anything is downloaded. The files go into the staging sibling
(model_stage.py; beside its target for a symlinked directory), where the hub's own download
resumes a partial file on the next run; every file is checked against the hub's size (and LFS sha256), the manifest written, and the
directory swapped into place only then. The token is read from a file, never an argument, and
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


def stage(hub, repo, revision, directory, token=None, deep=False):
    """Stage ``repo`` at ``revision`` into ``directory``; returns (status, cause, details)."""
    source = {"huggingface": {"repo": repo, "revision": revision}}
    live = model_manifest.read(directory)
    if live and live.get("source") == source and not model_manifest.compare(live, directory, deep=deep):
        return status.READY, None, {"changed": False}
    info = _hub_call(
        token, hub.HfApi().model_info, repo, revision=revision, files_metadata=True, token=token or None
    )
    expected = expected_files(info)
    staging = model_stage.staging_dir(model_stage.staged_at(directory))
    have = dict(model_manifest.listing(staging)) if os.path.isdir(staging) else {}
    need = sum(size or 0 for path, (size, _) in expected.items() if have.get(path) != size)
    free = model_stage.free_bytes(staging)
    if need > free:
        return (
            status.NO_SPACE,
            "needs %.2f GB, %.2f GB free on %s:%s"
            % (need / GB, free / GB, socket.gethostname(), os.path.dirname(staging) or "/"),
            {},
        )
    os.makedirs(staging, exist_ok=True)
    print(
        "model %s: downloading %s@%s, %.2f GB left of %.2f GB"
        % (directory, repo, revision[:12], need / GB, sum(s or 0 for s, _ in expected.values()) / GB),
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
    problems = model_stage.finish(directory)
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
    args = parser.parse_args(argv)
    token = None
    if args.token_file:
        with open(args.token_file) as f:
            token = f.read().strip() or None
        os.unlink(args.token_file)
    import huggingface_hub  # the deploy's hf venv, pinned in group_data/all.py

    try:
        code, cause, details = stage(
            huggingface_hub, args.repo, args.revision, args.dir.rstrip("/"), token=token, deep=args.deep
        )
    except HubError as exc:
        code, cause, details = status.HUB_ERROR, "the hub answered: %s" % exc, {}
    if cause:
        print("staging failed: %s" % cause, file=sys.stderr)
    return result.emit(code, cause, **details)


if __name__ == "__main__":
    sys.exit(main())
