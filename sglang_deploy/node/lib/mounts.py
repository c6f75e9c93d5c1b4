"""Mount points as the kernel lists them (/proc/self/mountinfo), which os.path.ismount cannot
tell: a bind mount of a directory of the same filesystem has its parent's st_dev, yet it can
no more be renamed than any other mount point (rename(2) answers EBUSY).

Standard library only, Python >= 3.9.
"""

import os

MOUNTINFO = "/proc/self/mountinfo"


def _unescape(field):
    """mountinfo's octal escapes (space \\040, tab \\011, newline \\012, backslash \\134)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mount_points(mountinfo=MOUNTINFO):
    """Every mount point of this process's mount namespace (empty when unreadable)."""
    try:
        with open(mountinfo) as f:
            lines = f.read().splitlines()
    except OSError:
        return set()
    return {_unescape(line.split()[4]) for line in lines if len(line.split()) > 4}


def is_mount_point(path, mountinfo=MOUNTINFO):
    """Whether ``path`` (links resolved) is where something is mounted."""
    real = os.path.realpath(path)
    return os.path.ismount(real) or real in mount_points(mountinfo)
