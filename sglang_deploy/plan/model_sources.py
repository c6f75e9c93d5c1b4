"""Model staging, the controller's side: which directories a profile stages and from where,
the source's manifest (cached by size and mtime: a 600 GB source is hashed once, not every
run), what is left to copy, the free-disk verdict and the rsync command line.

The node's side is node/model_stage.py (staging directory, seed, verify and swap) and
node/model_manifest.py (the manifest); the pyinfra operation is operations/model.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from sglang_deploy.errors import DeployError
from sglang_deploy.node import model_manifest
from sglang_deploy.plan.hosts import REPO_ROOT
from sglang_deploy.profile.nccl_lint import Finding
from sglang_deploy.profile.schema import Profile, Source

CACHE_DIR = (
    Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sglang-deploy" / "model-manifests"
)
GB = 1e9


@dataclass(frozen=True)
class StagingTarget:
    role: str  # "model" or "draft model"
    path: str  # the directory on the node
    source: Source

    @property
    def controller_dir(self) -> Path | None:
        if self.source.controller is None:
            return None
        found = Path(self.source.controller)
        return found if found.is_absolute() else REPO_ROOT / found


@dataclass(frozen=True)
class HubClient:
    """How a node downloads a Hub source (node/hf_stage.py)."""

    python: str  # the Hub client venv's interpreter
    run_dir: str  # the token file lives under it, 0700, for one command
    token: str | None = field(default=None, repr=False)  # the profile's HF_TOKEN secret


def manifest_source(target: StagingTarget) -> dict:
    """The `source` a staged manifest records for ``target`` (the swap takes only this one)."""
    if target.source.kind == "huggingface":
        hub = target.source.huggingface
        return {"huggingface": {"repo": hub.repo, "revision": hub.revision}}
    return {"controller": str(target.controller_dir)}


def served_dirs(profile: Profile) -> list[str]:
    """Every model directory the profile serves (the last known good records their digests)."""
    return list(dict.fromkeys(filter(None, [profile.model.path, profile.draft_path])))


def targets(profile: Profile) -> list[StagingTarget]:
    """The directories this profile stages, each once (EAGLE-3's draft may be the model)."""
    found = [StagingTarget("model", profile.model.path, profile.model.source)]
    draft = profile.draft_path
    if draft and profile.model.draft_source.kind != "path":
        found.append(StagingTarget("draft model", draft, profile.model.draft_source))
    staged, unique = set(), []
    for target in found:
        if target.source.kind != "path" and target.path not in staged:
            staged.add(target.path)
            unique.append(target)
    return unique


def lint_sources(profile: Profile) -> list[Finding]:
    """Source problems the schema cannot see: a draft source with no draft path, one node
    directory with two different sources, a missing controller directory."""
    out = []
    draft_kind = profile.model.draft_source.kind
    if draft_kind != "path" and not profile.draft_path:
        out.append(
            Finding("error", "model.draft_source", "set, but server_args has no speculative-draft-model-path")
        )
    if (
        profile.draft_path == profile.model.path
        and draft_kind != "path"
        and profile.model.draft_source != profile.model.source
    ):
        out.append(
            Finding(
                "error",
                "model.draft_source",
                "the draft model is the model's directory: it cannot have another source",
            )
        )
    for target in targets(profile):
        local = target.controller_dir
        if local is not None and not local.is_dir():
            out.append(
                Finding("error", f"{target.role} source", f"controller directory {local} does not exist")
            )
    return out


def local_manifest(directory: Path, cache_dir: Path = CACHE_DIR) -> dict:
    """The manifest of a controller-side directory; files whose size and mtime are those of
    the cache's entry keep their cached sha256, the others are hashed again."""
    directory = Path(directory).resolve()
    cache_file = cache_dir / (hashlib.sha256(str(directory).encode()).hexdigest()[:32] + ".json")
    try:
        cached = {e["path"]: e for e in json.loads(cache_file.read_text())["files"]}
    except (OSError, ValueError, KeyError, TypeError):
        cached = {}
    files = []
    for rel, size in model_manifest.listing(str(directory)):
        # rsync reads the names to copy one a line, and a result line or a log line with a
        # control character in a name would not say what it means: refused, not mangled.
        # Spaces, quotes and `$(...)` are fine: every command quotes them.
        if any(ord(c) < 0x20 or c == "\x7f" for c in rel):
            raise DeployError(
                f"model file {rel!r} in {directory}: a control character (newline, tab...) in its name"
            )
        mtime = os.stat(directory / rel).st_mtime_ns
        old = cached.get(rel)
        if old and old.get("size") == size and old.get("mtime_ns") == mtime:
            sha = old["sha256"]
        else:
            sha = model_manifest.sha256_file(str(directory / rel))
        files.append({"path": rel, "size": size, "sha256": sha, "mtime_ns": mtime})
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        cache_file.write_text(json.dumps({"dir": str(directory), "files": files}))
    except OSError:
        pass  # a read-only home: hashing again next time is only slower
    return {"files": [{k: e[k] for k in ("path", "size", "sha256")} for e in files]}


def to_copy(manifest: dict, node_state: dict, repairing: bool = False) -> list[dict]:
    """The manifest's entries the node still needs: not in its staging directory with their
    size, and not kept from the live directory (same entry in its manifest, file intact)."""
    staged = {path: size for path, size in node_state.get("staged", [])}
    live = {(e["path"], e["size"], e["sha256"]) for e in node_state.get("live_files", [])}
    bad = {p.split(":", 1)[0] for p in node_state.get("problems", [])}
    need = []
    for entry in manifest["files"]:
        if staged.get(entry["path"]) == entry["size"]:
            continue
        if (entry["path"], entry["size"], entry["sha256"]) in live and entry["path"] not in bad:
            continue
        need.append(entry)
    return need


def disk_problem(host_name: str, directory: str, need: list[dict], free: int) -> str | None:
    """ "needs X GB, Y GB free on host:dir" when what is left to copy does not fit."""
    needed = sum(entry["size"] for entry in need)
    if needed <= free:
        return None
    return (
        f"needs {needed / GB:.2f} GB, {free / GB:.2f} GB free on {host_name}:"
        f"{os.path.dirname(directory.rstrip('/')) or '/'}"
    )


def rsync_argv(ssh: list[str], target: str, local_dir: Path, staging: str) -> list[str]:
    """rsync of the files named on stdin (--files-from=-) into the node's staging directory:
    resumable (--partial-dir keeps a half-sent file for the next run), with overall progress.
    -s (--secluded-args, once --protect-args) sends the staging path and the names through
    rsync's protocol, not the node's shell: an rsync before 3.2.4 passes them unescaped, so a
    space splits the path and `$(...)` would run there."""
    return [
        "rsync",
        "-s",
        "--archive",
        "--partial",
        "--partial-dir=.rsync-partial",
        "--info=progress2",
        "--no-inc-recursive",
        "--files-from=-",
        "--rsh",
        shlex.join(ssh),
        f"{local_dir}/",
        f"{target}:{staging}/",
    ]


def require_dir(directory: Path | None, role: str) -> Path:
    if directory is None or not directory.is_dir():
        raise DeployError(f"{role}: controller directory {directory} does not exist")
    return directory
