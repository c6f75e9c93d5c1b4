"""Real GPU nodes, from inventory/hosts.yml (or the file $SGLANG_DEPLOY_HOSTS names), the SGLang
routers in front of them (its `routers:` section: the `routers` group) and the hosts that run
Prometheus over them (its `monitoring:` section: the `monitoring` group).

The file's format is documented in inventory/hosts.example.yml.
"""

from sglang_deploy.cli import exit_on_deploy_error
from sglang_deploy.plan.hosts import gpu_hosts, gpu_monitoring, gpu_routers

with exit_on_deploy_error():
    gpu = gpu_hosts()
    routers = gpu_routers()
    monitoring = gpu_monitoring()
