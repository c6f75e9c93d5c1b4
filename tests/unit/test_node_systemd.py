"""systemctl/journalctl helpers: parsing and argument building."""

import json
import sys
import time

from sglang_deploy.node.lib import systemd

SHOW = """\
LoadState=loaded
ActiveState=active
SubState=running
MainPID=41377
ExecMainStatus=0
ExecMainCode=0
NRestarts=2
InvocationID=6c2b8c3a9f0e4f1c9d2e0b7a5f3c1d22
ExecMainStartTimestampMonotonic=8712349871
ControlGroup=/system.slice/sglang.service
Environment=A=1 B=2
"""


def test_parse_show():
    props = systemd.parse_show(SHOW)
    assert props["MainPID"] == "41377" and props["NRestarts"] == "2"
    assert props["Environment"] == "A=1 B=2"


def test_describe_exit():
    assert (
        systemd.describe_exit({"ExecMainCode": "1", "ExecMainStatus": "1"})
        == "main process exited with status 1"
    )
    assert (
        systemd.describe_exit({"ExecMainCode": "2", "ExecMainStatus": "9"})
        == "main process killed by signal 9"
    )
    assert "core dumped" in systemd.describe_exit({"ExecMainCode": "3", "ExecMainStatus": "11"})


def test_start_matches():
    assert systemd.start_matches("sglang.service", {"InvocationID": "abc"}) == [
        "_SYSTEMD_INVOCATION_ID=abc",
        "+",
        "INVOCATION_ID=abc",
    ]
    started = int((time.monotonic() - 100) * 1e6)
    args = systemd.start_matches("sglang.service", {"ExecMainStartTimestampMonotonic": str(started)})
    assert args[:3] == ["-u", "sglang.service", "--since"]
    assert abs(int(args[3][1:]) - (time.time() - 101)) <= 2


def fake(tmp_path, name, body):
    path = tmp_path / name
    path.write_text("#!%s\n%s" % (sys.executable, body))
    path.chmod(0o755)
    return str(path)


def test_unit_show_and_journal_read_with_fakes(tmp_path):
    systemctl = fake(
        tmp_path,
        "systemctl",
        "import sys\nprint(%r, end='')\nopen(%r, 'w').write(' '.join(sys.argv[1:]))\n"
        % (SHOW, str(tmp_path / "args")),
    )
    props = systemd.unit_show("sglang.service", ("MainPID", "InvocationID"), systemctl=systemctl)
    assert props["InvocationID"].startswith("6c2b")
    assert (tmp_path / "args").read_text() == "show --no-pager -p MainPID -p InvocationID -- sglang.service"
    entries = [
        {"__CURSOR": "s=1", "__MONOTONIC_TIMESTAMP": "5000000", "MESSAGE": "Load weight begin."},
        {"__CURSOR": "s=2", "MESSAGE": [104, 105, 255]},
        {"__CURSOR": "s=3", "MESSAGE": "two\nlines"},
    ]
    journalctl = fake(
        tmp_path,
        "journalctl",
        "import sys\nopen(%r, 'w').write(' '.join(sys.argv[1:]))\nprint(%r)\n"
        % (str(tmp_path / "jargs"), "\n".join(json.dumps(e) for e in entries)),
    )
    got, cursor = systemd.journal_read(["-u", "sglang.service"], "s=0", journalctl=journalctl)
    assert cursor == "s=3"
    assert got == [(5.0, "Load weight begin."), (None, "hi\ufffd"), (None, "two"), (None, "lines")]
    assert (tmp_path / "jargs").read_text().endswith("-u sglang.service --after-cursor s=0")
