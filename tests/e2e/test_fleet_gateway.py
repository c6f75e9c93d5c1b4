"""The fleet's gateway on sandbox nodes: a router host moved from sglang-router 0.3.2 to smg
by one ordinary deploy, smg's probe port answering, and a rolling change drained through
smg's Draining state losing no request.

python3 sandbox/sandbox.py up --nodes 3 --routers 1 && python3 -m pytest -m fleet tests/e2e
"""

import json
import subprocess
import urllib.error
import urllib.request

import pytest

from sglang_deploy.plan.fleet import router_host
from sglang_deploy.plan.hosts import SANDBOX_PROBE_OFFSET, deploy_defaults

from .sandbox import REPO_ROOT, deploy, profile_dir, ssh, unit_start  # noqa: F401 (a fixture)
from .test_fleet import fleet, router_view, sandbox_with_env, under_load

pytestmark = [pytest.mark.e2e, pytest.mark.fleet]
OLD = ("--data", 'router_packages=["sglang-router==0.3.2"]', "--data", "router_health_check_port=null")


def fleet_deploy(names, router, profile="sandbox", args=()):
    return deploy({**{name: profile for name in names}, router: "sandbox"}, args=args)


def planned(**settings):
    """A router with these settings as planned: its venv named after its gateway and its lock."""
    data = {**deploy_defaults(), "role": "router", "ssh_hostname": "127.0.0.1", **settings}
    return router_host("router", data)


def exec_start(router):
    return ssh(router, "systemctl show -p ExecStart --value sglang-router.service")


def probe(router_port):
    """smg's probe port on the sandbox router (router_health_check_port, plan/hosts.py)."""
    url = f"http://127.0.0.1:{router_port - SANDBOX_PROBE_OFFSET}/readiness"
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=3) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


@pytest.mark.over_ceiling(
    reason="two gateways installed from their locked wheelhouses on the router node, each followed by "
    "a rolling change of the three nodes behind it (181 s on 2 shared cores)"
)
def test_moving_the_router_from_sglang_router_to_smg_is_one_ordinary_deploy(profile_dir):  # noqa: F811
    names, ports, router, router_port = fleet()
    for pin in ("sglang-router==0.3.2", "smg==1.13.0"):
        subprocess.run(["make", "-s", "router-wheels", f"ROUTER_PIN={pin}"], cwd=REPO_ROOT, check=True)
    old = fleet_deploy(names, router, args=OLD)
    assert old.returncode == 0, old.output[-4000:]
    assert "sglang_router.launch_router" in exec_start(router)
    assert sorted(router_view(router_port).values()) == [True] * len(names)

    starts = {name: unit_start(name) for name in names}
    moved = fleet_deploy(names, router)
    assert moved.returncode == 0, moved.output[-4000:]
    smg = planned()
    assert "smg.launch_router" in exec_start(router) and f"{smg.venv}/bin/python" in exec_start(router)
    assert ssh(router, "systemctl is-active sglang-router.service").strip() == "active"
    assert sorted(router_view(router_port).values()) == [True] * len(names)
    assert all(unit_start(name) == starts[name] for name in names), "no node restarts for the router's move"
    # The old venv is left where it was; the new one holds exactly smg's lock.
    old_venv = planned(router_packages=["sglang-router==0.3.2"]).venv
    assert ssh(router, f"test -d {old_venv} && echo kept").strip() == "kept"
    exact = f"{smg.venv}/bin/python /opt/sglang-deploy/node/exact.py --lock {smg.locked.remote_lock}"
    assert "exactly the lock's" in ssh(router, exact)
    code, body = probe(router_port)
    assert code == 200 and body["status"] == "ready", body

    again = fleet_deploy(names, router)
    assert again.returncode == 0 and again.changed == 0, again.output[-3000:]


def test_a_rolling_change_behind_smg_drains_through_draining_and_loses_no_request(profile_dir):  # noqa: F811
    names, ports, router, router_port = fleet()
    assert "smg.launch_router" in exec_start(router)
    changed = sandbox_with_env(profile_dir, "smg-rolled", SGLANG_STANDIN_LOAD_SECONDS=3)
    run, result = under_load(router_port, lambda: fleet_deploy(names, router, changed))
    assert run.returncode == 0, run.output[-4000:]
    assert result.sent > 0 and result.failed == 0, result.failures
    assert run.output.count("out of rotation") >= len(names)
    journal = ssh(
        router, "journalctl -u sglang-router.service -o cat --no-pager | grep -c 'Draining 1 worker'"
    )
    assert int(journal.strip() or 0) >= len(names), journal
    assert sorted(router_view(router_port).values()) == [True] * len(names)
