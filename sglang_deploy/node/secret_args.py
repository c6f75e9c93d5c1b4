"""The server's secret arguments (SGLang's --api-key, --admin-api-key) as the YAML file its
--config reads, written at every start by the unit's ExecStartPre=, so that no key is on a
command line (ExecStart=, /proc/<pid>/cmdline) or in the unit file (0644).

    python3 secret_args.py --out /run/sglang-env/sglang/secret-args.yaml \\
        --arg api-key=SGLANG_API_KEY [--arg admin-api-key=SGLANG_ADMIN_API_KEY]

Run by systemd as the service user (no `+`: the file is that user's), after it created the
unit's RuntimeDirectory= (0700, the user's, removed when the service stops), with the env
file's variables in the environment (EnvironmentFile=). Each `--arg ARG=VARIABLE` becomes
`"ARG": value` of one JSON object (JSON is YAML: SGLang 0.5.23 reads the file with
yaml.safe_load, srt/utils/server_args_config_parser.py), written whole with mode 0600 (a
temporary file in the directory, renamed over it). A variable unset or empty (an optional
secret the operator did not export) is left out: the server then starts without that argument,
and `{}` is a configuration SGLang accepts. SGLang puts the file's arguments before the command
line's, so a flag on the command line would win; the profile lint keeps these off it.

Prints the arguments written (names, never a value), then the result line (lib/result.py).
Preflight parses the argv before the start, where the file is not yet written: `placeholder`
gives the engine's parser an empty one (`{}`) in its place.
Exit status 0; 2 usage; 1 (UNEXPECTED) when a value is not printable ASCII (no HTTP header
could carry it: our probes could not send it) or the file cannot be written.
"""

import argparse
import contextlib
import json
import os
import sys
import tempfile

if __package__:
    from .lib import engine_auth, env_records, result, status
    from .lib.guard import guarded
else:  # run as a script: our scripts' directory is on sys.path
    from lib import engine_auth, env_records, result, status
    from lib.guard import guarded


def collect(pairs, environ):
    """{server argument: value} of ``pairs`` ((argument, variable)) set and non-empty in
    ``environ``; SystemExit naming the variable whose value cannot be sent."""
    found = {}
    for argument, variable in pairs:
        value = environ.get(variable)
        if not value:
            continue
        if not engine_auth.SENDABLE.fullmatch(value):
            raise SystemExit("%s (--%s) is not printable ASCII without blanks" % (variable, argument))
        found[argument] = value
    return found


def write(path, found):
    """``found`` as one JSON object at ``path``, mode 0600, replaced whole."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(dir=directory, prefix=".secret-args-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:  # mkstemp: 0600 already
            json.dump(found, f, sort_keys=True)
            f.write("\n")
        os.rename(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


@contextlib.contextmanager
def placeholder(argv):
    """``argv`` with its --config of our secret arguments (env_records.SECRET_ARGS) naming an
    empty file of the same kind, for as long as the context lasts (preflight's parse)."""
    at = [i + 1 for i, arg in enumerate(argv[:-1]) if arg == "--config"]
    if not (at and os.path.basename(argv[at[0]]) == env_records.SECRET_ARGS):
        yield argv
        return
    with tempfile.TemporaryDirectory(prefix="sglang-deploy-preflight-") as directory:
        path = os.path.join(directory, env_records.SECRET_ARGS)
        write(path, {})
        yield argv[: at[0]] + [path] + argv[at[0] + 1 :]


def pair(text):
    argument, equals, variable = text.partition("=")
    if not (equals and argument and variable):
        raise argparse.ArgumentTypeError("%r is not ARG=VARIABLE" % text)
    return argument, variable


@guarded
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the YAML file --config names")
    parser.add_argument(
        "--arg", type=pair, action="append", default=[], metavar="ARG=VARIABLE", help="a server argument"
    )
    args = parser.parse_args(argv)
    found = collect(args.arg, os.environ)
    write(args.out, found)
    unset = [argument for argument, _ in args.arg if argument not in found]
    print(
        "secret_args: %s: %s%s"
        % (
            args.out,
            ", ".join("--" + a for a in sorted(found)) or "no argument",
            "; unset: " + ", ".join("--" + a for a in unset) if unset else "",
        ),
        flush=True,
    )
    return result.emit(status.READY, None, path=args.out, arguments=sorted(found), unset=unset)


if __name__ == "__main__":
    sys.exit(main())
