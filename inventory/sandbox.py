"""Local sandbox nodes (`make sandbox`): systemd-nspawn containers reached over SSH."""

from sglang_deploy.inventory import sandbox_hosts
from sglang_deploy.cli import exit_on_deploy_error

with exit_on_deploy_error():
    sandbox = sandbox_hosts()
