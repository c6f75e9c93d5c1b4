"""What each process of a server found in its environment, as the start-up hook recorded it.

SGLang titles its children with the `setproctitle` C extension (`sglang::scheduler_TP0`,
`sglang::detokenizer`), which reuses the process's argv *and environ* memory for the title:
/proc/<pid>/environ of a titled process reads as NUL bytes, so a worker's environment cannot
be read from outside any more. The start-up hook (templates/sglang_env_hook.py.j2) therefore
runs in every process of the engine venv's interpreter before SGLang's code, and, where
RECORDS_VAR names a directory, writes `<dir>/<pid>.json`:

    {"pid": 1234, "starttime": 56789, "variables": {"NCCL_PROTO": "LL", "NCCL_ALGO": null},
     "names": ["HOME", "NCCL_ALGO", ...]}

with the values of the profile's `env` variables (never a secret: the hook knows none) as that
process holds them once the hook ran (null: not set), and the names, never the values, of every
variable it holds. `starttime` is field 22 of
/proc/<pid>/stat, so a record is never taken for another process that got the same pid.

The unit gives the directory per start: systemd creates `RuntimeDirectory=` (mode 0700, the
service user's) when the service starts and removes it when it stops, so the records are
those of the running start only. workers.py reads them here. The same directory holds the
server's secret arguments for its --config (SECRET_ARGS, written by node/secret_args.py).
"""

import json
import os

if __package__:
    from . import procs
else:  # run as a script: our scripts' directory is on sys.path
    import procs

# The variable through which the unit tells the hook where to write (the hook writes nothing
# without it: a python run by hand from the venv leaves no record).
RECORDS_VAR = "SGLANG_DEPLOY_ENV_RECORDS"
# systemd's runtime directory root for system units (%t) and our folder in it.
RUNTIME_ROOT = "/run"
RUNTIME_FOLDER = "sglang-env"
# The server's secret arguments (--api-key ...), the YAML file its --config names.
SECRET_ARGS = "secret-args.yaml"


def runtime_directory(service):
    """The unit's RuntimeDirectory= (relative to /run) for ``service``."""
    return f"{RUNTIME_FOLDER}/{service}"


def records_dir(service):
    """Where the processes of ``service``'s running start record their environment."""
    return f"{RUNTIME_ROOT}/{runtime_directory(service)}"


def secret_args_path(service):
    """The file ``service``'s server reads its secret arguments from (--config), per start."""
    return "%s/%s" % (records_dir(service), SECRET_ARGS)


def service_of(unit):
    """``sglang.service`` -> ``sglang``."""
    return unit[: -len(".service")] if unit.endswith(".service") else unit


def read(directory, pid, proc=procs.PROC):
    """The record of live process ``pid``: its variables, or None when it wrote none (the hook
    did not run in it) or the record is another process's that had the same pid."""
    record = read_record(directory, pid, proc)
    variables = record.get("variables") if record else None
    return variables if isinstance(variables, dict) else None


def read_record(directory, pid, proc=procs.PROC):
    """The whole record of live process ``pid`` (see the module's docstring), or None."""
    try:
        with open(os.path.join(directory, "%d.json" % pid)) as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    stat = procs.read_stat(pid, proc)
    if not isinstance(record, dict) or stat is None or record.get("starttime") != stat["starttime"]:
        return None
    return record
