"""The one way a command line of our on-node scripts (sglang_deploy/node/, uploaded to the
node) is built: ``<python> <directory>/<script> <args>``, every word quoted for the shell. The
modules beside this one name each script's arguments; every script answers with its result
line (node/lib/result.py)."""

import posixpath
import shlex


def quoted(*words):
    """``words`` as one shell string, each quoted (a directory or value a shell must not split
    or expand)."""
    return " ".join(shlex.quote(str(word)) for word in words)


def script(python, directory, name, *args):
    """``python`` running our script ``name`` (a path under ``directory``, e.g. ``lib/x.py``)
    with ``args``."""
    return f"{shlex.quote(python)} {shlex.quote(directory)}/{name} {quoted(*args)}".rstrip()


def inline(source, *args):
    """``python3 -c SOURCE ARGS``: a script's text run before our scripts are on the node."""
    return f"python3 -c {shlex.quote(source)} {quoted(*args)}".rstrip()


def optional(flag, *args):
    """``args`` when ``flag`` is set (an optional flag and its value), else nothing."""
    return list(args) if flag else []


def script_path(directory, name):
    """Where one of our scripts lies on the node (to test that it is there yet)."""
    return posixpath.join(directory, name)


def api_key_args(env_file, name):
    """The flags with which a script that asks the server reads the API key it sends
    (node/lib/engine_auth.py): the env file and the key's variable, never the value; none
    without a key (``name`` None)."""
    return ["--api-key-env-file", env_file, "--api-key-var", name] if name else []


def textfile_args(service, engine_port, directory=None):
    """The flags of a script that writes a sample of its own into the node exporter's textfile
    directory (node/lib/textfile.py: rotation.py, drift.py, preflight.py); ``directory``: none
    is Debian's."""
    return [
        "--textfile-service",
        service,
        "--textfile-port",
        engine_port,
        *optional(directory, "--textfile-dir", directory),
    ]
