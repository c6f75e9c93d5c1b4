"""Reproducible wheels: the same files give the same bytes, whenever and wherever built.

A wheel is a zip; what a build puts in it besides the files (entry order, timestamps, modes
that follow the umask of a checkout) changes every build, so an unchanged engine would be
re-uploaded on every deploy and `--diff` would see a changed file. Rewriting the zip with
those fixed is enough: RECORD hashes file contents only, so it stays valid.

    python3 -m sglang_deploy.wheel_normal build/wheels/*.whl
"""

from __future__ import annotations

import os
import sys
import tempfile
import zipfile

# The earliest time a zip can hold (DOS dates start in 1980).
FIXED_TIME = (1980, 1, 1, 0, 0, 0)


def entry_order(name: str):
    """Package files by name, then the .dist-info files, RECORD last (as wheel tools do)."""
    top = name.split("/", 1)[0]
    return (top.endswith(".dist-info"), name.endswith(".dist-info/RECORD"), name)


def normalise(path) -> None:
    """Rewrite the wheel at `path` in place: sorted entries, fixed time, 0644 (0755 where the
    file was executable), deflate at level 9."""
    with zipfile.ZipFile(path) as source:
        entries = [(info, source.read(info)) for info in source.infolist() if not info.is_dir()]
    directory = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(dir=directory, suffix=".whl")
    os.close(fd)
    try:
        with zipfile.ZipFile(temporary, "w") as target:
            for info, data in sorted(entries, key=lambda entry: entry_order(entry[0].filename)):
                executable = (info.external_attr >> 16) & 0o111
                fixed = zipfile.ZipInfo(info.filename, date_time=FIXED_TIME)
                fixed.compress_type = zipfile.ZIP_DEFLATED
                fixed.create_system = 3  # Unix, so the mode below is read
                fixed.external_attr = (0o100755 if executable else 0o100644) << 16
                target.writestr(fixed, data, compresslevel=9)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def main(argv=None) -> int:
    paths = sys.argv[1:] if argv is None else argv
    for path in paths:
        normalise(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
