"""Local sandbox nodes (`make sandbox`): systemd-nspawn containers reached over SSH; those made
with `--routers N` run SGLang's router (the `routers` group), those made with `--monitoring N`
Prometheus over the others (the `monitoring` group)."""

from sglang_deploy.cli import exit_on_deploy_error
from sglang_deploy.plan.hosts import sandbox_hosts, sandbox_monitoring, sandbox_routers

with exit_on_deploy_error():
    sandbox = sandbox_hosts()
    routers = sandbox_routers()
    monitoring = sandbox_monitoring()
