"""Restart an SGLang unit cleanly: stop it, wait until the old process tree is gone, the
port is free and (when nvidia-smi exists) no old process holds GPU memory; then start it.
The readiness gate (gate.py) runs separately afterwards.

    python3 restart.py --unit sglang.service --port 30000 --stop-timeout 150 [--no-start]

One line per step, with seconds since the script started:
    [   0.0s] stopping sglang.service: active/running, main pid 1234, 11 processes
    [   4.1s] systemctl stop returned: inactive/dead
    [   4.3s] old processes gone
    [   4.3s] port 30000 free
    [   4.5s] GPU memory of old processes released
    [   4.6s] starting sglang.service
    [   4.7s] started sglang.service: main pid 5678, invocation 3f2a...
On failure: '[ 120.0s] stop timeout: still there: pids 1240 (sglang::scheduler_TP3); port
30000 listening (pid 1234 python3 -m sglang.launch_server ...); GPU memory held by pid 1240
(70120 MiB)'. Once the old processes are gone, a port still held by another process, or by
none this node can see (another network namespace), fails within seconds: '[   6.4s] failed:
port 30000 is held by pid 777 (python3 -m http.server 30000), not by sglang.service'. Exit status: see status.py (READY, STOP_TIMEOUT, FAILED_START, LOCKED).
"""

import argparse
import fcntl
import shutil
import subprocess
import sys
import time

if __package__:
    from .lib import compute_apps, procs, result, status, systemd
else:  # run as a script: our scripts' directory is on sys.path
    from lib import compute_apps, procs, result, status, systemd


def gpu_apps(nvidia_smi):
    """Compute apps on the GPUs, or None when nvidia-smi cannot tell."""
    try:
        proc = subprocess.run(
            [nvidia_smi] + compute_apps.QUERY,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return compute_apps.parse_compute_apps(proc.stdout) if proc.returncode == 0 else None


def _mib(used):
    return "%s MiB" % used if used is not None else "memory unknown"


class Restart:
    def __init__(self, args):
        self.args = args
        self.t0 = time.monotonic()

    def say(self, text):
        print("[%6.1fs] %s" % (time.monotonic() - self.t0, text), flush=True)

    def end(self, code, text):
        """Say the last step, then the result line: on failure that step is the cause."""
        self.say(text)
        return result.emit(code, None if code == status.READY else text)

    def leftovers(self, old, cgroup):
        """(pids still alive, listening rows, [(pid, MiB)] GPU apps of old pids or None if unknown)."""
        alive = [pid for pid, start in sorted(old.items()) if procs.alive(pid, start)]
        alive += [pid for pid in procs.cgroup_pids(cgroup) if pid not in alive]
        rows = procs.listening(self.args.port)
        gpu = None
        if self.nvidia_smi:
            apps = gpu_apps(self.nvidia_smi)
            gpu = [app for app in apps if app[0] in old] if apps is not None else None
        return alive, rows, gpu

    def describe(self, alive, rows, gpu):
        parts = []
        if alive:
            parts.append(
                "pids " + ", ".join("%d (%s)" % (pid, procs.title(pid, limit=80) or "?") for pid in alive)
            )
        if rows:
            owners = procs.socket_owners([row["inode"] for row in rows])
            held = ", ".join("pid %d %s" % kv for kv in sorted(owners.items())) or "owner unknown"
            parts.append("port %d listening (%s)" % (self.args.port, held))
        if gpu:
            parts.append("GPU memory held by " + ", ".join("pid %d (%s)" % (p, _mib(u)) for p, u in gpu))
        return "; ".join(parts)

    def foreign_holder(self, old, rows):
        """Why the port is held by something our stop does not end, or None: a process that
        is not one of the unit's, or none this node can see (another network namespace)."""
        if not rows:
            return None
        owners = procs.socket_owners([row["inode"] for row in rows])
        if not owners:
            return (
                "port %d is listening but no process on this node owns it "
                "(another network namespace or container?)" % self.args.port
            )
        strangers = {pid: name for pid, name in owners.items() if pid not in old}
        if strangers:
            return "port %d is held by %s, not by %s" % (
                self.args.port,
                ", ".join("pid %d (%s)" % item for item in sorted(strangers.items())),
                self.args.unit,
            )
        return None

    def run(self):
        a = self.args
        if a.lock:
            self.lock_file = open(a.lock, "a")
            try:
                fcntl.flock(self.lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return self.end(status.LOCKED, "locked: another restart holds %s" % a.lock)
        self.nvidia_smi = shutil.which(a.nvidia_smi)
        show = systemd.unit_show(a.unit, systemctl=a.systemctl)
        main_pid = systemd.as_int(show.get("MainPID"))
        cgroup = procs.cgroup_dir(show.get("ControlGroup", ""))
        pids = set(procs.cgroup_pids(cgroup)) | (
            {main_pid} | set(procs.descendants(main_pid)) if main_pid else set()
        )
        old = {pid: stat["starttime"] for pid, stat in ((p, procs.read_stat(p)) for p in pids) if stat}
        state = "%s/%s" % (show.get("ActiveState"), show.get("SubState"))
        deadline = self.t0 + a.stop_timeout
        if show.get("ActiveState") in ("inactive", "failed") and not old:
            self.say("%s is %s: nothing to stop" % (a.unit, state))
        else:
            self.say("stopping %s: %s, main pid %d, %d processes" % (a.unit, state, main_pid, len(old)))
            try:
                proc = systemd.systemctl(
                    ["stop", a.unit], a.systemctl, timeout=max(1.0, deadline - time.monotonic())
                )
            except subprocess.TimeoutExpired:
                left = self.describe(*self.leftovers(old, cgroup)) or "nothing left"
                return self.end(
                    status.STOP_TIMEOUT,
                    "stop timeout: systemctl stop %s did not return "
                    "within %ss; still there: %s" % (a.unit, a.stop_timeout, left),
                )
            if proc.returncode != 0:
                return self.end(
                    status.UNEXPECTED,
                    "systemctl stop failed (status %d): %s" % (proc.returncode, proc.stderr.strip()),
                )
            after = systemd.unit_show(a.unit, ("ActiveState", "SubState"), systemctl=a.systemctl)
            self.say("systemctl stop returned: %s/%s" % (after.get("ActiveState"), after.get("SubState")))
        if not self.nvidia_smi:
            self.say("nvidia-smi not found: GPU memory check skipped")
        done = set()
        procs_gone_at = None
        while True:
            alive, rows, gpu = self.leftovers(old, cgroup)
            procs_gone_at = None if alive else procs_gone_at or time.monotonic()
            foreign = self.foreign_holder(old, rows) if procs_gone_at else None
            if foreign and time.monotonic() - procs_gone_at >= a.foreign_grace:
                # Waiting out the stop timeout would release nothing: it is not ours.
                return self.end(status.STOP_TIMEOUT, "failed: %s" % foreign)
            for key, ok, text in (
                ("procs", not alive, "old processes gone"),
                ("port", not rows, "port %d free" % a.port),
                (
                    "gpu",
                    self.nvidia_smi and gpu is not None and not gpu,
                    "GPU memory of old processes released",
                ),
            ):
                if ok and key not in done:
                    done.add(key)
                    self.say(text)
            if self.nvidia_smi and gpu is None and "gpu" not in done:
                done.add("gpu")
                self.say("nvidia-smi failed: GPU memory check skipped")
            if not alive and not rows and not gpu:
                break
            if time.monotonic() >= deadline:
                return self.end(
                    status.STOP_TIMEOUT, "stop timeout: still there: " + self.describe(alive, rows, gpu)
                )
            time.sleep(a.poll)
        if self.nvidia_smi:
            others = [app for app in gpu_apps(self.nvidia_smi) or [] if app[0] not in old]
            if others:
                self.say(
                    "note: GPU memory held by other processes: "
                    + ", ".join(
                        "pid %d %s (%s)" % (p, procs.title(p, limit=80) or "?", _mib(u)) for p, u in others
                    )
                )
        if not a.start:
            return self.end(status.READY, "stopped; not starting (--no-start)")
        self.say("starting %s" % a.unit)
        proc = systemd.systemctl(["start", a.unit], a.systemctl, timeout=a.start_timeout)
        show = systemd.unit_show(a.unit, systemctl=a.systemctl)
        if proc.returncode != 0:
            return self.end(
                status.FAILED_START,
                "start failed: %s (unit %s/%s, %s)"
                % (
                    proc.stderr.strip().splitlines()[-1]
                    if proc.stderr.strip()
                    else "systemctl start status %d" % proc.returncode,
                    show.get("ActiveState"),
                    show.get("SubState"),
                    systemd.describe_exit(show),
                ),
            )
        return self.end(
            status.READY,
            "started %s: main pid %s, invocation %s"
            % (a.unit, show.get("MainPID"), show.get("InvocationID")),
        )


def main(argv=None):
    p = argparse.ArgumentParser(
        description="Stop a unit, wait for its processes, port and GPU memory, start it."
    )
    p.add_argument("--unit", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument(
        "--stop-timeout",
        type=float,
        required=True,
        help="seconds for the stop and the release of processes, port and GPU memory",
    )
    p.add_argument("--start", action="store_true", default=True, help="start the unit afterwards (default)")
    p.add_argument("--no-start", dest="start", action="store_false", help="only stop and wait")
    p.add_argument("--start-timeout", type=float, default=120.0, help="timeout of `systemctl start`")
    p.add_argument("--lock", metavar="FILE", help="hold an exclusive lock on FILE (exit LOCKED if taken)")
    p.add_argument("--poll", type=float, default=0.2, help=argparse.SUPPRESS)
    p.add_argument("--foreign-grace", type=float, default=2.0, help=argparse.SUPPRESS)
    p.add_argument("--systemctl", default=systemd.SYSTEMCTL)
    p.add_argument("--nvidia-smi", default="nvidia-smi")
    return Restart(p.parse_args(argv)).run()


if __name__ == "__main__":
    sys.exit(main())
