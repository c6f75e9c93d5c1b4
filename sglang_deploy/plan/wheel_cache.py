"""The controller's wheel cache: every wheel a wheelhouse downloaded, kept outside the checkout
(build/ goes with `make clean`, and CI runs in a fresh clone), so a wheelhouse is filled again
without downloading what was downloaded once. A wheel is taken from it only when the lock
accepts its sha256, so one cache serves every checkout and every lock.

    $SGLANG_DEPLOY_WHEEL_CACHE (default ~/.cache/sglang-deploy/wheels)
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

CACHE = Path(
    os.environ.get("SGLANG_DEPLOY_WHEEL_CACHE") or Path.home() / ".cache" / "sglang-deploy" / "wheels"
)


def place(source: Path, directory: Path) -> Path:
    """``source`` copied into ``directory`` under its name. A copy, not a hard link: a file
    overwritten in place in a wheelhouse must not change the cache's."""
    target = Path(directory) / Path(source).name
    Path(directory).mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, target)
    return target


def keep(paths, cache: Path = CACHE) -> None:
    """Put downloaded wheels in the cache."""
    for path in paths:
        place(path, cache)
