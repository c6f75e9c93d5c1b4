"""Reading processes from /proc and /sys/fs/cgroup: process trees, command lines,
environments, cgroup members and listening TCP ports. Parsers are pure functions.

CLI: python3 procs.py tree PID | env PID | port PORT | cgroup CONTROL_GROUP
"""

import argparse
import os
import socket
import struct
import sys

PROC = "/proc"
CGROUP_ROOT = "/sys/fs/cgroup"
TCP_LISTEN = "0A"


def _read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def parse_stat(text):
    """/proc/PID/stat -> {pid, comm, state, ppid, starttime}. comm may hold spaces and ')'."""
    head, _, rest = text.rpartition(")")
    pid, _, comm = head.partition(" (")
    fields = rest.split()
    return {
        "pid": int(pid),
        "comm": comm,
        "state": fields[0],
        "ppid": int(fields[1]),
        "starttime": int(fields[19]),
    }


def read_stat(pid, proc=PROC):
    """Parsed stat of a process, or None if it is gone."""
    try:
        return parse_stat(_read("%s/%d/stat" % (proc, pid)))
    except (OSError, ValueError, IndexError):
        return None


def pids(proc=PROC):
    return [int(name) for name in os.listdir(proc) if name.isdigit()]


def ppid_map(proc=PROC):
    """{pid: ppid} of every process."""
    result = {}
    for pid in pids(proc):
        stat = read_stat(pid, proc)
        if stat:
            result[pid] = stat["ppid"]
    return result


def descendants(root, ppids=None):
    """All descendants of root (not root itself), breadth first."""
    if ppids is None:
        ppids = ppid_map()
    children = {}
    for pid, ppid in ppids.items():
        children.setdefault(ppid, []).append(pid)
    found, queue = [], [root]
    while queue:
        for child in sorted(children.get(queue.pop(0), [])):
            if child not in found and child != root:
                found.append(child)
                queue.append(child)
    return found


def parse_cmdline(data):
    """argv from /proc/PID/cmdline bytes (NUL separated; a process title may pad with spaces)."""
    return [arg for arg in data.decode("utf-8", "replace").split("\0") if arg]


def read_cmdline(pid, proc=PROC):
    try:
        return parse_cmdline(_read("%s/%d/cmdline" % (proc, pid), "rb"))
    except OSError:
        return []


def title(pid, proc=PROC, limit=None):
    """The process' command line as one line (its title, when it set one), cut to limit chars."""
    text = " ".join(" ".join(read_cmdline(pid, proc)).split())
    return text if limit is None or len(text) <= limit else text[: limit - 3] + "..."


def parse_environ(data):
    """{name: value} from /proc/PID/environ bytes."""
    env = {}
    for item in data.decode("utf-8", "replace").split("\0"):
        name, sep, value = item.partition("=")
        if sep and name:
            env[name] = value
    return env


def read_environ(pid, proc=PROC):
    """Environment the process was exec'd with. Raises OSError (e.g. PermissionError)."""
    return parse_environ(_read("%s/%d/environ" % (proc, pid), "rb"))


def alive(pid, starttime=None, proc=PROC):
    """True while the process exists and is not a zombie (and, given starttime, is the same one)."""
    stat = read_stat(pid, proc)
    if not stat or stat["state"] in ("Z", "X"):
        return False
    return starttime is None or stat["starttime"] == starttime


def _addr(hexaddr):
    raw = bytes.fromhex(hexaddr)
    words = b"".join(struct.pack("<I", struct.unpack(">I", raw[i : i + 4])[0]) for i in range(0, len(raw), 4))
    return socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, words)


def parse_net_tcp(text):
    """Rows of /proc/net/tcp or tcp6: [{addr, port, state, inode}] (state '0A' = LISTEN)."""
    rows = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10:
            continue
        hexaddr, _, hexport = fields[1].partition(":")
        rows.append(
            {"addr": _addr(hexaddr), "port": int(hexport, 16), "state": fields[3], "inode": int(fields[9])}
        )
    return rows


def listening(port, paths=(PROC + "/net/tcp", PROC + "/net/tcp6")):
    """Rows of the sockets listening on a TCP port (any address)."""
    found = []
    for path in paths:
        try:
            rows = parse_net_tcp(_read(path))
        except OSError:
            continue
        found += [row for row in rows if row["port"] == port and row["state"] == TCP_LISTEN]
    return found


def socket_owners(inodes, proc=PROC):
    """{pid: title} of processes holding any of these socket inodes (needs root for others' fds)."""
    targets = {"socket:[%d]" % inode for inode in inodes}
    owners = {}
    for pid in pids(proc):
        try:
            fds = os.listdir("%s/%d/fd" % (proc, pid))
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink("%s/%d/fd/%s" % (proc, pid, fd)) in targets:
                    owners[pid] = title(pid, proc, limit=80)
                    break
            except OSError:
                continue
    return owners


def parse_cgroup_procs(text):
    return [int(line) for line in text.split() if line.strip().isdigit()]


def cgroup_dir(control_group, root=CGROUP_ROOT):
    """Directory of a systemd ControlGroup (cgroup v2, or the v1/hybrid systemd hierarchy)."""
    if not control_group:
        return None
    for base in (root, root + "/unified", root + "/systemd"):
        path = base + control_group
        if os.path.isfile(os.path.join(path, "cgroup.procs")):
            return path
    return None


def cgroup_pids(path):
    """PIDs in a cgroup directory and all its sub-cgroups."""
    found = []
    if not path:
        return found
    for dirpath, _, filenames in os.walk(path):
        if "cgroup.procs" in filenames:
            try:
                found += parse_cgroup_procs(_read(os.path.join(dirpath, "cgroup.procs")))
            except OSError:
                continue
    return sorted(set(found))


def main(argv=None):
    parser = argparse.ArgumentParser(description="Inspect processes, ports and cgroups.")
    parser.add_argument("what", choices=("tree", "env", "port", "cgroup"))
    parser.add_argument("arg")
    args = parser.parse_args(argv)
    if args.what == "tree":
        for pid in [int(args.arg)] + descendants(int(args.arg)):
            print("%d %s" % (pid, title(pid)))
    elif args.what == "env":
        for key, value in sorted(read_environ(int(args.arg)).items()):
            print("%s=%s" % (key, value))
    elif args.what == "port":
        rows = listening(int(args.arg))
        owners = socket_owners([row["inode"] for row in rows])
        for row in rows:
            print("listening on %s port %d (inode %d)" % (row["addr"], row["port"], row["inode"]))
        for pid, name in sorted(owners.items()):
            print("held by pid %d %s" % (pid, name))
        return 0 if rows else 1
    else:
        for pid in cgroup_pids(cgroup_dir(args.arg)):
            print("%d %s" % (pid, title(pid)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
