"""Checks on the node before anything is stopped: can this configuration start here?

    <venv>/bin/python preflight.py --unit sglang.service --argv-json '["--model-path", ...]'
        [--cuda-visible-devices 0,1] [--min-driver 550.54.15] [--gpu-model H200]
        [--min-free-gib 2 --disk-path /opt/sglang] [--no-argv]
        [--new-venv /opt/sglang/venvs/NAME --live-venv /opt/sglang/venv] [--lock LOCK.txt]
        [--textfile-service sglang --textfile-port 30000 [--textfile-dir DIR]]

Run by the venv's interpreter, so the engine's own argument parser judges the argv
(`sglang.srt.server_args.prepare_server_args`, the same call on SGLang and on the stand-in),
after every flag name is checked exactly against that parser's option strings (flags.py:
argparse alone would accept an abbreviation).
Checks: the argv parses; the model path (and the draft model path) is a directory with a
config.json whose files have their manifest's sizes (model_manifest.py), or, where a staged
model waits for the restart's swap (model_stage.py), that staged directory is: it is what the
server will start from; the GPUs SGLang's layout puts workers on (tp × pp × dp per node, from
--base-gpu-id every --gpu-id-step) exist among those CUDA_VISIBLE_DEVICES leaves visible
(nvidia-smi -L; "no GPU: skipped" without it);
the NVIDIA driver version and GPU model the profile's `gpu:` section asks for (gpu_settings.py);
the port is free or held by this unit's own processes; free disk (and room for a new engine
venv: the live one's size plus --min-free-gib); the engine's installed files
match their wheels' RECORD (--drift; with --textfile-service what it found is the node's
sglang_deploy_drift_detected sample, as drift.py writes it); the venv holds exactly its lock
(--lock, exact.py). One line per check: `preflight ok: …`, `… skipped: …`, `… warning: …` or
`… failed: …`; then the result line (result.py) with every check, the warnings and, as its
cause, the failures; exit 0 when nothing failed, else status.PREFLIGHT_FAILED.
"""

import argparse
import contextlib
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys

if __package__:
    from . import drift, exact, flags, model_manifest, model_stage, secret_args, venvs
    from .lib import gpu_settings, procs, result, status, systemd, textfile
else:  # run as a script: our scripts' directory is on sys.path
    import drift
    import exact
    import flags
    import model_manifest
    import model_stage
    import secret_args
    import venvs
    from lib import gpu_settings, procs, result, status, systemd, textfile


def option(argv, *names):
    """The value after the first of ``names`` in argv, or None."""
    for index, arg in enumerate(argv[:-1]):
        if arg in names:
            return argv[index + 1]
    return None


def check_argv(argv):
    try:
        from sglang.srt.server_args import prepare_server_args

        options = flags.installed_options()
    except ImportError as exc:
        return "failed", "the engine's argument parser cannot be imported: %s" % exc
    # argparse would run an abbreviation as the flag it abbreviates: names must be exact.
    unknown = flags.argv_problems(argv, options)
    if unknown:
        return "failed", "; ".join(why for _, why in unknown)
    stderr = io.StringIO()
    try:
        # Our secret arguments' --config file is written at the start: an empty one stands in.
        with contextlib.redirect_stderr(stderr), secret_args.placeholder(argv) as parsed:
            prepare_server_args(list(parsed))
    except SystemExit as exc:
        message = stderr.getvalue().strip().splitlines()
        return "failed", "the engine rejects the arguments: %s" % (
            message[-1] if message else "exit %s" % exc.code
        )
    except Exception as exc:  # the engine's own validation (e.g. a bad algorithm name)
        return "failed", "the engine rejects the arguments: %s: %s" % (type(exc).__name__, exc)
    return "ok", "the engine's parser accepts the %d arguments" % len(argv)


def check_model_dir(label, path):
    if path is None:
        return None
    if model_stage.pending(path) is not None:  # swapped in after this check: judge what starts
        staged = model_stage.staging_of(path)
        return check_model_dir("%s %s, staged at" % (label, path), staged)
    if not os.path.isdir(path):
        return "failed", "%s %s is not a directory on this node" % (label, path)
    if not os.path.isfile(os.path.join(path, "config.json")):
        return "failed", "%s %s has no config.json" % (label, path)
    problems, manifest = model_manifest.check(path)  # sizes: a partial copy, a truncated shard
    if problems:
        return "failed", "%s %s" % (label, model_manifest.describe(problems, path))
    if manifest is not None:
        return "ok", "%s %s matches its manifest (%d files, sizes)" % (label, path, len(manifest["files"]))
    return "ok", "%s %s has a config.json" % (label, path)


def _flag(argv, names, default=1):
    """The integer after the last of ``names`` in argv (argparse keeps the last), else ``default``."""
    found = default
    for index, arg in enumerate(argv):
        name, equals, value = arg.partition("=")
        if name in names and (equals or index + 1 < len(argv)):
            text = value if equals else argv[index + 1]
            found = int(text) if text.isdigit() else default
    return found


def gpu_layout(argv):
    """The GPUs SGLang 0.5.23 starts this node's workers on: {"tp", "pp", "dp", "nnodes", "base",
    "step", "gpus"} (one CUDA index per worker). Replicas (--dp-size) take a tp × pp group each, one
    after the other (managers/data_parallel_controller.py); attention DP (--attn-dp-size, or
    --dp-size read as it with --enable-dp-attention or DeepSeek's --enable-prefill-cp) runs inside
    the tp group. A worker's GPU: base-gpu-id + replica × tp × pp × gpu-id-step + pp rank × tp per node
    + tp rank × gpu-id-step, ranks counted on this node (entrypoints/engine.py)."""
    tp = _flag(argv, ("--tp-size", "--tensor-parallel-size"))
    pp = _flag(argv, ("--pp-size", "--pipeline-parallel-size"))
    nnodes, step = _flag(argv, ("--nnodes",)), _flag(argv, ("--gpu-id-step",))
    base = _flag(argv, ("--base-gpu-id",), 0)
    attention = _flag(argv, ("--attn-dp-size", "--attention-data-parallel-size")) > 1
    attention = attention or bool({"--enable-dp-attention", "--enable-prefill-cp"} & set(argv))
    dp = 1 if attention else max(_flag(argv, ("--dp-size", "--data-parallel-size")), 1)
    pp_here, tp_here = max(pp // max(nnodes, 1), 1), max(tp // max(nnodes // max(pp, 1), 1), 1)
    gpus = [
        base + replica * tp * pp * step + pp_rank * tp_here + tp_rank * step
        for replica in range(dp)
        for pp_rank in range(pp_here)
        for tp_rank in range(tp_here)
    ]
    return {"tp": tp, "pp": pp, "dp": dp, "nnodes": nnodes, "base": base, "step": step, "gpus": gpus}


def parse_gpu_list(text):
    """nvidia-smi -L: [(index, uuid)] of its GPUs, then [(None, uuid)] of their MIG devices."""
    gpus = re.findall(r"^GPU (\d+):.*\(UUID: ([^)]+)\)", text, re.M)
    migs = re.findall(r"^\s+MIG .*\(UUID: ([^)]+)\)", text, re.M)
    return [(int(index), uuid) for index, uuid in gpus] + [(None, uuid) for uuid in migs]


def _span(indices):
    """'2..9' for a run, else '0, 2, 4'."""
    if len(indices) > 1 and list(indices) == list(range(indices[0], indices[0] + len(indices))):
        return "%d..%d" % (indices[0], indices[-1])
    return ", ".join(str(i) for i in indices) or "none"


def describe_need(layout):
    """'tp 4 × dp 2 = 8 GPUs from GPU 2 (base-gpu-id 2) need GPUs 2..9'."""
    sizes = " × ".join("%s %d" % (k, layout[k]) for k in ("tp", "pp", "dp") if k == "tp" or layout[k] > 1)
    text = sizes + (" / %d nodes" % layout["nnodes"] if layout["nnodes"] > 1 else "")
    plural = "s" if len(layout["gpus"]) > 1 else ""
    text += " = %d GPU%s" % (len(layout["gpus"]), plural)
    text += " from GPU %(base)d (base-gpu-id %(base)d)" % layout if layout["base"] else ""
    text += " spaced %(step)d apart (gpu-id-step %(step)d)" % layout if layout["step"] > 1 else ""
    return "%s need%s GPU%s %s" % (text, "" if plural else "s", plural, _span(sorted(set(layout["gpus"]))))


def check_gpu_layout(argv, visible, listed):
    """(verdict, text): the GPUs the argv's layout needs (gpu_layout) against the node's
    (``listed``, parse_gpu_list) as CUDA_VISIBLE_DEVICES (``visible``: the profile env's value,
    or None) leaves them to SGLang: it limits and renumbers them (0 is its first entry)."""
    layout = gpu_layout(argv)
    gpus, indices = layout["gpus"], sorted(index for index, _ in listed if index is not None)
    count, have = len(indices), "the node has %d (%s)" % (len(indices), _span(indices))
    if visible is not None:
        entries = [entry.strip() for entry in visible.split(",")] if visible.strip() else []
        strangers = [entry for entry in entries if not _listed(entry, listed)]
        if strangers:
            names = ", ".join(repr(entry) if not entry else entry for entry in strangers)
            return (
                "failed",
                f"CUDA_VISIBLE_DEVICES={visible} names {names}, which nvidia-smi does not list; {have}",
            )
        visible_now = _span(list(range(len(entries))))
        have = f"CUDA_VISIBLE_DEVICES={visible} makes {len(entries)} of the node's {count} visible, as {visible_now}"
        count = len(entries)
    text = "%s; %s" % (describe_need(layout), have)
    shared = _span(sorted({gpu for gpu in gpus if gpus.count(gpu) > 1}))
    if shared != "none":
        return "failed", "%s; GPU %s would hold two workers (pp ranks with gpu-id-step)" % (text, shared)
    return ("failed" if max(gpus) >= count else "ok"), text


def _listed(entry, listed):
    """A CUDA_VISIBLE_DEVICES entry names a GPU nvidia-smi lists: its index or (a prefix of) its UUID."""
    if entry.isdigit():
        return any(index == int(entry) for index, _ in listed)
    return bool(entry) and any(uuid.startswith(entry) for _, uuid in listed)


def check_gpus(argv, visible=None, nvidia_smi="nvidia-smi"):
    """check_gpu_layout over nvidia-smi -L on this node."""
    need = describe_need(gpu_layout(argv))
    if shutil.which(nvidia_smi) is None:
        return "skipped", "no GPU: nvidia-smi not found (%s on a GPU node)" % need
    listing = subprocess.run([nvidia_smi, "-L"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if listing.returncode != 0:
        return "failed", "%s; nvidia-smi -L failed: %s" % (need, (listing.stderr or listing.stdout).strip())
    return check_gpu_layout(argv, visible, parse_gpu_list(listing.stdout))


def check_gpu_settings(min_driver, model, nvidia_smi="nvidia-smi"):
    """The driver version and GPU model the profile asks for (None when it asks for neither)."""
    if not min_driver and not model:
        return None
    wanted = ", ".join(
        filter(
            None, ["driver >= %s" % min_driver if min_driver else None, "model %s" % model if model else None]
        )
    )
    if shutil.which(nvidia_smi) is None:
        return "skipped", "no GPU: nvidia-smi not found (%s wanted on a GPU node)" % wanted
    query = subprocess.run(
        [nvidia_smi] + gpu_settings.QUERY, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    if query.returncode != 0:
        return "failed", "nvidia-smi %s failed: %s" % (
            " ".join(gpu_settings.QUERY),
            (query.stderr or query.stdout).strip(),
        )
    try:
        gpus = gpu_settings.parse(query.stdout)
    except gpu_settings.Unparsed as exc:
        return "failed", str(exc)
    found = gpu_settings.problems(gpus, min_driver=min_driver, model=model)
    if found:
        return "failed", "; ".join(found)
    return "ok", "%s (%s wanted)" % (gpu_settings.summary(gpus), wanted)


def check_port(port, unit):
    rows = procs.listening(port)
    if not rows:
        return "ok", "port %d is free" % port
    holders = procs.socket_owners(row["inode"] for row in rows)
    if not holders:
        # Our stop would wait for it in vain: nothing we stop can release it.
        return "failed", (
            "port %d is listening but no process on this node owns it "
            "(another network namespace or container?)" % port
        )
    group = procs.cgroup_dir(systemd.unit_show(unit, ["ControlGroup"]).get("ControlGroup"))
    ours = set(procs.cgroup_pids(group)) if group else set()
    strangers = {pid: title for pid, title in holders.items() if pid not in ours}
    if strangers:
        return "failed", "port %d is held by %s" % (
            port,
            ", ".join("pid %d (%s)" % item for item in sorted(strangers.items())),
        )
    return "ok", "port %d is held by %s itself" % (port, unit)


def check_drift(names, allow, args=None):
    """Installed engine files against their wheels' RECORD: a patched engine is not what the
    profile pins, and the incident's real cause was exactly that. ``args``: the command line's,
    whose --textfile-* flags ask for the drift sample."""
    if not names:
        return None
    found = drift.drift(names)
    drift.export(found, args)
    if found["status"] == status.READY:
        checked = sum(r["files_checked"] for r in found["distributions"].values())
        return "ok", "no drift in %s (%d files match their RECORD)" % (", ".join(names), checked)
    problems = [
        line.strip()
        for line in drift.report_lines(found, limit=5)[:-1]
        if line.startswith("  ") or "not installed" in line
    ]
    verdict = "warning" if allow else "failed"
    suffix = (
        " (engine.allow_drift: starting anyway)"
        if allow
        else " (`make repair` reinstalls them; engine.allow_drift: true in the profile starts anyway)"
    )
    return verdict, "engine drift: %s%s" % ("; ".join(problems), suffix)


def check_lock(path):
    """The venv holds exactly its lock (exact.py), for this Python: nothing extra, nothing
    missing, the same versions."""
    if not path:
        return None
    try:
        with open(path) as lock:
            found = exact.check(lock.read())
    except OSError as exc:
        return "failed", "the engine's lock cannot be read: %s" % exc
    if found["status"] == status.READY:
        return "ok", "the engine venv holds exactly its lock (%d distributions)" % found["locked"]
    return "failed", "the engine venv is not its lock %s: %s (`make repair` reinstalls it)" % (
        os.path.basename(path),
        "; ".join(exact.problems(found)[:10]),
    )


def check_disk(path, min_free_gib):
    while not os.path.exists(path):
        path = os.path.dirname(path)
    free = shutil.disk_usage(path).free / 2**30
    if free < min_free_gib:
        return "failed", "%.1f GiB free under %s, %.1f needed" % (free, path, min_free_gib)
    return "ok", "%.1f GiB free under %s" % (free, path)


def check_new_venv(new_venv, live_link, min_free_gib):
    """Room for a venv about to be built beside the live one: the live one's size (a new pin
    set is about as large) plus what must stay free. Refused here, nothing is built or stopped."""
    root = os.path.dirname(new_venv)
    while not os.path.exists(root):
        root = os.path.dirname(root)
    live = os.path.realpath(live_link)
    size = venvs.usage(live)[0] if os.path.isdir(live) else 0
    free = shutil.disk_usage(root).free
    needed = size + min_free_gib * 2**30
    text = (
        "%s needed for the new engine venv %s (the live venv's %s + %.1f GiB to keep free), %s free on %s"
        % (
            _size(needed),
            os.path.basename(new_venv),
            _size(size),
            min_free_gib,
            _size(free),
            socket.gethostname(),
        )
    )
    if free < needed:
        return "failed", "not enough disk: %s; the running server is untouched" % text
    return "ok", text


def _size(n):
    return "%.1f GiB" % (n / 2**30) if n >= 2**30 else "%.0f MiB" % (n / 2**20)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--unit", required=True)
    parser.add_argument("--argv-json", required=True, help="the server's arguments, as JSON")
    parser.add_argument("--no-argv", action="store_true", help="skip the engine parser check")
    parser.add_argument("--gpus-needed", type=int, help="ignored: the argv's layout says (gpu_layout)")
    parser.add_argument("--cuda-visible-devices", help="CUDA_VISIBLE_DEVICES in the profile's env")
    parser.add_argument("--min-driver", help="oldest NVIDIA driver version accepted")
    parser.add_argument("--gpu-model", help="text every GPU's name must contain, e.g. H200")
    parser.add_argument("--disk-path", default="/")
    parser.add_argument("--min-free-gib", type=float, default=2.0)
    parser.add_argument(
        "--drift",
        nargs="*",
        default=[],
        metavar="DIST",
        help="engine distributions whose installed files must match RECORD",
    )
    parser.add_argument("--allow-drift", action="store_true", help="drift warns instead of failing")
    parser.add_argument("--lock", help="the engine's lock file: the venv must hold exactly it")
    parser.add_argument("--new-venv", help="an engine venv about to be built: is there room?")
    parser.add_argument("--live-venv", help="the link to the live engine venv (its size)")
    textfile.add_arguments(parser)
    args = parser.parse_args(argv)
    server_argv = json.loads(args.argv_json)
    port = int(option(server_argv, "--port") or 30000)
    results = [
        ("skipped", "engine parser: checked after the engine is installed")
        if args.no_argv
        else check_argv(server_argv),
        check_model_dir("model path", option(server_argv, "--model-path")),
        check_model_dir("draft model path", option(server_argv, "--speculative-draft-model-path")),
        check_gpus(server_argv, args.cuda_visible_devices),
        check_gpu_settings(args.min_driver, args.gpu_model),
        check_port(port, args.unit),
        # A venv about to be built: room for it beside the live one (which implies the rest).
        check_new_venv(args.new_venv, args.live_venv, args.min_free_gib)
        if args.new_venv
        else check_disk(args.disk_path, args.min_free_gib),
        None if args.no_argv else check_drift(args.drift, args.allow_drift, args),
        None if args.no_argv else check_lock(args.lock),
    ]
    checks = [{"verdict": verdict, "text": text} for verdict, text in filter(None, results)]
    for check in checks:
        print("preflight %(verdict)s: %(text)s" % check)
    failed = [check["text"] for check in checks if check["verdict"] == "failed"]
    return result.emit(
        status.PREFLIGHT_FAILED if failed else status.READY,
        "; ".join(failed) or None,
        checks=checks,
        warnings=[check["text"] for check in checks if check["verdict"] == "warning"],
    )


if __name__ == "__main__":
    sys.exit(main())
