"""Command lines of the scripts that run one service's lifecycle on the node: its deploy lock,
its detached restart cycles, its gate, its workers' check, its last known good, the boot-time
ACS unit and the GPU persistence check (built by builder.script)."""

import json
import posixpath

from sglang_deploy.plan.commands.builder import inline, optional, script, script_path


def acs_command(directory):
    """acs.py disable, as the boot-time ACS unit runs it (facts/gpu.py renders the unit)."""
    return script("/usr/bin/python3", directory, "acs.py", "disable")


def persistence_check_command(directory):
    """node/lib/gpu_settings.py persistence: exit 1 naming the GPUs whose persistence mode is off."""
    return script("python3", directory, "lib/gpu_settings.py", "persistence")


def secret_args_argv(directory, path, secret_server_args):
    """secret_args.py as the unit's ExecStartPre= runs it (words, for systemd's quoting):
    ``secret_server_args`` ({argument: variable}) from the env file into ``path`` (--config)."""
    pairs = [("--arg", f"{argument}={name}") for argument, name in sorted(secret_server_args.items())]
    program = script_path(directory, "secret_args.py")
    return ["/usr/bin/python3", program, "--out", path, *[word for pair in pairs for word in pair]]


def lock_command(path, wait_s, holder, directory=None, source=None, cycles_dir=None):
    """lock.py, holding the node's deploy lock while its session lasts; ``source``: lock.py's
    text, run with ``-c`` (the deploy takes the lock before it uploads our scripts);
    ``cycles_dir``: the service's detached restart cycles, one still running keeps the lock."""
    args = ("--path", path, "--wait", float(wait_s), "--holder", holder)
    args += (*optional(cycles_dir, "--cycles-dir", cycles_dir),)
    if source is not None:
        return inline(source, *args)
    return script("python3", directory, "lock.py", *args)


def cycles_dir(run_dir, service):
    """Where a service's detached restart cycles keep their files (node/detach.py)."""
    return posixpath.join(run_dir, service)


def cycles_dir_of_lock(lock_path):
    """The cycles directory of the service whose deploy lock is ``lock_path`` (RUN_DIR/SERVICE.lock)."""
    run_dir, name = posixpath.split(lock_path)
    return cycles_dir(run_dir, name[: -len(".lock")] if name.endswith(".lock") else name)


def detach_start_command(directory, cycles, service, cycle_id, profile, command, stop_timeout=None):
    """detach.py start: ``command`` (a restart cycle) as a transient systemd unit of its own;
    ``stop_timeout``: seconds a stop of that unit leaves it to end (detach.py's default: 30)."""
    args = [
        "--dir",
        cycles,
        "--service",
        service,
        "--id",
        cycle_id,
        "--profile",
        profile,
        "--command",
        command,
        *optional(stop_timeout, "--stop-timeout", stop_timeout),
    ]
    return script("python3", directory, "detach.py", "start", *args)


def detach_follow_command(directory, cycles, cycle_id, offset, for_s):
    """detach.py follow: the cycle's progress from byte ``offset``, for up to ``for_s`` seconds."""
    args = ["--dir", cycles, "--id", cycle_id, "--from-offset", int(offset), "--for", f"{for_s:g}"]
    return script("python3", directory, "detach.py", "follow", *args)


def detach_ack_command(directory, cycles, cycle_id):
    """detach.py ack: this controller read the cycle's end (no later run reports it)."""
    return script("python3", directory, "detach.py", "ack", "--dir", cycles, "--id", cycle_id)


def detach_status_command(directory, cycles, mark_reported=False):
    """detach.py status: the cycles no controller reported yet."""
    args = ["--dir", cycles, *optional(mark_reported, "--mark-reported")]
    return script("python3", directory, "detach.py", "status", *args)


def gate_args(profile):
    """gate.py's arguments for a server of ``profile``, all but what to gate (``--unit``, or
    ``--pid``/``--log``) and ``--json``; it asks the server where every probe does
    (service.probe_host)."""
    return [
        "--host",
        profile.service.probe_host,
        "--port",
        profile.service.port,
        "--served-name",
        profile.model.served_name,
        *gate_timings(profile.readiness),
    ]


def gate_timings(readiness):
    """gate.py's timing arguments, from the profile's readiness section: the gate has no
    defaults of its own for them."""
    return [
        "--timeout",
        readiness.timeout_s,
        "--interval",
        readiness.poll_interval_s,
        "--progress-every",
        readiness.progress_every_s,
        "--hang-after",
        readiness.hang_after_s,
        "--fired-up-grace",
        readiness.fired_up_grace_s,
        "--settle",
        readiness.settle_s,
    ]


def workers_command(directory, unit, expect):
    """workers.py: the environment check of the unit's schedulers, the report in its result line."""
    return script(
        "python3",
        directory,
        "workers.py",
        "--json",
        "--unit",
        unit,
        "--expect-json",
        json.dumps(expect, sort_keys=True),
    )


def last_good_show_command(directory, last_good_dir):
    """lastgood.py show: the last known good's manifest, in its result line."""
    return script("python3", directory, "lastgood.py", "show", "--dir", last_good_dir)
