#!/usr/bin/env python3
"""Sandbox nodes: Debian bookworm systemd-nspawn containers reachable over SSH on loopback.

    python3 sandbox/sandbox.py up [--nodes N] [--bare B] [--routers R] [--monitoring M]
                                  [--sudo-user] [--id K]
                                                create/boot node1..nodeN (idempotent): the
                                                last B of them boot from the bare image, and
                                                R more nodes are recorded with role "router",
                                                then M more with role "monitoring";
                                                --sudo-user: the deploy logs in as `deploy`
                                                and becomes root with sudo;
                                                --id K: sandbox K of several (below)
    python3 sandbox/sandbox.py down             stop every recorded node, remove per-node state
    python3 sandbox/sandbox.py status           one line per node

Each node is a real systemd host (systemd is PID 1) sharing the host's network: sshd listens on
127.0.0.1:2200+i, the deploy serves on port 30000+i. The base image is made once by debootstrap
and cached outside the repository ($SANDBOX_CACHE, default
/var/cache/sglang-deploy/sandbox/bookworm); nodes live under $SANDBOX_DIR (default
<repo>/.sandbox). `$SANDBOX_DIR/state.json` is what inventory/sandbox.py reads:

    {"key": "<abs private key>", "id": 0, "nodes": [{"name": "node1", "machine": "node1",
      "ssh_host": "127.0.0.1", "ssh_port": 2201, "ssh_user": "root", "server_port": 30001,
      "pid": 12345, "rootfs": "<abs>", "console_log": "<abs>", "bare": false, "sudo": false,
      "login_users": ["root", "deploy"]}]}

Several sandboxes run side by side (`make test-e2e` runs one per shard of the suite), each with
a directory of its own ($SANDBOX_DIR) and an id K from 1 to 9 (`up --id K` or $SANDBOX_ID;
default 0, the sandbox `make sandbox` boots): its ports are 100*K above those (sshd on
2200+100K+i, the server on 30000+100K+i, and every port the inventory derives from the server
port with it: routers', node exporters', serving groups' dist-init ports), and its containers'
machine names are sandbox<K>-node<i> (node<i> for K=0; the hosts stay node<i>). A sandbox has
at most 99 nodes in all, so no two sandboxes' ports meet. The id is recorded in the state file:
`up` refuses a directory brought up with another id; `down` stops only the nodes of its own
directory.

Every image has a second login, `deploy` (SUDO_USER): the same key, and a passwordless sudo
(/etc/sudoers.d/deploy), as the `ubuntu`/`admin` users of real GPU fleets. `up --sudo-user` (or
SANDBOX_SUDO_USER=1) records `"ssh_user": "deploy", "sudo": true`, which inventory/sandbox.py
turns into pyinfra's `_sudo`; without it the nodes are reached as root. A kept node built
before the image had the user is rebuilt when the sudo user is asked for.

A bare node (`--bare B`: the last B nodes) boots from a second cached image, `<cache>-bare`,
holding only what systemd, sshd and the deploy lock need (BARE_PACKAGES: no python3-venv,
curl, pciutils, rsync or iproute2) and no model directory: the deploy brings the rest, as on a
fresh OS install. It reaches Debian's mirror through the shared host network.

`up` keeps healthy nodes (same pids), stops and rebuilds from the image any node whose nspawn
process is gone or that does not reach `running` in time, and leaves nodes numbered above N
alone (`down` removes them). A freshly booted node that fails is left running for inspection.
`down` sends SIGTERM (a clean poweroff) only to recorded pids whose command line is
systemd-nspawn with that machine name and rootfs; a container whose nspawn was killed keeps
running re-parented to PID 1, and is found by its root directory being the node's rootfs.

Host facts this relies on (no systemd as PID 1, /run on disk): a tmpfs is mounted on
/run/systemd/nspawn, and nspawn runs with --keep-unit --register=no --console=read-only
(console output to the node's console.log, no tty needed). Every node's systemd takes inotify
instances of root's: fs.inotify.max_user_instances is raised to 1024 when lower (the default,
128, runs out at some 18 nodes, and a node then dies at boot: "Too many open files").
Environment: SANDBOX_DIR, SANDBOX_CACHE, SANDBOX_MIRROR (debootstrap mirror),
SANDBOX_BOOT_TIMEOUT (seconds, default 60), NODES (default for --nodes), SANDBOX_ID (default for
--id). Concurrent `up`s build a missing image once (the first builds it, the others wait on its
lock, and copy from it under a shared lock), and install host packages and mount the nspawn tmpfs
one at a time (a host-wide lock beside the cache).
"""

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CACHE = "/var/cache/sglang-deploy/sandbox/bookworm"
SSH_BASE_PORT = 2200
SERVER_BASE_PORT = 30000
# Sandbox K's ports are ID_PORT_STEP*K above sandbox 0's; nodes per sandbox stay below the step.
ID_PORT_STEP = 100
MAX_ID = 9
MAX_NODES = 99
# Host-wide steps concurrent `up`s take one at a time: apt-get, the nspawn tmpfs mount.
HOST_LOCK = Path(DEFAULT_CACHE).parent / ".host.lock"
# Every node's systemd takes a few inotify instances of root's (the kernel's default limit, 128,
# is some 18 nodes): raised to this for sandboxes side by side (never lowered).
INOTIFY_INSTANCES = "/proc/sys/fs/inotify/max_user_instances"
MIN_INOTIFY_INSTANCES = 1024
SSH_HOST = "127.0.0.1"
PACKAGES = "systemd,systemd-sysv,dbus,openssh-server,python3,python3-venv,curl,procps,iproute2,sudo"
# A fresh OS install: systemd as PID 1, sshd, python3 (pyinfra's facts and the deploy lock run
# it) and sudo (the login user's way to root, as on a cloud image); everything else the recipe
# needs is the deploy's job (group_data/all.py os_packages).
BARE_PACKAGES = "systemd,systemd-sysv,dbus,openssh-server,python3,sudo"
# The non-root login with a passwordless sudo that every image has (`up --sudo-user` uses it).
SUDO_USER = "deploy"
SUDOERS_LINE = f"{SUDO_USER} ALL=(ALL:ALL) NOPASSWD: ALL\n"
IMAGE_STAMP = ".sandbox-image"
# Timers that would run apt (holding the dpkg lock, reaching the network) behind a deploy's back.
MASKED_UNITS = ("apt-daily.timer", "apt-daily-upgrade.timer")
SSH_OPTS = [
    "-o",
    "StrictHostKeyChecking=no",
    "-o",
    "UserKnownHostsFile=/dev/null",
    "-o",
    "LogLevel=ERROR",
    "-o",
    "BatchMode=yes",
    "-o",
    "IdentitiesOnly=yes",
    "-o",
    "ConnectTimeout=3",
]
TINY_MODEL = {
    "config.json": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "max_position_embeddings": 512,
        "vocab_size": 1000,
        "torch_dtype": "float16",
    },
    "tokenizer_config.json": {
        "tokenizer_class": "LlamaTokenizer",
        "model_max_length": 512,
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
    },
}


class SandboxError(Exception):
    """A failure reported as `sandbox: error: ...` (one line, or a line and a log tail), exit 1."""


# ---------------------------------------------------------------- pure logic (unit-tested)


def node_record(index, sandbox_dir, pid=None, bare=False, sudo_user=False, sandbox_id=0):
    """The state entry of node `index` (1-based) of sandbox `sandbox_id` under `sandbox_dir`,
    built from an image with both logins (root and SUDO_USER); reached as the one `sudo_user`
    picks."""
    node_dir = Path(sandbox_dir).resolve() / "nodes" / f"node{index}"
    offset = ID_PORT_STEP * sandbox_id
    return login(
        {
            "name": f"node{index}",
            "machine": machine_name(index, sandbox_id),
            "ssh_host": SSH_HOST,
            "ssh_port": SSH_BASE_PORT + offset + index,
            "ssh_user": "root",
            "server_port": SERVER_BASE_PORT + offset + index,
            "pid": pid,
            "rootfs": str(node_dir / "rootfs"),
            "console_log": str(node_dir / "console.log"),
            "bare": bare,
            "login_users": ["root", SUDO_USER],
        },
        sudo_user,
    )


def machine_name(index, sandbox_id=0):
    """The container's machine name (systemd-nspawn -M): distinct across sandboxes."""
    return f"node{index}" if sandbox_id == 0 else f"sandbox{sandbox_id}-node{index}"


def machine(node):
    """A recorded node's machine name (its name, in state files from before sandbox ids)."""
    return node.get("machine") or node["name"]


def check_id(sandbox_id, count):
    """The id and node count `up` may use: every sandbox's ports stay apart from the others'."""
    if not 0 <= sandbox_id <= MAX_ID:
        raise SandboxError(f"--id must be between 0 and {MAX_ID}")
    if count > MAX_NODES:
        raise SandboxError(f"at most {MAX_NODES} nodes in all (--nodes, --routers, --monitoring)")


def recorded_id(state, path):
    """The id a state file's sandbox was brought up with (0 when it records none)."""
    value = state.get("id", 0)
    if not isinstance(value, int) or not 0 <= value <= MAX_ID:
        raise SandboxError(f"{path}: id {value!r} is not a sandbox id")
    return value


def login(node, sudo_user):
    """The node's record reached as SUDO_USER with sudo (`sudo_user`), or as root."""
    return dict(node, ssh_user=SUDO_USER if sudo_user else "root", sudo=bool(sudo_user))


def lacks_login(node, sudo_user):
    """Why a recorded node cannot be reached as asked (built before images had SUDO_USER)."""
    if sudo_user and SUDO_USER not in node.get("login_users", ["root"]):
        return f"built without the {SUDO_USER} user, sudo user wanted"
    return None


def bare_indices(count, bare):
    """The 1-based indices of the nodes that boot bare: the last `bare` of `count`."""
    if not 0 <= bare <= count:
        raise SandboxError(f"--bare must be between 0 and --nodes ({count})")
    return set(range(count - bare + 1, count + 1))


def bare_image_path(image):
    """The bare image's cache directory, beside the full one."""
    image = Path(image)
    return image.with_name(image.name + "-bare")


def node_index(name):
    """node7 -> 7."""
    if not name.startswith("node") or not name[4:].isdigit():
        raise ValueError(f"not a node name: {name!r}")
    return int(name[4:])


def read_state(path):
    """The state file's content, or an empty state when the file does not exist."""
    try:
        with open(path, encoding="utf-8") as f:
            state = json.load(f)
    except FileNotFoundError:
        return {"key": None, "nodes": []}
    except (OSError, ValueError) as exc:
        raise SandboxError(f"cannot read {path}: {exc}") from exc
    if not isinstance(state, dict) or not isinstance(state.get("nodes"), list):
        raise SandboxError(f"{path} is not a sandbox state file")
    return state


def write_state(path, key, nodes, sandbox_id=0):
    """Write the state file atomically (temp file in the same directory, then rename)."""
    path = Path(path)
    nodes = sorted(nodes, key=lambda n: node_index(n["name"]))
    fd, tmp = tempfile.mkstemp(prefix=".state.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({"key": str(key), "id": sandbox_id, "nodes": nodes}, f, indent=2)
        f.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def merge_nodes(kept, fresh):
    """Nodes by name: `fresh` entries replace `kept` ones, the others stay."""
    by_name = {n["name"]: n for n in kept}
    by_name.update({n["name"]: n for n in fresh})
    return sorted(by_name.values(), key=lambda n: node_index(n["name"]))


def listening_ports(proc_net_texts):
    """Local TCP ports in LISTEN state, from the text of /proc/net/tcp and /proc/net/tcp6."""
    ports = set()
    for text in proc_net_texts:
        for line in text.splitlines()[1:]:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "0A":
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def pid_alive(pid, proc="/proc"):
    """True if `pid` exists and is not a zombie."""
    try:
        stat = Path(proc, str(pid), "stat").read_text()
    except (OSError, TypeError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def is_node_nspawn(pid, name, rootfs, proc="/proc"):
    """True if `pid` is a live systemd-nspawn running machine `name` on directory `rootfs`."""
    if not pid or not pid_alive(pid, proc):
        return False
    try:
        argv = Path(proc, str(pid), "cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return False
    if not argv or os.path.basename(argv[0]) != "systemd-nspawn":
        return False
    pairs = set(zip(argv, argv[1:])) | {tuple(a.split("=", 1)) for a in argv if "=" in a}
    has_name = ("-M", name) in pairs or ("--machine", name) in pairs
    has_root = ("-D", rootfs) in pairs or ("--directory", rootfs) in pairs
    return has_name and has_root


def container_inits(rootfs, proc="/proc"):
    """PIDs of container init processes (PID 1 of their namespace) whose root is `rootfs`."""
    try:
        want = os.stat(rootfs)
    except OSError:
        return []
    found = []
    for entry in Path(proc).iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            nspid = next(line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:"))
            if len(nspid) < 2 or nspid[-1] != "1" or not pid_alive(entry.name, proc):
                continue
            root = os.stat(entry / "root")  # follows the link across mount namespaces
            if (root.st_dev, root.st_ino) == (want.st_dev, want.st_ino):
                found.append(int(entry.name))
        except (OSError, StopIteration):
            continue
    return found


def cgroup_leaf(node):
    """The node's own cgroup name, unique per node directory."""
    digest = hashlib.sha1(node["rootfs"].encode()).hexdigest()[:8]
    return f"sglang-sandbox-{node['name']}-{digest}"


def tracking_cgroups(leaf, mounts, self_cgroup):
    """Directories named `leaf` under this process's cgroup in every hierarchy systemd uses to
    track units (cgroup2, and the v1 name=systemd one), from /proc/mounts and /proc/self/cgroup."""
    own = {}
    for line in self_cgroup.splitlines():
        hier, controllers, path = line.split(":", 2)
        key = "cgroup2" if hier == "0" else controllers
        own.setdefault(key, path)
    dirs = {}
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        if fields[2] == "cgroup2":
            key = "cgroup2"
        elif fields[2] == "cgroup" and "name=systemd" in fields[3].split(","):
            key = "name=systemd"
        else:
            continue
        if key in own and key not in dirs:
            dirs[key] = os.path.join(fields[1], own[key].lstrip("/"), leaf)
    return list(dirs.values())


def nspawn_argv(name, rootfs):
    """The command line that boots one node (detached, console to the log file)."""
    return [
        "systemd-nspawn",
        "--keep-unit",
        "--register=no",
        "--console=read-only",
        "-D",
        str(rootfs),
        "-M",
        name,
        "-b",
    ]


# ---------------------------------------------------------------- host helpers


def run(argv, **kwargs):
    """subprocess.run with captured text output."""
    return subprocess.run(argv, capture_output=True, text=True, **kwargs)


def run_logged(argv, log):
    """Run argv in its own process group, output to `log`; the whole group dies with us."""
    with open(log, "w") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
        try:
            return proc.wait()
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise


def tail(path, lines=20):
    """Last lines of a text file, for error messages."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return "(no log)"
    text = re.sub(r"\x1b\[[0-9;]*m|\r", "", text)  # console colours, \r\r\n line ends
    return "\n".join([line for line in text.splitlines() if line.strip()][-lines:])


# Host tools the sandbox needs, and the Debian/Ubuntu packages that provide them.
HOST_TOOLS = {
    "systemd-nspawn": "systemd-container",
    "debootstrap": "debootstrap",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "cp": "coreutils",
    "chroot": "coreutils",
    "mountpoint": "util-linux",
    "rsync": "rsync",  # the controller's side of model copies (resumable) and a fan-out's roots
}


def os_release(path="/etc/os-release"):
    """The host's /etc/os-release as a dict ({} when there is none)."""
    try:
        text = Path(path).read_text()
    except OSError:
        return {}
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line)
    return {key: shlex.split(value)[0] if value.strip() else "" for key, value in pairs}


def is_apt_host(release):
    """Debian, Ubuntu or a derivative that says it is one."""
    ids = {release.get("ID", "")} | set(release.get("ID_LIKE", "").split())
    return bool(ids & {"debian", "ubuntu"}) and shutil.which("apt-get") is not None


def missing_packages(which=None):
    """Packages to install for the host tools that are not on PATH, in a stable order."""
    which = which or shutil.which
    return sorted({pkg for tool, pkg in HOST_TOOLS.items() if not which(tool)})


def install_packages(packages):
    """apt-get install, saying so; the index is refreshed first (a fresh host has none)."""
    print(f"sandbox: installing host prerequisites: {' '.join(packages)} (apt-get)", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
    ):
        res = run(argv, env=env)
        if res.returncode != 0:
            raise SandboxError(
                f"{' '.join(argv)} failed (exit {res.returncode}):\n"
                + (res.stderr or res.stdout).strip()[-2000:]
            )


def check_host():
    """Root, and the tools this needs: installed here on Debian/Ubuntu, named elsewhere."""
    if os.geteuid() != 0:
        raise SandboxError("must run as root (systemd-nspawn and debootstrap need it)")
    if not missing_packages():
        return
    with locked(HOST_LOCK):  # another sandbox's `up` may be installing them right now
        install_missing()


def install_missing():
    """Install the missing host tools' packages on Debian/Ubuntu; name them elsewhere."""
    packages = missing_packages()
    if not packages:
        return
    release = os_release()
    if not is_apt_host(release):
        tools = ", ".join(t for t in HOST_TOOLS if not shutil.which(t))
        raise SandboxError(
            f"{tools} not found on {release.get('PRETTY_NAME', 'this host')}: "
            f"install the packages that provide them (on Debian/Ubuntu: "
            f"apt-get install {' '.join(packages)})"
        )
    install_packages(packages)
    still = missing_packages()
    if still:
        raise SandboxError(f"still missing after apt-get install: {' '.join(still)}")


@contextlib.contextmanager
def locked(path, shared=False):
    """Hold a lock file for the duration of the block: exclusive, or `shared` with others."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield


def unmount_under(path):
    """Unmount whatever is mounted at or below `path` (left by an interrupted debootstrap)."""
    prefix = str(Path(path).resolve())
    with open("/proc/mounts") as f:
        points = [line.split()[1].encode().decode("unicode_escape") for line in f]
    for point in sorted((p for p in points if p == prefix or p.startswith(prefix + "/")), reverse=True):
        run(["umount", "-l", point])


def remove_tree(path):
    """Remove a directory tree that may hold a stale mount."""
    if os.path.lexists(path):
        unmount_under(path)
        shutil.rmtree(path)


def prepare_host():
    """nspawn refuses to work under a /run that is a plain disk directory; and a node whose
    systemd finds no inotify instance left dies at boot ("Too many open files")."""
    target = "/run/systemd/nspawn"
    os.makedirs(target, exist_ok=True)
    with locked(HOST_LOCK):  # one mount, whatever other sandboxes boot at the same time
        if run(["mountpoint", "-q", target]).returncode != 0:
            res = run(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", target])
            if res.returncode != 0:
                raise SandboxError(f"cannot mount tmpfs on {target}: {res.stderr.strip()}")
        raise_limit(INOTIFY_INSTANCES, MIN_INOTIFY_INSTANCES)


def raise_limit(path, minimum):
    """Raise a sysctl (a /proc/sys file) to `minimum`, saying so; never lower it."""
    with contextlib.suppress(OSError, ValueError):
        current = int(Path(path).read_text())
        if current < minimum:
            Path(path).write_text(f"{minimum}\n")
            print(f"sandbox: raised {path} from {current} to {minimum}", flush=True)


# ---------------------------------------------------------------- base image


def image_stamp(packages=PACKAGES):
    """What the cached image was built from; a different stamp means rebuild."""
    return f"debootstrap --variant=minbase --include={packages} bookworm; login {SUDO_USER} with sudo"


def add_sudo_user(rootfs):
    """SUDO_USER in the image: a home, a shell, and sudo to anything without a password (its
    authorized key is each node's: configure_sshd)."""
    res = run(["chroot", str(rootfs), "useradd", "--create-home", "--shell", "/bin/bash", SUDO_USER])
    if res.returncode != 0:
        raise SandboxError(f"adding the {SUDO_USER} user to the image failed: {res.stderr.strip()}")
    sudoers = Path(rootfs) / "etc/sudoers.d" / SUDO_USER
    sudoers.parent.mkdir(parents=True, exist_ok=True)
    sudoers.write_text(SUDOERS_LINE)
    os.chmod(sudoers, 0o440)


def image_lock(image):
    """The lock an image is built under (exclusive) and copied from under (shared)."""
    return Path(image).parent / f".{Path(image).name}.lock"


def ensure_image(image, packages=PACKAGES):
    """Build the cached base image once; an interrupted build is never used."""
    image = Path(image)
    with locked(image_lock(image)):
        stamp = image / IMAGE_STAMP
        if stamp.is_file() and stamp.read_text().strip() == image_stamp(packages):
            return image
        for stale in image.parent.glob(f".{image.name}.tmp-*"):
            remove_tree(stale)
        tmp = image.parent / f".{image.name}.tmp-{os.getpid()}"
        log = image.parent / f"{image.name}.debootstrap.log"
        print(f"building base image {image} (debootstrap, about a minute)...", flush=True)
        argv = ["debootstrap", "--variant=minbase", f"--include={packages}", "bookworm", str(tmp)]
        if os.environ.get("SANDBOX_MIRROR"):
            argv.append(os.environ["SANDBOX_MIRROR"])
        try:
            code = run_logged(argv, log)
        except BaseException:
            remove_tree(tmp)
            raise
        if code != 0:
            remove_tree(tmp)
            raise SandboxError(f"debootstrap failed (exit {code}), log {log}:\n" + tail(log))
        try:
            add_sudo_user(tmp)
        except BaseException:
            remove_tree(tmp)
            raise
        (tmp / IMAGE_STAMP).write_text(image_stamp(packages) + "\n")
        if image.exists():
            old = image.parent / f".{image.name}.tmp-old-{os.getpid()}"
            os.rename(image, old)
            remove_tree(old)
        os.rename(tmp, image)
        return image


# ---------------------------------------------------------------- one node


def ensure_key(sandbox_dir):
    """One ed25519 key pair for every node, made once."""
    key = Path(sandbox_dir).resolve() / "id_ed25519"
    if not key.is_file():
        key.with_suffix(".pub").unlink(missing_ok=True)
        res = run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sglang-deploy-sandbox", "-f", str(key)]
        )
        if res.returncode != 0:
            raise SandboxError(f"ssh-keygen failed: {res.stderr.strip()}")
    return key


def make_rootfs(image, node, pubkey):
    """A fresh copy of the image, configured as this node."""
    rootfs = Path(node["rootfs"])
    remove_tree(rootfs.parent)
    rootfs.parent.mkdir(parents=True)
    res = run(["cp", "-a", "--reflink=auto", str(image), str(rootfs)])
    if res.returncode != 0:
        raise SandboxError(f"copying the image for {node['name']} failed: {res.stderr.strip()}")
    (rootfs / IMAGE_STAMP).unlink(missing_ok=True)
    configure_identity(rootfs, node["name"])
    mask_units(rootfs)
    configure_sshd(rootfs, node["ssh_port"], pubkey)
    if not node.get("bare"):
        stage_model(rootfs)


def configure_identity(rootfs, name):
    """Hostname, /etc/hosts and a machine id of its own."""
    (rootfs / "etc/hostname").write_text(name + "\n")
    (rootfs / "etc/hosts").write_text(
        f"127.0.0.1\tlocalhost\n127.0.1.1\t{name}\n::1\tlocalhost ip6-localhost ip6-loopback\n"
    )
    (rootfs / "etc/machine-id").write_text(uuid.uuid4().hex + "\n")
    (rootfs / "etc/default/locale").write_text("LANG=C.UTF-8\n")


def mask_units(rootfs):
    """Mask the units a throwaway node must not run."""
    for unit in MASKED_UNITS:
        link = rootfs / "etc/systemd/system" / unit
        link.unlink(missing_ok=True)
        link.symlink_to("/dev/null")


def configure_sshd(rootfs, port, pubkey):
    """sshd on 127.0.0.1:port, root by key only, host keys of its own."""
    config = rootfs / "etc/ssh/sshd_config"
    header = (
        "# sglang-deploy sandbox node (first value wins in sshd_config)\n"
        f"Port {port}\nListenAddress {SSH_HOST}\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nUseDNS no\n\n"
    )
    config.write_text(header + config.read_text())
    for old in (rootfs / "etc/ssh").glob("ssh_host_*"):
        old.unlink()
    res = run(["ssh-keygen", "-A", "-f", str(rootfs)])
    if res.returncode != 0:
        raise SandboxError(f"ssh-keygen -A failed: {res.stderr.strip()}")
    authorize(rootfs, "root", pubkey)
    authorize(rootfs, SUDO_USER, pubkey)


def passwd_entry(rootfs, user):
    """(uid, gid, home) of `user` in the rootfs's /etc/passwd."""
    for line in (Path(rootfs) / "etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if len(fields) >= 7 and fields[0] == user:
            return int(fields[2]), int(fields[3]), fields[5]
    raise SandboxError(f"no user {user} in {rootfs}/etc/passwd (an image from before it: rebuild it)")


def authorize(rootfs, user, pubkey):
    """The sandbox key in `user`'s authorized_keys, owned by them (sshd's StrictModes)."""
    uid, gid, home = passwd_entry(rootfs, user)
    ssh_dir = Path(rootfs) / home.lstrip("/") / ".ssh"
    ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(ssh_dir, 0o700)
    keys = ssh_dir / "authorized_keys"
    keys.write_text(Path(pubkey).read_text())
    os.chmod(keys, 0o600)
    for path in (ssh_dir, keys):
        os.chown(path, uid, gid)


def stage_model(rootfs):
    """A tiny model directory, as an operator pre-stages weights."""
    model = rootfs / "models/tiny-standin"
    model.mkdir(parents=True, exist_ok=True)
    for name, content in TINY_MODEL.items():
        (model / name).write_text(json.dumps(content, indent=2) + "\n")


def node_cgroups(node):
    """The node's own cgroup directories on this host."""
    return tracking_cgroups(
        cgroup_leaf(node), Path("/proc/mounts").read_text(), Path("/proc/self/cgroup").read_text()
    )


def remove_cgroups(node):
    """Remove the node's (empty) cgroup directories, deepest first; busy ones stay."""
    for top in node_cgroups(node):
        for dirpath, _, _ in sorted(os.walk(top), key=lambda w: -len(w[0])):
            with contextlib.suppress(OSError):
                os.rmdir(dirpath)


def boot(node):
    """Start the node's systemd-nspawn detached, in cgroups of its own; returns its Popen.

    With --keep-unit, nspawn puts the container under the cgroup it was started in: nodes
    started from one cgroup would share `payload/system.slice/<unit>` and race on it."""
    remove_cgroups(node)
    enter = ""
    for cgroup in node_cgroups(node):
        os.makedirs(cgroup, exist_ok=True)
        enter += f"echo $$ > {shlex.quote(cgroup + '/cgroup.procs')} && "
    argv = ["sh", "-c", enter + 'exec "$@"', "sh", *nspawn_argv(machine(node), node["rootfs"])]
    log = open(node["console_log"], "ab")
    try:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    finally:
        log.close()


def ssh_argv(node, key, command):
    """ssh to a node, non-interactively."""
    return [
        "ssh",
        "-p",
        str(node["ssh_port"]),
        "-i",
        str(key),
        *SSH_OPTS,
        f"{node['ssh_user']}@{node['ssh_host']}",
        command,
    ]


def system_state(node, key):
    """`systemctl is-system-running` of the node over SSH, or "no-ssh"."""
    try:
        res = run(ssh_argv(node, key, "systemctl is-system-running"), timeout=10, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return "no-ssh"
    return res.stdout.strip() or "no-ssh"


def wait_running(nodes, key, timeout):
    """Poll every node until it reports `running`; returns {name: last state} of the others."""
    deadline = time.monotonic() + timeout
    pending = {n["name"]: n for n in nodes}
    last = {}
    with ThreadPoolExecutor(max_workers=8) as pool:
        while pending and time.monotonic() < deadline:

            def probe(n):
                return n["name"], system_state(n, key) if pid_alive(n["pid"]) else "dead"

            for name, state in pool.map(probe, list(pending.values())):
                last[name] = state
                if state == "running":
                    del pending[name]
                elif state in ("dead", "degraded", "maintenance", "stopping", "offline"):
                    pending.pop(name)
            if pending:
                time.sleep(0.5)
    return {name: last.get(name) for name in set(n["name"] for n in nodes) if last.get(name) != "running"}


def stop(node, timeout=30.0):
    """Stop a node: SIGTERM its recorded nspawn (a clean poweroff), then any orphaned container.

    Returns what was stopped, for the log ("" when nothing ran)."""
    pid, stopped = node.get("pid"), []
    if is_node_nspawn(pid, machine(node), node["rootfs"]):
        signal_and_wait(pid, signal.SIGTERM, timeout)
        stopped.append(f"nspawn pid {pid}")
    # A container whose nspawn was killed keeps running, re-parented to PID 1.
    for init in container_inits(node["rootfs"]):
        signal_and_wait(init, signal.SIGRTMIN + 4, timeout)
        stopped.append(f"orphaned container init pid {init}")
    remove_cgroups(node)
    return ", ".join(stopped)


def signal_and_wait(pid, signum, timeout):
    """Send `signum`, wait for the process to end, SIGKILL it after `timeout`."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        reap(pid)
        time.sleep(0.1)
    # A dead process that was not our child lingers as a zombie until PID 1 collects it.
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.05)


def reap(pid):
    """Collect `pid` if it is our own child (nodes booted earlier in this run)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def check_ports_free(nodes):
    """Fail before booting if someone else already listens on a node's port."""
    texts = []
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            texts.append(Path(name).read_text())
    taken = listening_ports(texts)
    for node in nodes:
        for what in ("ssh_port", "server_port"):
            if node[what] in taken:
                raise SandboxError(
                    f"port {node[what]} ({what} of {node['name']}) is already "
                    "in use by another process; free it and retry"
                )


# ---------------------------------------------------------------- commands


def env_id():
    """$SANDBOX_ID, the default of `up --id` (0 when unset)."""
    value = os.environ.get("SANDBOX_ID") or "0"
    if not value.isdigit():
        raise SandboxError(f"SANDBOX_ID={value!r}: expected a number from 0 to {MAX_ID}")
    return int(value)


def paths():
    """(sandbox dir, state file, cached image)."""
    sandbox_dir = Path(os.environ.get("SANDBOX_DIR") or REPO_ROOT / ".sandbox").resolve()
    image = Path(os.environ.get("SANDBOX_CACHE") or DEFAULT_CACHE).resolve()
    return sandbox_dir, sandbox_dir / "state.json", image


def with_roles(nodes, serving, routers=None):
    """The first `serving` nodes serve; the next `routers` (default: all the others) run
    SGLang's router (role "router", on their server port), the ones after them Prometheus
    (role "monitoring", on their server port): the sandbox inventory groups those as `routers`
    and `monitoring`."""

    def role(index):
        if index <= serving:
            return "node"
        return "router" if routers is None or index <= serving + routers else "monitoring"

    return [dict(node, role=role(node_index(node["name"]))) for node in nodes]


def cmd_up(count, bare=0, routers=0, sudo_user=False, monitoring=0, sandbox_id=0):
    """Make node1..node{count+routers+monitoring} of sandbox `sandbox_id` run, keeping the
    healthy ones: the last `bare` serving nodes boot bare, the `routers` after the serving ones
    are router nodes and the last `monitoring` of them all monitoring nodes; `sudo_user`: every
    node is reached as SUDO_USER with sudo (else as root)."""
    serving, count = count, count + routers + monitoring
    check_id(sandbox_id, count)
    check_host()
    sandbox_dir, state_file, image = paths()
    timeout = float(os.environ.get("SANDBOX_BOOT_TIMEOUT", "60"))
    sandbox_dir.mkdir(parents=True, exist_ok=True)
    with locked(sandbox_dir / ".lock"):
        key = ensure_key(sandbox_dir)
        state = read_state(state_file)
        recorded = state["nodes"]
        if recorded and recorded_id(state, state_file) != sandbox_id:
            raise SandboxError(
                f"{sandbox_dir} holds sandbox {recorded_id(state, state_file)}, not {sandbox_id}: "
                "take it down first (sandbox.py down), or bring it up with its own id"
            )
        by_name = {n["name"]: n for n in recorded}
        bares = bare_indices(serving, bare)

        def record(i, **kwargs):
            return node_record(i, sandbox_dir, bare=i in bares, sandbox_id=sandbox_id, **kwargs)

        wanted = [login(by_name.get(f"node{i}") or record(i), sudo_user) for i in range(1, count + 1)]
        rebuild = retire_unhealthy(wanted, by_name, key, min(timeout, 20), bares, sudo_user)
        if not rebuild:
            nodes = merge_nodes(recorded, with_roles(wanted, serving, routers))
            write_state(state_file, key, nodes, sandbox_id)
            print(f"{count} node(s) already running")
            return
        fresh = [record(node_index(n["name"]), sudo_user=sudo_user) for n in rebuild]
        check_ports_free(fresh)
        wanted_images = {False: (image, PACKAGES), True: (bare_image_path(image), BARE_PACKAGES)}
        images = {
            bare: ensure_image(*wanted_images[bare]) if any(n["bare"] == bare for n in fresh) else None
            for bare in (False, True)
        }
        prepare_host()
        started = time.monotonic()
        with contextlib.ExitStack() as copying:  # no rebuild of an image while nodes copy it
            for built in filter(None, images.values()):
                copying.enter_context(locked(image_lock(built), shared=True))
            booting, errors = launch_all(fresh, images, key.with_suffix(".pub"))
        nodes = merge_nodes([n for n in wanted if n not in rebuild], booting)
        write_state(state_file, key, merge_nodes(recorded, with_roles(nodes, serving, routers)), sandbox_id)
        if errors:
            raise errors[0]
        copied = time.monotonic()
        wait_booted(fresh, key, timeout)
        print(
            f"booted {', '.join(n['name'] for n in fresh)} in "
            f"{time.monotonic() - started:.1f} s (copies and launches "
            f"{copied - started:.1f} s)"
        )


def launch_all(fresh, images, pubkey):
    """Copy and boot the nodes, a few at a time (copying is disk-bound, booting is not);
    `images`: {bare: image directory}.

    Returns (the nodes launched, with their pid; the errors of the others)."""

    def launch(node):
        make_rootfs(images[bool(node.get("bare"))], node, pubkey)
        node["pid"] = boot(node).pid

    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = [pool.submit(launch, node) for node in fresh]
    errors = [f.exception() for f in futures if f.exception()]
    return [n for n in fresh if n["pid"]], errors


def retire_unhealthy(wanted, recorded, key, timeout, bares=(), sudo_user=False):
    """Stop the wanted nodes that are not running well, or not from the image asked for
    (bare or not, with the sudo user when it is wanted); returns those to (re)build."""
    other_image = {
        n["name"]: "built bare, full wanted" if n.get("bare") else "built full, bare wanted"
        for n in wanted
        if bool(n.get("bare")) != (node_index(n["name"]) in bares)
    }
    other_image.update(
        {
            n["name"]: lacks_login(n, sudo_user)
            for n in wanted
            if n["name"] not in other_image and lacks_login(n, sudo_user)
        }
    )
    # Those are rebuilt whatever their health (one without the sudo user cannot be probed as it).
    alive = [
        n
        for n in wanted
        if n["name"] not in other_image and is_node_nspawn(n.get("pid"), machine(n), n["rootfs"])
    ]
    unhealthy = wait_running(alive, key, timeout) if alive else {}
    rebuild = [n for n in wanted if n not in alive or n["name"] in unhealthy or n["name"] in other_image]
    for node in rebuild:
        stopped = stop(node)
        if stopped or node["name"] in recorded:
            why = unhealthy.get(node["name"]) or other_image.get(node["name"], "nspawn gone")
            print(f"{node['name']}: not healthy ({why}); stopped {stopped or 'nothing'}; rebuilding")
    return rebuild


def wait_booted(fresh, key, timeout):
    """Fail with the console tail of the first node that does not reach `running`."""
    failed = wait_running(fresh, key, timeout)
    if failed:
        name, last = sorted(failed.items())[0]
        node = next(n for n in fresh if n["name"] == name)
        raise SandboxError(
            f"{name} did not reach 'running' within {timeout:g} s "
            f"(last state: {last}); console {node['console_log']}:\n" + tail(node["console_log"])
        )


def cmd_down():
    """Stop every recorded node and remove per-node directories and the state file."""
    check_host()
    sandbox_dir, state_file, _ = paths()
    if not sandbox_dir.exists():
        return
    with locked(sandbox_dir / ".lock"):
        state = read_state(state_file)
        sandbox_id = recorded_id(state, state_file) if state["nodes"] else env_id()
        nodes = {n["name"]: n for n in state["nodes"]}
        for node_dir in (sandbox_dir / "nodes").glob("node*"):
            with contextlib.suppress(ValueError):
                record = node_record(node_index(node_dir.name), sandbox_dir, sandbox_id=sandbox_id)
                nodes.setdefault(node_dir.name, record)
        ordered = merge_nodes([], nodes.values())
        with ThreadPoolExecutor(max_workers=8) as pool:
            for node, stopped in zip(ordered, pool.map(stop, ordered)):
                print(f"{node['name']}: " + (f"stopped {stopped}" if stopped else "not running"))
        for node_dir in sorted((sandbox_dir / "nodes").glob("node*")):
            remove_tree(node_dir)
        state_file.unlink(missing_ok=True)


def cmd_status():
    """One line per recorded node: name, ports, pid, state."""
    _, state_file, _ = paths()
    state = read_state(state_file)
    if not state["nodes"]:
        print("no sandbox nodes (run: python3 sandbox/sandbox.py up)")
    for node in state["nodes"]:
        if not is_node_nspawn(node.get("pid"), machine(node), node["rootfs"]):
            health = "dead"
        else:
            health = system_state(node, state["key"])
        print(
            f"{node['name']}\tssh={node['ssh_host']}:{node['ssh_port']}\t"
            f"server={node['server_port']}\tpid={node['pid']}\tmachine={machine(node)}\t{health}"
        )


def main(argv=None):
    parser = argparse.ArgumentParser(prog="sandbox.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="create/boot nodes (idempotent)")
    up.add_argument(
        "--nodes",
        type=int,
        default=os.environ.get("NODES") or "1",
        help="number of nodes (default: $NODES or 1)",
    )
    up.add_argument(
        "--bare",
        type=int,
        default=0,
        metavar="B",
        help="the last B serving nodes boot from the bare image (a fresh OS: no "
        "python3-venv, curl or model directory); default 0",
    )
    up.add_argument(
        "--sudo-user",
        action="store_true",
        default=os.environ.get("SANDBOX_SUDO_USER", "") not in ("", "0"),
        help=f"reach the nodes as {SUDO_USER} with a passwordless sudo, not as root "
        "(default: $SANDBOX_SUDO_USER)",
    )
    up.add_argument(
        "--routers",
        type=int,
        default=os.environ.get("ROUTERS") or "0",
        help="router nodes after the serving ones (default: $ROUTERS or 0)",
    )
    up.add_argument(
        "--monitoring",
        type=int,
        default=os.environ.get("MONITORING") or "0",
        help="monitoring nodes (Prometheus) after the routers (default: $MONITORING or 0)",
    )
    up.add_argument(
        "--id",
        type=int,
        default=None,
        metavar="K",
        help=f"sandbox K (0-{MAX_ID}) of several side by side: ports 100*K up, machine names "
        "sandbox<K>-node<i> (default: $SANDBOX_ID or 0)",
    )
    sub.add_parser("down", help="stop nodes, remove per-node state")
    sub.add_parser("status", help="one line per node")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            if not 1 <= args.nodes <= 99:
                raise SandboxError("--nodes must be between 1 and 99")
            if not 0 <= args.routers <= 9:
                raise SandboxError("--routers must be between 0 and 9")
            if not 0 <= args.monitoring <= 9:
                raise SandboxError("--monitoring must be between 0 and 9")
            sandbox_id = env_id() if args.id is None else args.id
            cmd_up(args.nodes, args.bare, args.routers, args.sudo_user, args.monitoring, sandbox_id)
        elif args.command == "down":
            cmd_down()
        else:
            cmd_status()
    except (SandboxError, OSError) as exc:
        print(f"sandbox: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("sandbox: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
