"""The deploy's own figures for Prometheus: a node exporter textfile collector file, so the alert
rules (templates/prometheus/sglang-alerts.rules.yml) judge the figures the deploy judges.

    python3 metrics_textfile.py --service NAME --engine-port P --history FILE --last-good-dir D
        [--max-regression-pct X] [--min-decode-tok-s X] [--min-speedup-pct X] [--min-accept-length L]
        [--pcie-json FILE] [--passport FILE]
        [--no-routers] [--check] [--dir /var/lib/prometheus/node-exporter]

Writes DIR/sglang-deploy-<service>.prom whole (lib/textfile.py: a temporary file in DIR,
flushed, renamed over it: the node exporter never reads half a file), mode 0644. The history
and the last known good are read with decode_check.py's own functions: the figure a rule
compares with is the baseline the next decode check will judge against. DIR defaults to
Debian's prometheus-node-exporter textfile directory (its --collector.textfile.directory).

Metrics (every one a gauge; every series has the labels service and engine_port, the port of
the service's engine, which the rules match against the engine's scrape instance; a sample
whose figure is not known is left out, so no rule fires on it):

    sglang_deploy_decode_check_tokens_per_second      the latest decode check's median tok/s
                                                      (the latest check that measured one)
    sglang_deploy_decode_check_timestamp_seconds      when that check ran (Unix time)
    sglang_deploy_decode_check_measured               1 when the latest check measured, else 0
    sglang_deploy_decode_check_accepted               1 when the latest check was accepted
    sglang_deploy_decode_check_change_pct             its change in % against the baseline it
                                                      was judged against (absent without one)
    sglang_deploy_last_good_decode_tokens_per_second  the last known good's figure: the latest
                                                      accepted check of its profile
    sglang_deploy_max_regression_pct                  the profile's throughput.max_regression_pct
    sglang_deploy_min_decode_tokens_per_second        the profile's throughput.min_decode_tok_s
    sglang_deploy_decode_check_spec_accept_length     that check's speculative accept length (a
                                                      speculating server's: labels algorithm)
    sglang_deploy_decode_check_spec_accept_rate       its accept rate (accepted / proposed drafts)
    sglang_deploy_decode_check_speedup_pct            its change in % against the figure its
                                                      speculation must beat (labels over)
    sglang_deploy_min_speedup_pct                     the profile's throughput.min_speedup_pct
    sglang_deploy_min_accept_length                   the profile's throughput.min_accept_length
    sglang_deploy_decode_check_info                   1, labels profile (the latest check's) and
                                                      last_good_profile
    sglang_deploy_textfile_timestamp_seconds          when this file was written

Two samples are the node's own, each in a file of its writer (lib/textfile.py), so they hold
between deploys and this file never rewrites them: sglang_deploy_in_rotation (rotation.py, in
DIR/sglang-deploy-<service>@rotation.prom) and sglang_deploy_drift_detected (every drift check,
in DIR/sglang-deploy-<service>@drift.prom). --no-routers (the inventory names no router: the
node is in no rotation) removes a rotation file left from when it had routers, so a 0 written
then cannot alert for ever.

GPU links (--pcie-json FILE: a JSON list, one object per GPU, {"gpu": "0", "bus_id":
"00000000:18:00.0", "gen_current": 4, "gen_max": 5, "width_current": 8, "width_max": 16}, as
nvidia-smi's pcie.link.gen.current/max and pcie.link.width.current/max read them; a figure
that is missing or null is "not checked" and leaves that GPU's link samples out):

    sglang_deploy_gpu_pcie_link_gen{gpu,bus_id,state="current"|"max"}
    sglang_deploy_gpu_pcie_link_width{gpu,bus_id,state="current"|"max"}
    sglang_deploy_gpu_pcie_link_degraded{gpu,bus_id}  1 when the current generation or width is
                                                      below its maximum, else 0

GPU links from the hardware passport (--passport FILE: passport.py's file on the node): the
same gauges, judged by lib/gpu_links.py (the rule the deploy and `make verify` apply: a lower
generation below P0 is power saving, not degradation); a passport not there yet exports no link.

The file is rewritten only when a figure in it changed (sglang_deploy_textfile_timestamp_seconds
aside), and the rotation file removed only when it is there: --check only says whether either
would be, and writes nothing (the deploy's operation runs the write only then, so a re-run with
nothing changed reports no change).

Ends with the result line (result.py): {"path": the file, "samples": how many, "changed": whether
the figures differ from the file's, or --no-routers finds a rotation file}. Exit statuses: 0
written or checked, 2 a bad command line, --pcie-json or --passport.
"""

import argparse
import calendar
import json
import os
import sys
import time

if __package__:
    from . import decode_check
    from .lib import gpu_links, result, status, textfile
else:  # run as a script: our scripts' directory is on sys.path
    import decode_check
    from lib import gpu_links, result, status, textfile

DEFAULT_DIR = textfile.DEFAULT_DIR
PREFIX = textfile.PREFIX
# Changes on every write: left out when judging whether the file's figures changed.
VOLATILE = PREFIX + "textfile_timestamp_seconds{"

HELP = {
    "decode_check_tokens_per_second": "Median decode tok/s of the latest decode check that measured one.",
    "decode_check_timestamp_seconds": "When that decode check ran (Unix time).",
    "decode_check_measured": "1 when the latest decode check measured a figure, else 0.",
    "decode_check_accepted": "1 when the latest decode check was accepted, else 0.",
    "decode_check_change_pct": "The latest decode check's change in percent against its baseline.",
    "last_good_decode_tokens_per_second": "The last known good's decode tok/s: the baseline of the next decode check.",
    "max_regression_pct": "The profile's throughput.max_regression_pct.",
    "min_decode_tokens_per_second": "The profile's throughput.min_decode_tok_s.",
    "decode_check_spec_accept_length": "Speculative accept length (tokens per verify step) of that decode check.",
    "decode_check_spec_accept_rate": "Speculative accept rate (accepted / proposed drafts) of that decode check.",
    "decode_check_speedup_pct": "The latest decode check's change in percent against the figure its speculation must beat.",
    "min_speedup_pct": "The profile's throughput.min_speedup_pct (0 when only min_speedup_over is set).",
    "min_accept_length": "The profile's throughput.min_accept_length.",
    "decode_check_info": "The profile of the latest decode check and the last known good's.",
    "textfile_timestamp_seconds": "When the deploy wrote this file (Unix time).",
    "gpu_pcie_link_gen": "PCIe link generation of the GPU, current and maximum.",
    "gpu_pcie_link_width": "PCIe link width of the GPU, current and maximum.",
    "gpu_pcie_link_degraded": "1 when the GPU's PCIe link trained below its maximum generation or width.",
    # The node's own, each in its writer's file (lib/textfile.py): every metric a node exports.
    **{metric: help_text for metric, (_, help_text) in textfile.STATE.items()},
}


# The profile's throughput expectations exported as given (--<option>): {option: metric}.
EXPECTED = {
    "max_regression_pct": "max_regression_pct",
    "min_decode_tok_s": "min_decode_tokens_per_second",
    "min_speedup_pct": "min_speedup_pct",
    "min_accept_length": "min_accept_length",
}


class BadInput(ValueError):
    pass


def _unix(stamp):
    """decode_check.py's UTC time (2026-01-02T03:04:05Z) as Unix seconds, or None."""
    try:
        return float(calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")))
    except (TypeError, ValueError):
        return None


def decode_samples(history, last_good_profile):
    """(name, extra labels, value) of the decode check figures, from the history's entries."""
    out = []
    latest = history[-1] if history else None
    measured = next((e for e in reversed(history) if e.get("decode_tok_s")), None)
    if measured is not None:
        out.append(("decode_check_tokens_per_second", {}, measured["decode_tok_s"]))
        when = _unix(measured.get("time"))
        if when is not None:
            out.append(("decode_check_timestamp_seconds", {}, when))
        spec = measured.get("speculation") or {}
        for figure in ("accept_length", "accept_rate"):
            if spec.get(figure) is not None:
                out.append(("decode_check_spec_" + figure, {"algorithm": spec["algorithm"]}, spec[figure]))
    if latest is not None:
        out.append(("decode_check_measured", {}, 1 if latest.get("decode_tok_s") else 0))
        out.append(("decode_check_accepted", {}, 1 if latest.get("accepted") else 0))
        if latest.get("change_pct") is not None:
            out.append(("decode_check_change_pct", {}, latest["change_pct"]))
        speedup = latest.get("speedup") or {}
        if speedup.get("change_pct") is not None:
            out.append(("decode_check_speedup_pct", {"over": speedup["over"]}, speedup["change_pct"]))
        info = {"profile": latest.get("profile") or "", "last_good_profile": last_good_profile or ""}
        out.append(("decode_check_info", info, 1))
    base = decode_check.baseline_of(history, last_good_profile)
    if base is not None:
        out.append(("last_good_decode_tokens_per_second", {}, base["decode_tok_s"]))
    return out


def pcie_samples(gpus):
    """(name, extra labels, value) per GPU link from --pcie-json's list."""
    if not isinstance(gpus, list):
        raise BadInput("--pcie-json: a JSON list of GPUs")
    out = []
    for gpu in gpus:
        if not isinstance(gpu, dict) or gpu.get("gpu") in (None, ""):
            raise BadInput('--pcie-json: every entry is an object with a "gpu"')
        labels = {"gpu": str(gpu["gpu"]), "bus_id": str(gpu.get("bus_id") or "")}
        figures = {}
        for key in ("gen_current", "gen_max", "width_current", "width_max"):
            value = gpu.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise BadInput(
                    "--pcie-json: GPU %s: %s is not a whole number: %r" % (labels["gpu"], key, value)
                )
            figures[key] = value
        if None in figures.values():
            continue  # not checked: no figure, no alert
        for kind in ("gen", "width"):
            for state in ("current", "max"):
                out.append(("gpu_pcie_link_" + kind, dict(labels, state=state), figures[kind + "_" + state]))
        degraded = (
            figures["gen_current"] < figures["gen_max"] or figures["width_current"] < figures["width_max"]
        )
        out.append(("gpu_pcie_link_degraded", labels, 1 if degraded else 0))
    return out


def passport_samples(passport):
    """(name, extra labels, value) per GPU link of a hardware passport, judged by gpu_links."""
    if not isinstance(passport, dict):
        raise BadInput("--passport: a JSON object (passport.py's file)")
    out = []
    for gpu in gpu_links.gpus(passport):
        if not isinstance(gpu, dict):
            continue
        verdict, _ = gpu_links.judge(gpu)
        if verdict is None:
            continue  # not checked: no figure, no alert
        labels = {"gpu": str(gpu.get("index")), "bus_id": str(gpu.get("bus_id") or gpu.get("bdf") or "")}
        figures = gpu_links.figures(gpu)
        if figures is not None:
            for kind in ("gen", "width"):
                for state in ("current", "max"):
                    out.append(
                        ("gpu_pcie_link_" + kind, dict(labels, state=state), figures[kind + "_" + state])
                    )
        out.append(("gpu_pcie_link_degraded", labels, 1 if verdict else 0))
    return out


def render(service, engine_port, samples):
    """The file's text: HELP and TYPE once per metric, then its samples, labels sorted."""
    return textfile.render(samples, {"service": service, "engine_port": str(engine_port)}, HELP)


def figures_of(text):
    """The file's lines but the write's own timestamp: what a change is judged on."""
    return [line for line in (text or "").splitlines() if not line.startswith(VOLATILE)]


def collect(args, now=None):
    history = decode_check.read_history(args.history)
    good = decode_check.last_good_profile(args.last_good_dir)
    samples = decode_samples(history, good)
    for option, metric in EXPECTED.items():  # the profile's expectations the alerts compare with
        if getattr(args, option) is not None:
            samples.append((metric, {}, getattr(args, option)))
    if args.pcie_json:
        try:
            with open(args.pcie_json) as f:
                gpus = json.load(f)
        except (OSError, ValueError) as e:
            raise BadInput("--pcie-json: %s" % e)
        samples += pcie_samples(gpus)
    if args.passport:
        try:
            with open(args.passport) as f:
                passport = json.load(f)
        except FileNotFoundError:
            passport = None  # not collected yet: no link is exported, none is called healthy
        except (OSError, ValueError) as e:
            raise BadInput("--passport: %s" % e)
        if passport is not None:
            samples += passport_samples(passport)
    samples.append(("textfile_timestamp_seconds", {}, time.time() if now is None else now))
    return samples


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--service", required=True)
    p.add_argument("--engine-port", type=int, required=True)
    p.add_argument("--history", required=True, help="decode_check.py's JSON lines")
    p.add_argument("--last-good-dir", required=True)
    for option in EXPECTED:
        p.add_argument("--" + option.replace("_", "-"), type=float)
    p.add_argument("--pcie-json", help="the GPUs' PCIe links, as a JSON list")
    p.add_argument("--passport", help="the node's hardware passport (passport.py's file)")
    p.add_argument(
        "--no-routers", action="store_true", help="the node is behind no router: no rotation sample"
    )
    p.add_argument("--check", action="store_true", help="say whether the figures changed; write nothing")
    p.add_argument("--dir", default=DEFAULT_DIR, help="the node exporter's textfile directory")
    args = p.parse_args(argv)
    try:
        samples = collect(args)
    except BadInput as e:
        print("metrics textfile: %s" % e, file=sys.stderr)
        return result.emit(status.USAGE, str(e))
    name = textfile.file_name(args.service)
    text = render(args.service, args.engine_port, samples)
    path = os.path.join(args.dir, name)
    changed = figures_of(textfile.current_text(path)) != figures_of(text)
    # Behind no router there is no rotation to be in: a sample left from routers goes.
    rotation = textfile.file_name(args.service, "rotation")
    stale = args.no_routers and os.path.exists(os.path.join(args.dir, rotation))
    if args.check:
        said = "would change" if changed or stale else "is up to date"
        print("metrics textfile: %s %s" % (path, said), flush=True)
    else:
        if changed:
            path = textfile.write_atomically(args.dir, name, text)
            print("metrics textfile: %d samples in %s" % (len(samples), path), flush=True)
        else:
            print("metrics textfile: %s is up to date" % path, flush=True)
        if stale and textfile.removed(args.dir, rotation):
            print("metrics textfile: no router: %s removed" % rotation, flush=True)
    return result.emit(status.READY, path=path, samples=len(samples), changed=bool(changed or stale))


if __name__ == "__main__":
    sys.exit(main())
