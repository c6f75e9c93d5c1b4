"""Command lines of our on-node scripts (sglang_deploy/node/, uploaded to the node): the one
place that builds them. Facts, checks and tools take these strings; every script answers with
its result line (node/lib/result.py)."""

import json
import posixpath
import shlex


def _script(python, directory, script, *args):
    quoted = " ".join(shlex.quote(str(arg)) for arg in args)
    return f"{shlex.quote(python)} {shlex.quote(directory)}/{script} {quoted}".rstrip()


def _if(flag, *args):
    """``args`` when ``flag`` is set (an optional flag and its value), else nothing."""
    return list(args) if flag else []


def script_path(directory, script):
    """Where one of our scripts lies on the node (to test that it is there yet)."""
    return posixpath.join(directory, script)


def acs_command(directory):
    """acs.py disable, as the boot-time ACS unit runs it (facts/gpu.py renders the unit)."""
    return _script("/usr/bin/python3", directory, "acs.py", "disable")


def persistence_check_command(directory):
    """node/lib/gpu_settings.py persistence: exit 1 naming the GPUs whose persistence mode is off."""
    return _script("python3", directory, "lib/gpu_settings.py", "persistence")


def secret_args_argv(directory, path, secret_server_args):
    """secret_args.py as the unit's ExecStartPre= runs it (words, for systemd's quoting):
    ``secret_server_args`` ({argument: variable}) from the env file into ``path`` (--config)."""
    pairs = [("--arg", f"{argument}={name}") for argument, name in sorted(secret_server_args.items())]
    script = script_path(directory, "secret_args.py")
    return ["/usr/bin/python3", script, "--out", path, *[word for pair in pairs for word in pair]]


def api_key_args(env_file, name):
    """The flags with which a script that asks the server reads the API key it sends
    (node/lib/engine_auth.py): the env file and the key's variable, never the value; none
    without a key (``name`` None)."""
    return ["--api-key-env-file", env_file, "--api-key-var", name] if name else []


def passport_command(directory, path):
    """passport.py collect: the node's hardware passport, kept at ``path`` when it changed."""
    return _script("python3", directory, "passport.py", "collect", "--write", path)


def lock_command(path, wait_s, holder, directory=None, source=None, cycles_dir=None):
    """lock.py, holding the node's deploy lock while its session lasts; ``source``: lock.py's
    text, run with ``-c`` (the deploy takes the lock before it uploads our scripts);
    ``cycles_dir``: the service's detached restart cycles, one still running keeps the lock."""
    parts = ("--path", path, "--wait", float(wait_s), "--holder", holder)
    args = " ".join(shlex.quote(str(a)) for a in (*parts, *_if(cycles_dir, "--cycles-dir", cycles_dir)))
    if source is not None:
        return f"python3 -c {shlex.quote(source)} {args}"
    return f"{_script('python3', directory, 'lock.py')} {args}"


def cycles_dir(run_dir, service):
    """Where a service's detached restart cycles keep their files (node/detach.py)."""
    return posixpath.join(run_dir, service)


def cycles_dir_of_lock(lock_path):
    """The cycles directory of the service whose deploy lock is ``lock_path`` (RUN_DIR/SERVICE.lock)."""
    run_dir, name = posixpath.split(lock_path)
    return cycles_dir(run_dir, name[: -len(".lock")] if name.endswith(".lock") else name)


def detach_start_command(directory, cycles, service, cycle_id, profile, command):
    """detach.py start: ``command`` (a restart cycle) as a transient systemd unit of its own."""
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
    ]
    return _script("python3", directory, "detach.py", "start", *args)


def detach_follow_command(directory, cycles, cycle_id, offset, for_s):
    """detach.py follow: the cycle's progress from byte ``offset``, for up to ``for_s`` seconds."""
    args = ["--dir", cycles, "--id", cycle_id, "--from-offset", int(offset), "--for", f"{for_s:g}"]
    return _script("python3", directory, "detach.py", "follow", *args)


def detach_ack_command(directory, cycles, cycle_id):
    """detach.py ack: this controller read the cycle's end (no later run reports it)."""
    return _script("python3", directory, "detach.py", "ack", "--dir", cycles, "--id", cycle_id)


def detach_status_command(directory, cycles, mark_reported=False):
    """detach.py status: the cycles no controller reported yet."""
    args = ["--dir", cycles, *_if(mark_reported, "--mark-reported")]
    return _script("python3", directory, "detach.py", "status", *args)


def venvs_list_command(directory, venvs_dir, link, last_good_dir=None):
    """venvs.py list: the engine venvs, the live one, the pending one, the last known good's."""
    return _script(
        "python3",
        directory,
        "venvs.py",
        "list",
        "--dir",
        venvs_dir,
        "--link",
        link,
        *_if(last_good_dir, "--last-good-dir", last_good_dir),
    )


def venvs_mark_command(directory, venv, lock=None):
    """venvs.py mark: a finished build (written last, so a half-built venv is never used),
    registered with the lock it was built from."""
    return _script("python3", directory, "venvs.py", "mark", "--venv", venv, *_if(lock, "--lock", lock))


def venvs_wheelhouses_command(directory, deploy_dir):
    """venvs.py wheelhouses: each lock's wheelhouse on the node and the venvs built from it."""
    return _script("python3", directory, "venvs.py", "wheelhouses", "--deploy-dir", deploy_dir)


def dist_reach_command(directory, addr, rank, timeout_s, listening_port=None):
    """dist_reach.py: a follower reaches rank 0's dist-init address."""
    return _script(
        "python3",
        directory,
        "dist_reach.py",
        "--addr",
        addr,
        "--node-rank",
        rank,
        "--timeout",
        f"{timeout_s:g}",
        *_if(listening_port, "--listening-port", listening_port),
    )


def router_gate_command(directory, url, timeout_s, workers, probe_url=None):
    """router_gate.py: the router ready (asked on its probe port when it has one) and every
    worker healthy in it."""
    args = [arg for worker in workers for arg in ("--worker", worker)]
    return _script(
        "python3",
        directory,
        "router_gate.py",
        "--url",
        url,
        *_if(probe_url, "--probe-url", probe_url),
        "--timeout",
        timeout_s,
        *args,
    )


def prometheus_gate_command(directory, url, path, unit, timeout_s, reload=False):
    """prometheus_gate.py: Prometheus (or the node exporter) answers ``path`` 200; ``reload``:
    after loading its configuration again (systemctl reload, checked in its own metrics)."""
    args = ["--url", url, "--path", path, "--unit", unit, "--timeout", timeout_s, *_if(reload, "--reload")]
    return _script("python3", directory, "prometheus_gate.py", *args)


def prometheus_targets_command(directory, url, expected, settle_s):
    """prometheus_targets.py: every expected scrape URL up in Prometheus' /api/v1/targets."""
    args = [arg for target in expected for arg in ("--expect", target)]
    return _script("python3", directory, "prometheus_targets.py", "--url", url, "--settle", settle_s, *args)


def rotation_command(directory, *args):
    """rotation.py with ``args`` (plan/fleet_hosts.Rotation builds them)."""
    return _script("python3", directory, "rotation.py", *args)


def last_good_show_command(directory, last_good_dir):
    """lastgood.py show: the last known good's manifest, in its result line."""
    return _script("python3", directory, "lastgood.py", "show", "--dir", last_good_dir)


def workers_command(directory, unit, expect):
    """workers.py: the environment check of the unit's schedulers, the report in its result line."""
    return _script(
        "python3",
        directory,
        "workers.py",
        "--json",
        "--unit",
        unit,
        "--expect-json",
        json.dumps(expect, sort_keys=True),
    )


def exact_command(python, directory, lock):
    """exact.py run by the venv's interpreter: does the venv hold exactly ``lock``?"""
    return _script(python, directory, "exact.py", "--lock", lock)


def drift_command(venv, directory, distributions, pins=(), textfile=()):
    """drift.py run by the venv's interpreter: the report in its result line; ``textfile``:
    textfile_args(), for the node's drift sample."""
    pin_args = ["--pins", *pins] if pins else []
    return _script(
        f"{venv}/bin/python", directory, "drift.py", "--json", *textfile, *distributions, *pin_args
    )


def textfile_args(service, engine_port, directory=None):
    """The flags of a script that writes a sample of its own into the node exporter's textfile
    directory (node/lib/textfile.py: rotation.py, drift.py, preflight.py); ``directory``: none
    is Debian's."""
    return [
        "--textfile-service",
        service,
        "--textfile-port",
        engine_port,
        *_if(directory, "--textfile-dir", directory),
    ]


def manifest_command(venv, directory, distributions):
    """drift.py --manifest: name, version and sha256 of RECORD per distribution."""
    return _script(f"{venv}/bin/python", directory, "drift.py", "--manifest", *distributions)


def model_stage_command(directory, action, model_dir, deep=False, in_place=False, now=False, want=None):
    """model_stage.py: a model directory's state, seed, finish, pending or drop-live; swap
    with ``want`` ({dir: source}) (node/model_stage.py)."""
    return _script(
        "python3",
        directory,
        "model_stage.py",
        action,
        *_if(model_dir, "--dir", model_dir),
        *_if(deep, "--deep"),
        *_if(in_place, "--in-place"),
        *_if(now, "--now"),
        *_if(want, "--want-json", json.dumps(want, sort_keys=True)),
    )


def hf_stage_command(
    python, directory, source, model_dir, token_file=None, deep=False, in_place=False, now=False
):
    """hf_stage.py run by the Hub client's venv: download a pinned revision into model_dir."""
    return _script(
        python,
        directory,
        "hf_stage.py",
        "--repo",
        source.repo,
        "--revision",
        source.revision,
        "--dir",
        model_dir,
        *(["--token-file", token_file] if token_file else []),
        *(["--deep"] if deep else []),
        *_if(in_place, "--in-place"),
        *_if(now, "--now"),
    )


def model_check_command(directory, model_dir, deep=False):
    """model_manifest.py check: a model directory against its manifest, in its result line."""
    return _script(
        "python3", directory, "model_manifest.py", "check", "--dir", model_dir, *(["--deep"] if deep else [])
    )


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


def node_status_command(
    directory, unit, port, venv_link, venvs_dir, last_good_dir, history, passport, host="127.0.0.1", auth=()
):
    """node_status.py node: the unit, engine, last known good, last decode check and hardware
    passport of one service, in its result line only (`make status`); ``host``: where its
    server is asked (service.probe_host); ``auth``: api_key_args(), how it reads the server's key."""
    args = [
        "--json",
        "node",
        "--unit",
        unit,
        "--host",
        host,
        "--port",
        port,
        "--venv-link",
        venv_link,
        "--venvs-dir",
        venvs_dir,
        "--last-good-dir",
        last_good_dir,
        "--history",
        history,
        "--passport",
        passport,
        *auth,
    ]
    return _script("python3", directory, "node_status.py", *args)


def router_status_command(directory, url):
    """node_status.py router: a router's health and its workers, in its result line only."""
    return _script("python3", directory, "node_status.py", "--json", "router", "--url", url)


def metrics_textfile_command(
    directory,
    service,
    engine_port,
    history,
    last_good_dir,
    max_regression_pct=None,
    min_decode_tok_s=None,
    pcie_json=None,
    textfile_dir=None,
    passport=None,
    no_routers=False,
    check=False,
):
    """metrics_textfile.py: the deploy's figures into the node exporter's textfile directory
    (its default: Debian's); ``passport``: the node's hardware passport file (its GPU links);
    ``no_routers``: the inventory names no router (no rotation sample); ``check``: only say
    whether the file's figures would change."""
    return _script(
        "python3",
        directory,
        "metrics_textfile.py",
        "--service",
        service,
        "--engine-port",
        engine_port,
        "--history",
        history,
        "--last-good-dir",
        last_good_dir,
        *_if(max_regression_pct is not None, "--max-regression-pct", max_regression_pct),
        *_if(min_decode_tok_s is not None, "--min-decode-tok-s", min_decode_tok_s),
        *_if(pcie_json, "--pcie-json", pcie_json),
        *_if(passport, "--passport", passport),
        *_if(textfile_dir, "--dir", textfile_dir),
        *_if(no_routers, "--no-routers"),
        *_if(check, "--check"),
    )


def fanout_pull_command(directory, model_dir, source=None, port=22, key=None, known_hosts=None, alias=None,
                        bwlimit=None, timeout=60, swap=None):  # fmt: skip
    """fanout_pull.py: ``seed`` (no source) or ``pull`` from ``source`` (node/fanout_pull.py);
    ``swap``: finish's (None: at the restart, "now", "in-place")."""
    if source is None:
        return _script("python3", directory, "fanout_pull.py", "seed", "--dir", model_dir)
    args = ["--source", source, "--port", port, "--key", key, "--known-hosts", known_hosts, "--alias", alias]
    args += [*_if(bwlimit, "--bwlimit", bwlimit), "--timeout", int(timeout), *_if(swap, f"--{swap}")]
    return _script("python3", directory, "fanout_pull.py", "pull", "--dir", model_dir, *args)


def fanout_access_command(directory, action, user="root", model_dir=None, marker=None, run_dir=None):
    """fanout_access.py: grant or revoke a run's read-only key, host keys, leftovers, clean."""
    args = ["--user", user, *_if(model_dir, "--dir", model_dir), *_if(marker, "--marker", marker)]
    return _script(
        "python3", directory, "fanout_access.py", action, *args, *_if(run_dir, "--run-dir", run_dir)
    )
