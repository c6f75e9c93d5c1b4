"""`make status` on a fleet behind SGLang's router: 3 serving nodes and a router node.

python3 sandbox/sandbox.py up --nodes 3 --routers 1 && python3 -m pytest -m fleet tests/e2e/test_status.py
"""

import json
import subprocess
import sys
import time

import pytest

from .sandbox import REPO_ROOT, ssh
from .test_fleet import deployed, fleet  # noqa: F401 (a fixture)

sys.path.insert(0, str(REPO_ROOT / "bench"))
from fleet_load import router_view  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.fleet]
EXIT_UNREACHABLE = 3


def status(*args, inventory="inventory/sandbox.py"):
    done = subprocess.run(
        [sys.executable, "-m", "sglang_deploy.status", inventory, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, done.stdout + done.stderr


def as_json(*args, **kwargs):
    code, output = status("--json", *args, **kwargs)
    return code, json.loads(output)


def test_the_fleet_on_one_screen(deployed):  # noqa: F811
    names, ports, router, router_port = deployed
    code, body = as_json()
    assert code == 0, body
    by_host = {row["host"]: row for row in body["nodes"]}
    assert sorted(by_host) == sorted(names)
    for name in names:
        row = by_host[name]
        assert row["answered"] and row["unit"]["active"] == "active" and row["ping"] is True
        assert row["rotation"]["state"] == "in" and row["rotation"]["routers"] == {router: "healthy"}
        assert row["last_good"]["profile"] == "sandbox" and row["engine"]["link"].startswith("sglang-")
        assert row["engine"]["running"] == row["engine"]["link"] == row["last_good"]["venv"]
        assert row["decode"]["decode_tok_s"] > 0
        assert "nvidia-smi not found" in json.dumps(row["passport"])  # kept, its GPUs not checked
    assert body["routers"][0]["answered"] and body["routers"][0]["healthy"] == len(names)
    assert body["took_s"] < 10
    code, screen = status("--wide")
    assert code == 0 and all(f"\n{name} " in screen for name in names), screen


def test_a_stopped_node_shows_stopped_and_out_of_rotation(deployed):  # noqa: F811
    names, ports, router, router_port = deployed
    stopped = names[-1]
    ssh(stopped, "systemctl stop sglang.service")
    try:
        deadline = time.monotonic() + 60
        while True:
            code, body = as_json()
            row = next(r for r in body["nodes"] if r["host"] == stopped)
            if row["rotation"]["state"] == "out" or time.monotonic() > deadline:
                break
            time.sleep(1)
        # SGLang's processes die by signal when stopped: systemd may call that failed.
        assert code == 0 and row["unit"]["active"] in ("inactive", "failed") and row["ping"] is False
        assert row["rotation"]["state"] == "out", row
    finally:
        ssh(stopped, "systemctl start sglang.service")
        deadline = time.monotonic() + 120
        while sorted((router_view(router_port) or {}).values()) != [True] * len(names):
            assert time.monotonic() < deadline, "the node did not come back into rotation"
            time.sleep(1)


def test_an_unreachable_host_is_a_row_saying_why(deployed, tmp_path):  # noqa: F811
    inventory = tmp_path / "with_ghost.py"
    inventory.write_text(
        "from sglang_deploy.plan.hosts import sandbox_hosts, sandbox_routers\n"
        "sandbox = sandbox_hosts()\n"
        "sandbox.append(('ghost', {**sandbox[0][1], 'ssh_port': 1}))\n"
        "routers = sandbox_routers()\n"
    )
    code, body = as_json(inventory=str(inventory))
    assert code == EXIT_UNREACHABLE
    ghost = next(r for r in body["nodes"] if r["host"] == "ghost")
    assert not ghost["answered"] and ghost["error"].startswith("unreachable: ssh: connect to host")
    assert all(r["answered"] for r in body["nodes"] if r["host"] != "ghost")
    code, screen = status(inventory=str(inventory))
    assert code == EXIT_UNREACHABLE and "ghost  unreachable: ssh: connect to host" in screen, screen
