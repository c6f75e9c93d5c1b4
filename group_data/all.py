"""Deploy defaults for every host, in one place.

Any of these can be set per host (inventory/hosts.yml, the sandbox inventory) or for a run
(`pyinfra ... --data profile=eagle3-2step`). What the server runs is not here: that is the
profile's job (profiles/*.yml; profile defaults live in sglang_deploy/profile/schema.py).
"""

# -- What to serve ---------------------------------------------------------------------------
# The profile: a name under profiles/ or a path to a profile file.
profile = "baseline"
# Mapping deep-merged over the profile for this host, e.g. {"service": {"port": 30001}}.
profile_overrides = {}

# -- Serving groups (one model on several nodes; sglang_deploy/plan/serving_group.py) --------------
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

# -- Fleets: SGLang's router and rolling restarts (sglang_deploy/plan/fleet.py) --------------------
# Hosts of the inventory's `routers` group run SGLang's router in front of every serving node.
# How other hosts reach a host (routers -> nodes, nodes -> routers); default: its ssh_hostname.
fleet_address = None
# The router: pinned packages in a venv of its own, installed from `router_find_links` (a
# directory of wheels on the controller, uploaded; `make router-wheels`) or from the index.
router_packages = ["sglang-router==0.3.2"]
router_find_links = None
router_venv = "/opt/sglang-router/venv"
router_python = "python3"
router_bind = "0.0.0.0"
router_port = 30000
# The router's Prometheus exporter (it will not start when this port is taken).
router_prometheus_port = 29000
# One of sglang-router's policies: random, round_robin, cache_aware, power_of_two, manual.
router_policy = "round_robin"
# The router's own health checks of its workers (its defaults are far slower: a node that
# comes back would wait a minute for its first check).
router_health_check_interval_s = 2
router_health_check_timeout_s = 5
router_health_failure_threshold = 3
router_health_success_threshold = 1
# Extra arguments for sglang_router.launch_router, e.g. ["--retry-max-retries", "3"].
router_extra_args = []
# How long the router's gate waits for /readiness 200 and every worker healthy.
router_gate_timeout_s = 120
# A run that restarts nodes restarts `rolling_batch` at a time: each is taken out of every
# router, drained (up to rolling_drain_timeout_s), restarted through its gate, put back and
# waited for until every router lists it healthy (up to rolling_healthy_timeout_s). Once more
# than `rolling_max_failures` nodes failed, the rollout stops: later nodes keep their previous
# configuration. Without routers the batches still keep the other nodes serving.
rolling_batch = 1
rolling_max_failures = 0
rolling_drain_timeout_s = 120
rolling_healthy_timeout_s = 120
# A router that does not answer before a node leaves rotation stops the rollout; true rolls on
# without it (that router then keeps sending to the restarting node until its health check).
rolling_without_routers = False
# Nodes that serve nothing when the restart begins (not installed yet, unit stopped or failed,
# not healthy in any router; without routers: not answering /ping) have no capacity to protect:
# they start together in a first wave, then the serving ones roll `rolling_batch` at a time.
# false rolls every node in batches (the order before the first wave; bench/first_start.py).
rolling_first_wave = True
