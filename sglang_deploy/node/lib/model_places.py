"""Where a model directory's weights are staged and kept on the node (model_stage.py): the
staging and previous copies beside the directory, beside a symlink's target, or inside a
mount point (which cannot be renamed). Standard library only."""

import os

from . import mounts

STAGING_SUFFIX = ".sglang-deploy-staging"
OLD_SUFFIX = ".sglang-deploy-old"  # what earlier releases swapped out (removed when found)
PREVIOUS_SUFFIX = ".sglang-deploy-previous"
VERIFIED = "verified"  # the staged manifest's key once finish has hashed every file
RESERVED = (STAGING_SUFFIX, PREVIOUS_SUFFIX, "lost+found")  # a mount point's that are no model's


def staged_at(directory):
    """Where ``directory`` is staged and swapped: itself, or the target of a symlink there
    (the link stays; its target is replaced)."""
    directory = directory.rstrip("/") or "/"
    return os.path.realpath(directory) if os.path.islink(directory) else directory


def staging_dir(directory):
    """The staging sibling of ``directory`` as named (a path only: the controller asks it too;
    on the node, ``staging_of``, which knows the layout)."""
    return directory.rstrip("/") + STAGING_SUFFIX


def nested(target):
    """Whether ``target`` keeps its staging and previous copies inside itself: a mount point
    (rename(2) of it fails with EBUSY, and a sibling lies on another filesystem)."""
    return os.path.isdir(target) and mounts.is_mount_point(target)


def _place(target, suffix):
    return os.path.join(target, suffix) if nested(target) else target + suffix


def staging_of(directory):
    """Where ``directory``'s new weights are staged on this node: on the filesystem the swap
    renames on (beside a symlink's target; inside a mount point)."""
    return _place(staged_at(directory), STAGING_SUFFIX)


def layout_problem(directory):
    """Why ``directory`` cannot be staged on its own filesystem, or None."""
    target = staged_at(directory)
    if os.path.dirname(target) == target:
        return "%s is the root directory: a model needs a directory of its own" % directory
    for place in (_place(target, STAGING_SUFFIX), _place(target, PREVIOUS_SUFFIX)):
        if os.path.isdir(place) and mounts.is_mount_point(place):
            return "%s is a mount point: the weights cannot be renamed in or out of it" % place
    return None


def previous_dir(directory):
    """Where the weights the swap replaced wait until the new ones are recorded."""
    return _place(staged_at(directory), PREVIOUS_SUFFIX)
