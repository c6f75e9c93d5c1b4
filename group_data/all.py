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

# -- Where things go on the node -------------------------------------------------------------
# On-node scripts (gate, restart, worker check) and uploaded wheels.
sglang_deploy_dir = "/opt/sglang-deploy"
# Env files (root, 0700 directory, 0600 files): /etc/sglang/<service>.env
env_dir = "/etc/sglang"
# systemd units: /etc/systemd/system/<service>.service
unit_dir = "/etc/systemd/system"
# Node-side state: the last configuration that passed the gate, per service.
state_dir = "/var/lib/sglang-deploy"
# Runtime files of a deploy (lost on reboot): the deploy lock, units being verified, the
# readiness gate's report of the last start.
run_dir = "/run/sglang-deploy"

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
