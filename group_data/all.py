"""Deploy defaults for every host, in one place.

Any of these can be set per host (inventory/hosts.yml, the sandbox inventory) or for a run
(`pyinfra ... --data profile=eagle3-2step`). What the server runs is not here: that is the
profile's job (profiles/*.yml; profile defaults live in sglang_deploy/profile.py).
"""

# -- What to serve ---------------------------------------------------------------------------
# The profile: a name under profiles/ or a path to a profile file.
profile = "baseline"
# Mapping deep-merged over the profile for this host, e.g. {"service": {"port": 30001}}.
profile_overrides = {}

# -- Serving groups (one model on several nodes; sglang_deploy/serving_group.py) --------------
# Hosts with the same serving_group run one multi-node server (SGLang --nnodes, the profile's
# server_args.nnodes); None: a host serves on its own.
serving_group = None
# A member's --node-rank; None: the order of the group's hosts in the inventory (first: rank 0).
node_rank = None
# The host's address on the cluster network; rank 0's is the group's --dist-init-addr host
# (port: the profile's service.dist_init_port). None: its ssh_hostname.
cluster_address = None
# The host's cluster network interface: NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME in its env
# file (None: NCCL and gloo pick one).
socket_ifname = None
# Coordinated stop: rank 0 stops first and broadcasts the shutdown; a follower still running
# this many seconds after rank 0 is gone is killed (SGLang's followers ignore SIGTERM).
group_follower_stop_s = 20

# -- Where things go on the node -------------------------------------------------------------
# On-node scripts (gate, restart, worker check) and uploaded wheels.
sglang_deploy_dir = "/opt/sglang-deploy"
# Env files (root, 0700 directory, 0600 files): /etc/sglang/<service>.env
env_dir = "/etc/sglang"
# systemd units: /etc/systemd/system/<service>.service
unit_dir = "/etc/systemd/system"
# Engine venvs, one per pin set (named after its pins, wheels and Python version); the unit
# runs through the profile's engine.venv, a link the restart cycle points at one of them.
venvs_dir = "/opt/sglang/venvs"

# Node-side state: the last configuration that passed the gate, per service.
state_dir = "/var/lib/sglang-deploy"
# Runtime files of a deploy (lost on reboot): the deploy lock, units being verified, the
# readiness gate's report of the last start.
run_dir = "/run/sglang-deploy"

# -- The OS ---------------------------------------------------------------------------------
# Debian/Ubuntu packages the recipe needs on the node, installed with apt when missing (the
# package index is refreshed only then): venvs, lspci/setpci for the ACS check and unit, rsync
# for copying files where both ends have it, `ss` for make verify's port check.
os_packages = ["python3", "python3-venv", "pciutils", "rsync", "iproute2"]

# Models with `source: {huggingface: ...}` are downloaded on the node by this huggingface_hub,
# in a venv of its own under sglang_deploy_dir (hf-venv), never the engine's.
huggingface_hub_pin = "huggingface_hub==2.4.0"

# -- Deploys ---------------------------------------------------------------------------------
# One deploy at a time per node: how long a second deploy waits before it fails saying who
# holds the lock. The lock goes away with the deploy that holds it, however that ends.
deploy_lock_wait_s = 600
# When a new configuration fails its readiness gate, restore the last one that passed, restart
# on it and gate again (the deploy still fails). `--data rollback=false` leaves a failed node as
# it is, for debugging.
rollback = True
# `make repair` (`--data repair=true`): force-reinstall the engine distributions whose installed
# files drifted from their wheels' RECORD (the profile's engine.drift_check), then restart.
repair = False

# -- Engine venvs ----------------------------------------------------------------------------
# How many engine venvs to keep (newest first); older ones go, but never the live one nor the
# last known good's, so rolling back an engine change needs no download.
venvs_keep = 3
# Free disk (GiB) that must remain beside the engine venvs: a new venv needs the live one's
# size plus this; preflight refuses before anything is built or stopped.
venv_min_free_gib = 2.0
