"""Preflight's port check: free, ours, someone else's (named), or nobody's we can see."""

import os
import socket

from sglang_deploy.node import preflight


def test_a_free_port_passes():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert preflight.check_port(port, "sglang.service") == ("ok", "port %d is free" % port)


def test_a_port_held_by_another_process_names_it(monkeypatch):
    monkeypatch.setattr(preflight.systemd, "unit_show", lambda unit, props: {"ControlGroup": ""})
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        verdict, text = preflight.check_port(port, "sglang.service")
    assert verdict == "failed"
    assert text.startswith("port %d is held by pid %d (" % (port, os.getpid()))
    assert "python" in text  # its command line


def test_a_port_listening_with_no_owner_on_this_node_fails(monkeypatch):
    # What a node sharing the host's network sees when a host process (or a container) listens.
    monkeypatch.setattr(
        preflight.procs,
        "listening",
        lambda port: [{"addr": "127.0.0.1", "port": port, "state": "0A", "inode": 4000000000}],
    )
    assert preflight.check_port(30001, "sglang.service") == (
        "failed",
        "port 30001 is listening but no process on this node owns it "
        "(another network namespace or container?)",
    )
