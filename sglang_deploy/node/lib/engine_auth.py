"""The server's API key (SGLang's --api-key), as every request of our scripts to it sends it.

With an API key, SGLang 0.5.23 answers every endpoint but /health*, /ready* and /metrics* 401
without `Authorization: Bearer <key>` (srt/utils/auth.py, decide_request_auth): /v1/models,
/ping, /get_load, /server_info and chat completions included. The key is a profile's secret with
`server_arg: api-key`; on the node it lives in the env file (root's, 0600), which the unit gives
the server through a --config file written at its start (node/secret_args.py). A script that
asks the server takes the env file and the secret's variable name, never the value:

    --api-key-env-file /etc/sglang/sglang.env --api-key-var SGLANG_API_KEY    (add_arguments)

and reads the key itself (key_of; our scripts run as root). Without the flags, or with the
variable unset or empty (an optional secret the operator did not export: the server runs
without a key too), nothing is sent. `headers` and `opener` are the one place that sets the
header: decode_rate.py's http.client requests take `headers(key)`, every urllib request to the
server goes through `opener(key)` (no proxy, no redirect followed: the key goes to the server
asked and nowhere else). `masked` takes a key out of a text our scripts print (the journal
lines the gate shows: SGLang logs its server_args, api_key included).

Standard library only. `inline_source()` is this module with envfile.py before it, as one
`python3 -c` program (facts/serving.py, facts/fleet.py ask the server that way).
"""

import os
import re
import sys
import urllib.request

if __package__:
    from .envfile import read_value
elif "read_value" not in globals():  # lib/ itself on sys.path (pasted after envfile.py: defined)
    from envfile import read_value

MASK = "***"
# What an HTTP header carries unchanged and a Bearer token may be: printable ASCII, no blank.
SENDABLE = re.compile(r"[\x21-\x7e]+")
# A key's value where SGLang (or anything) prints it by name: server_args' `'api_key': '...'`
# or `api_key='...'`, a command line's `--api-key ...`. None stays None: there is no key.
_NAMED = re.compile(
    r"""(?<![\w-])(['"]?(?:admin_)?api_key['"]?\s*[:=]\s*)('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\s,)}]+)"""
    r"""|(?<![\w-])(--(?:admin-)?api-key(?:=|\s+))(\S+)"""
)


def add_arguments(parser):
    """The flags of a script that asks the server (see the module's docstring)."""
    group = parser.add_argument_group("the server's API key (lib/engine_auth.py)")
    group.add_argument("--api-key-env-file", metavar="PATH", help="the env file holding the key")
    group.add_argument("--api-key-var", metavar="NAME", help="the key's variable in it")


def key_of(args):
    """The key the flags name, or None (no flags; the variable unset or empty). A file that
    cannot be read, or a value no header can carry, is said on stderr (never the value)."""
    path, name = getattr(args, "api_key_env_file", None), getattr(args, "api_key_var", None)
    if not (path and name):
        return None
    try:
        value = read_value(path, name)
    except OSError as exc:
        print("warning: cannot read the API key (%s in %s): %s" % (name, path, exc), file=sys.stderr)
        return None
    if value and not SENDABLE.fullmatch(value):
        print("warning: %s in %s is not printable ASCII: not sent" % (name, path), file=sys.stderr)
        return None
    return value or None


def headers(key):
    """The header that authorizes a request with ``key`` ({} without a key)."""
    return {"Authorization": "Bearer " + key} if key else {}


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, hdrs, newurl):
        return None  # the 3xx is the answer (an HTTPError)


def opener(key=None):
    """A urllib opener for the server: no proxy, no redirect, ``key``'s header on every request."""
    found = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect)
    found.addheaders = found.addheaders + list(headers(key).items())
    return found


def masked(text, key=None):
    """``text`` with ``key`` and every API key printed by name (see _NAMED) replaced by MASK."""
    if key:
        text = text.replace(key, MASK)
    return _NAMED.sub(_mask, text)


def _mask(match):
    if match.group(1):
        value = match.group(2)
        if value == "None":
            return match.group(0)
        quote = value[0] if value[0] in "'\"" else ""
        return match.group(1) + quote + MASK + quote
    return match.group(3) + MASK


def inline_source():
    """envfile.py and this module as one standalone program's text, for `python3 -c`."""
    here = os.path.dirname(os.path.abspath(__file__))
    parts = []
    for name in ("envfile.py", "engine_auth.py"):
        with open(os.path.join(here, name)) as f:
            parts.append(f.read())
    return "\n".join(parts)
