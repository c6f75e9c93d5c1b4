"""The fleet's gateway on sandbox nodes: smg installed from its lock (sglang-router, its former
name, refused before any host changes), smg's probe port answering, and a rolling change
drained through smg's Draining state losing no request.

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
RETIRED = ("--data", 'router_packages=["sglang-router==0.3.2"]')


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
    reason="smg installed from its locked wheelhouse on the router node, after a refused run, in front of "
    "three nodes deployed with it"
)
def test_the_gateway_is_smg_from_its_lock_and_sglang_router_is_refused(profile_dir):  # noqa: F811
    names, ports, router, router_port = fleet()
    subprocess.run(["make", "-s", "router-wheels", "ROUTER_PIN=smg==1.13.0"], cwd=REPO_ROOT, check=True)
    refused = fleet_deploy(names, router, args=RETIRED)
    assert refused.returncode != 0, refused.output[-4000:]
    assert (
        "router_packages: sglang-router is retired; smg is the gateway: router_packages: [smg==1.13.0]"
        in (refused.output)
    )

    deployed = fleet_deploy(names, router)
    assert deployed.returncode == 0, deployed.output[-4000:]
    smg = planned()
    assert "smg.launch_router" in exec_start(router) and f"{smg.venv}/bin/python" in exec_start(router)
    assert ssh(router, "systemctl is-active sglang-router.service").strip() == "active"
    assert sorted(router_view(router_port).values()) == [True] * len(names)
    # The venv holds exactly smg's lock.
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
