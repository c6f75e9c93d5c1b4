"""Run pyinfra's CLI counting what goes over SSH: `python3 bench/ssh_count.py OUT.json <pyinfra
args>`. Every command (an exec request on an SSH channel: facts, operations, the deploy lock)
and every file transfer (an SFTP subsystem) is counted, per host port, in OUT.json.

paramiko is patched in this process only; pyinfra itself runs unchanged.
"""

import json
import sys
from collections import Counter

import paramiko

COUNTS = {"commands": Counter(), "transfers": Counter()}


def _counting(kind, method):
    def wrapper(channel, *args, **kwargs):
        peer = channel.get_transport().getpeername()
        COUNTS[kind][f"{peer[0]}:{peer[1]}"] += 1
        with open(OUT, "w") as out:  # written each time: the run may end in os._exit
            json.dump({k: dict(v) for k, v in COUNTS.items()}, out)
        return method(channel, *args, **kwargs)

    return wrapper


if __name__ == "__main__":
    OUT, sys.argv = sys.argv[1], ["pyinfra", *sys.argv[2:]]
    paramiko.Channel.exec_command = _counting("commands", paramiko.Channel.exec_command)
    paramiko.Channel.invoke_subsystem = _counting("transfers", paramiko.Channel.invoke_subsystem)
    from pyinfra_cli.main import main

    main()
