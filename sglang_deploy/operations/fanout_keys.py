"""Fan-out's credentials (operations/fanout.py runs the trees).

Per run and digest the controller makes an ed25519 key pair (ssh-keygen, in a 0700
temporary directory removed at once). The public key goes into a parent's login user's
authorized_keys only once that parent's copy is verified (read-only, that directory only,
``restrict``); the private key goes to each child in a 0600 file in a 0700 directory under the
run directory, written from stdin (remote.secret_write). The parent's SSH host keys, read by
the controller over its own authenticated connection, are pinned in the child's known_hosts
(``HostKeyAlias``): no trust on first use. When the last node of the tree settled, every grant
is revoked and each child removed its key directory (also when its copy failed);
``fanout_cleanup`` removes what a run that died left (every host, every run, a no-op when
nothing is left).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from pyinfra import host, logger
from pyinfra.api import StringCommand, operation

from sglang_deploy.facts.fanout import FanoutLeftovers
from sglang_deploy.node.lib import result, status
from sglang_deploy.operations import remote
from sglang_deploy.plan.commands import fanout_access_command
from sglang_deploy.run_state import host_settings


def make_key_pair(comment: str) -> tuple[str, str]:
    """(private, public) ed25519 key pair, made in a 0700 directory removed at once."""
    scratch = tempfile.mkdtemp(prefix="sglang-deploy-fanout-")
    try:
        path = os.path.join(scratch, "key")
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path],
            check=True,
            capture_output=True,
        )
        return Path(path).read_text(), Path(path + ".pub").read_text().strip()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def grant(fanout, source) -> bool:
    """Grant ``fanout``'s key on ``source`` (once; its copy is verified by now): False when
    it cannot serve (no rrsync, its directory gone, unreachable)."""
    if source not in fanout.granted:
        parent = fanout.state.inventory.get_host(source)
        _, public = fanout.key_pair()
        command = fanout_access_command(
            scripts_dir(fanout, source),
            "grant",
            user=login(parent),
            model_dir=fanout.arrived[source].node_dir,
            marker=fanout.marker,
        )
        try:
            ok, output = remote.run(parent, StringCommand(command, _stdin=public + "\n"))
            found = result.parse(output.stdout_lines) or {}
            keys_ok, keys_output = remote.run(
                parent, fanout_access_command(scripts_dir(fanout, source), "hostkeys")
            )
            keys = (result.parse(keys_output.stdout_lines) or {}).get("keys") or []
        except Exception as exc:  # unreachable: not a source
            found, keys, ok = {"cause": f"{type(exc).__name__}: {exc}"}, [], False
        if ok and found.get("status") == status.READY and keys:
            fanout.granted[source] = keys
        else:
            logger.warning(f"fan-out: {source} cannot serve: {found.get('cause') or 'no host keys'}")
            fanout.granted[source] = False
    return bool(fanout.granted[source])


def scripts_dir(fanout, name):
    return f"{host_settings(fanout.state.inventory.get_host(name).data).sglang_deploy_dir}/node"


def login(host_) -> str:
    return str(host_.data.get("ssh_user") or "root")


def alias(name: str) -> str:
    return "sglang-deploy-" + re.sub(r"[^A-Za-z0-9._-]", "_", name)


def known_hosts_text(source: str, keys) -> str:
    return "".join(f"{alias(source)} {key}\n" for key in keys)


def revoke_all(state, fanout):
    """Every grant of ``fanout`` revoked (its last node settled); what fails is said, and
    fanout_cleanup removes it next time."""
    for source, granted in list(fanout.granted.items()):
        if not granted:
            continue
        parent = state.inventory.get_host(source)
        command = fanout_access_command(
            scripts_dir(fanout, source), "revoke", user=login(parent), marker=fanout.marker
        )
        try:
            remote.run(parent, command)
        except Exception as exc:
            logger.warning(f"fan-out: revoking the key on {source} failed ({exc}); fanout_cleanup removes it")


@operation()
def fanout_cleanup(scripts_dir: str, run_dir: str, user: str):
    """
    Remove what a fan-out left on this node.

    What is left: authorized_keys lines of ours, key directories (a run that died before its end);
    nothing when none is left.

    + scripts_dir: where our on-node scripts are
    + run_dir: the deploy's runtime directory
    + user: the login user whose authorized_keys a grant went into

    **Examples:**

    .. code:: python

        sglang.fanout_cleanup(
            name="Fan-out keys removed",
            scripts_dir=plan.scripts.directory,
            run_dir=plan.settings.run_dir,
            user="root",
        )
    """
    left = host.get_fact(FanoutLeftovers, scripts_dir=scripts_dir, user=user, run_dir=run_dir)
    if not left or (not left.get("lines") and not left.get("key_dirs")):
        host.noop("no fan-out keys left on this node")
        return
    yield fanout_access_command(scripts_dir, "clean", user, run_dir=run_dir)
