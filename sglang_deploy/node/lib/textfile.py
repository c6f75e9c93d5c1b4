"""Our files in the node exporter's textfile directory (its --collector.textfile.directory):
the text format rendered, each file written whole (a temporary file in the directory, flushed,
renamed over it: the node exporter never reads half a file), mode 0644, and rewritten only when
its text changed.

One file per writer, so that no writer rewrites (or reports as changed) what another wrote:

    sglang-deploy-<service>.prom           the deploy's figures: metrics_textfile.py, from the
                                           controller's step after serving
    sglang-deploy-<service>@rotation.prom  sglang_deploy_in_rotation: rotation.py, whenever it
                                           takes the node out of the routers or puts it back
    sglang-deploy-<service>@drift.prom     sglang_deploy_drift_detected{venv}: every drift check
                                           of the engine (drift.py for `make verify`, preflight.py
                                           for the deploy), with what it found

"@" is in no unit name (profile/fields.py UnitStem): no service's file is another's. Every series
has the labels service and engine_port (the service's engine port), which the alert rules
(templates/prometheus/sglang-alerts.rules.yml) match against the engine's scrape instance.

A script that writes a sample of its own takes --textfile-service NAME --textfile-port PORT
[--textfile-dir DIR] (add_arguments; without --textfile-service it writes nothing: the node
runs no node exporter). A sample is never worth a failed step: a write that fails is said on
stderr and the script goes on.
"""

import os
import sys
import tempfile

# Debian's prometheus-node-exporter: ARGS="--collector.textfile.directory=/var/lib/prometheus/node-exporter".
DEFAULT_DIR = "/var/lib/prometheus/node-exporter"
PREFIX = "sglang_deploy_"

# The samples a script writes of its own: {metric (without PREFIX): (its file's suffix, HELP)}.
STATE = {
    "in_rotation": (
        "rotation",
        "1 when the deploy last put the node in every router's rotation, 0 when it took it out.",
    ),
    "drift_detected": (
        "drift",
        "1 when the latest drift check found the engine venv's files differ from their wheels, else 0.",
    ),
}


def file_name(service, owner=None):
    """The service's file of the deploy's figures, or (``owner``: "rotation", "drift") of one
    script's own sample."""
    return "sglang-deploy-%s%s.prom" % (service, "@" + owner if owner else "")


def escape(value):
    return str(value).replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def render(samples, common, help_texts):
    """The file's text: HELP and TYPE (gauge) once per metric, then its samples, labels sorted.
    ``samples``: (name without PREFIX, extra labels, value); ``common``: labels of every series."""
    by_name = {}
    for name, labels, value in samples:
        by_name.setdefault(name, []).append((labels, value))
    lines = []
    for name, rows in by_name.items():
        metric = PREFIX + name
        lines += ["# HELP %s %s" % (metric, help_texts[name]), "# TYPE %s gauge" % metric]
        for labels, value in rows:
            labels = dict(labels, **common)
            pairs = ",".join('%s="%s"' % (k, escape(labels[k])) for k in sorted(labels))
            lines.append("%s{%s} %s" % (metric, pairs, repr(float(value))))
    return "".join(line + "\n" for line in lines)


def write_atomically(directory, name, text):
    """``text`` into directory/name whole: a temporary file beside it, flushed, renamed over it."""
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + name + ".", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # the node exporter runs as its own user
        path = os.path.join(directory, name)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def current_text(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def removed(directory, name):
    """directory/name removed; whether it was there."""
    try:
        os.unlink(os.path.join(directory, name))
    except FileNotFoundError:
        return False
    return True


def add_arguments(parser):
    """The flags of a script that writes a sample of its own (see the module's docstring)."""
    group = parser.add_argument_group("the node exporter's textfile (lib/textfile.py)")
    group.add_argument("--textfile-service", help="write this service's sample (none: write nothing)")
    group.add_argument("--textfile-port", type=int, help="the service's engine port (label engine_port)")
    group.add_argument("--textfile-dir", default=DEFAULT_DIR, help="the node exporter's textfile directory")


def export(args, metric, value, labels=None):
    """The script's own sample ``metric`` (a key of STATE) = ``value`` in its file, rewritten
    only when its text changed; ``value`` None: the file removed (no such state here). Whether
    the file changed; None when not asked (no --textfile-service) or the write failed (said on
    stderr)."""
    service = getattr(args, "textfile_service", None)
    if not service:
        return None
    owner, help_text = STATE[metric]
    name = file_name(service, owner)
    try:
        if value is None:
            return removed(args.textfile_dir, name)
        common = {"service": service, "engine_port": str(args.textfile_port)}
        text = render([(metric, labels or {}, value)], common, {metric: help_text})
        if current_text(os.path.join(args.textfile_dir, name)) == text:
            return False
        write_atomically(args.textfile_dir, name, text)
        return True
    except OSError as exc:
        print("textfile: %s%s not written: %s" % (PREFIX, metric, exc), file=sys.stderr, flush=True)
        return None
