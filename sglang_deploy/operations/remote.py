"""Commands on a node as the operation that runs them would: the one place that hands the
current operation's privilege arguments (pyinfra's ``_sudo``, ``_sudo_user``, ``_sudo_password``,
``_su_user``, ``_doas``, ...) to commands our FunctionCommands and SSH channels run themselves,
and that writes a secret into place without it ever being in a file another user can read.

pyinfra passes an operation's global arguments to the commands the operation yields, but a
FunctionCommand's own ``host.run_shell_command`` calls get none of them: without this, a login
user with sudo (``ubuntu``, ``admin``) would run our restart cycle, staging and lock helper as
itself.
"""

from __future__ import annotations

import base64
import hashlib
import shlex

from pyinfra.api import StringCommand
from pyinfra.api.arguments import auth_argument_meta, pop_global_arguments

# The arguments that decide who a command runs as (pyinfra's "privilege & user escalation"
# ones); `_temp_dir` too: where pyinfra puts a sudo password's askpass helper.
PRIVILEGE_KEYS = (*auth_argument_meta, "_temp_dir")
ESCALATION_KEYS = ("_sudo", "_su_user", "_doas", "_dzdo")


def arguments(host) -> dict:
    """The privilege arguments a command run now on ``host`` must get: those of the operation
    being run there (its own, the host's data, `--sudo`, ...), or, outside one (another
    member of a serving group, run from its rank 0), what the host's data and the run's
    config say. Unset ones (false, empty) are left out."""
    current = getattr(host, "current_op_global_arguments", None)
    if current is None:
        state = getattr(host, "state", None)
        current = pop_global_arguments(state, host, {})[0] if state is not None else {}
    return {key: current[key] for key in PRIVILEGE_KEYS if current.get(key)}


def escalates(host) -> bool:
    """Whether commands on ``host`` run as another user than the login (sudo, su, ...)."""
    found = arguments(host)
    return any(found.get(key) for key in ESCALATION_KEYS)


def run(host, command, **kwargs):
    """``host.run_shell_command`` with the current operation's privilege arguments (``kwargs``
    win); ``command``: a StringCommand or a command line."""
    if not isinstance(command, StringCommand):
        command = StringCommand(command)
    return host.run_shell_command(command, **{**arguments(host), **command.connector_arguments, **kwargs})


def unix_command(host, command: str) -> str:
    """The command line pyinfra would send for ``command`` on ``host`` (sudo and all), for a
    channel we open ourselves (the deploy lock's)."""
    from pyinfra.connectors.util import make_unix_command_for_host

    return make_unix_command_for_host(
        host.state, host, StringCommand(command), **arguments(host)
    ).get_raw_value()


def rsync_path(host):
    """rsync's ``--rsync-path`` for a copy into root's directories: None as root, "sudo -n
    rsync" with a passwordless sudo to root; False when rsync cannot become root by itself
    (a sudo password, su, doas, another sudo user): copy another way."""
    found = arguments(host)
    if not any(found.get(key) for key in ESCALATION_KEYS):
        return None
    if set(found) - {"_sudo", "_preserve_sudo_env", "_use_sudo_login", "_temp_dir"}:
        return False
    return "sudo -n rsync"


def secret_write(dest: str, content: str, mode: str = "0600", owner: str = "root:root") -> StringCommand:
    """The command that writes ``content`` to ``dest`` whole, its bytes sent on the command's
    stdin (never its command line, never a file of the login user's or pyinfra's /tmp copy):
    into a file beside ``dest`` created 0600 (umask 077) as the content lands, checked
    against its SHA-256 (sent first on stdin: a dropped link leaves a short file, never a
    short secret in place), chowned, set to ``mode``, flushed and renamed over ``dest``. On
    any failure, and on SIGHUP/INT/TERM, the file beside it is removed."""
    payload = content.encode()
    stdin = hashlib.sha256(payload).hexdigest() + "\n" + base64.encodebytes(payload).decode()
    return StringCommand(secret_write_script(dest, mode, owner), _stdin=stdin)


NEW_SUFFIX = ".sglang-deploy-new"


def secret_write_script(dest: str, mode: str = "0600", owner: str = "root:root") -> str:
    """secret_write's shell script (stdin: the content's SHA-256 line, then its base64)."""
    directory, name = dest.rsplit("/", 1)
    new = shlex.quote(f"{directory}/.{name}{NEW_SUFFIX}")
    said = shlex.quote(f"{dest}: the content arrived incomplete; nothing was written")
    chown = f'chown {shlex.quote(owner)} "$new"\n' if owner else ""
    return (
        "set -e\n"
        "umask 077\n"
        f"new={new}\n"
        "trap 'rm -f \"$new\"' EXIT\n"
        "trap 'exit 129' HUP INT TERM PIPE\n"
        'rm -f "$new"\n'
        f"incomplete() {{ echo {said} >&2; exit 1; }}\n"
        "IFS= read -r want || incomplete\n"
        'base64 -d > "$new" 2>/dev/null || incomplete\n'
        'got=$(sha256sum < "$new")\n'
        '[ "${got%% *}" = "$want" ] || incomplete\n'
        f"{chown}"
        f'chmod {shlex.quote(mode)} "$new"\n'
        'sync "$new"\n'
        f'mv -f "$new" {shlex.quote(dest)}\n'
    )
