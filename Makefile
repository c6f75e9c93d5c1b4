# sglang-deploy: `make demo` (sandbox nodes + deploy + verify) and `make test`.
# INVENTORY selects the hosts (default: the local sandbox); NODES the sandbox size.

PYTHON    ?= python3
INVENTORY ?= inventory/sandbox.py
FLEET     ?=
# FLEET=1: a local fleet (4 serving nodes and SGLang's router in front of them).
NODES     ?= $(if $(FLEET),4,1)
ROUTERS   ?= $(if $(FLEET),1,0)
# MONITORING=1: a monitoring node after the routers (Prometheus over the others).
MONITORING ?= 0
LIMIT     ?=
# make verify DEEP=1: hash every model file against its manifest (sizes only otherwise).
DEEP      ?=
PYINFRA   ?= $(PYTHON) -m pyinfra
PYTEST    ?= $(PYTHON) -m pytest
WHEELS    := build/wheels
# The wheelhouses a deploy of INVENTORY installs engines from (`make wheelhouse`): the sandbox
# profiles' (the stand-in, a few MB) for the sandbox; for real nodes, run `make wheelhouse
# PROFILE=<name>` once per profile (the baseline's closure is several GB), or set
# engine.install_from: index.
WHEELHOUSE_PROFILES ?= $(if $(findstring sandbox,$(INVENTORY)),sandbox)
ENGINE_WHEELHOUSES := $(addprefix wheelhouse-,$(WHEELHOUSE_PROFILES))
# LIMIT=node1,node2: only those hosts (pyinfra's --limit, once per name; globs too).
# LIMIT=@FILE: the names in FILE, one a line; RETRY=1: the hosts the last deploy left failed,
# unreachable or not run (reports/failed-hosts.txt, rewritten by every deploy).
comma     := ,
empty     :=
space     := $(empty) $(empty)
RETRY     ?=
FAILED_HOSTS := reports/failed-hosts.txt
override LIMIT := $(if $(RETRY),@$(FAILED_HOSTS),$(LIMIT))
LIMIT_FILE  = $(patsubst @%,%,$(filter @%,$(LIMIT)))
LIMIT_NAMES = $(if $(LIMIT_FILE),$(shell grep -v '^\s*\(#\|$$\)' $(LIMIT_FILE) 2>/dev/null),$(subst $(comma), ,$(LIMIT)))
LIMIT_HOSTS = $(subst $(space),$(comma),$(strip $(LIMIT_NAMES)))
LIMIT_ARGS  = $(addprefix --limit ,$(LIMIT_NAMES))
# An empty list from a file is no host to re-run, never "every host" (no --limit at all).
LIMIT_CHECK = $(if $(LIMIT_FILE),$(if $(strip $(LIMIT_NAMES)),,$(error LIMIT=$(LIMIT): no host listed in $(LIMIT_FILE): nothing to re-run)))
# The stand-in at the next version, from the same source: upgrades and rollbacks between
# engine versions on sandbox nodes (tests/e2e/test_engine_venvs.py).
NEXT_STANDIN := 0.5.24+sandbox
NEXT_WHEELS  := build/wheels-next
# SGLang's gateway (smg): a router pin set, as the
# router_packages setting has it (several pins comma-separated), for `make lock` and `make
# router-wheels`; ROUTER_PYTHON_VERSION / ROUTER_PLATFORM when the router hosts' are not the
# settings' defaults (router_python_version, router_platform). Unset: every router lock.
ROUTER_PIN            ?=
ROUTER_PYTHON_VERSION ?=
ROUTER_PLATFORM       ?=
ROUTER_ARGS = $(ROUTER_PIN) \
	$(if $(ROUTER_PYTHON_VERSION),--router-python-version $(ROUTER_PYTHON_VERSION)) \
	$(if $(ROUTER_PLATFORM),--router-platform $(ROUTER_PLATFORM))

.PHONY: help setup wheels sandbox sandbox-down deploy plan verify demo test test-unit test-e2e clean

help:
	@echo "make demo          sandbox nodes + deploy + verify (first run builds the node image)"
	@echo "make test          unit tests, then end-to-end tests on fresh sandbox nodes"
	@echo "make deploy        pyinfra \$$INVENTORY deploy.py   (INVENTORY=inventory/gpu.py for real nodes)"
	@echo "make plan          what a deploy would change (--dry --diff)"
	@echo "make verify        testinfra checks against \$$INVENTORY"
	@echo "make status        the fleet on one screen (JSON=1: as JSON; WIDE=1: every detail)"
	@echo "make sandbox       boot NODES sandbox nodes (+ ROUTERS router nodes); make sandbox-down stops them"
	@echo "make demo FLEET=1  a local fleet: 4 nodes behind SGLang's router, rolling restarts"
	@echo "make lint-profiles schema, flag names and NCCL lint of every profile"
	@echo "make report        reports/index.html: decode tok/s per node and profile over time"
	@echo "make ab PROFILES=a,b HOST=node   A/B of profiles on one node, out of rotation (reports/ab/)"
	@echo "make grafana-dashboards  SGLang's published Grafana dashboard, for monitoring hosts with Grafana"

setup:
	$(PYTHON) -m pip install --quiet -r requirements.txt

# The SGLang stand-in the sandbox profile installs, as a wheel uploaded to the nodes, and the
# same source at the next version. Built reproducibly (same source, same bytes), so a rebuild
# is no change to deploy.
wheels: standin-model
	rm -rf $(WHEELS) engine-standin/build engine-standin/*.egg-info
	$(PYTHON) -m pip wheel --quiet --no-deps --no-build-isolation ./engine-standin -w $(WHEELS)
	$(PYTHON) -m sglang_deploy.wheel_normal $(WHEELS)/*.whl
	$(PYTHON) sandbox/standin_wheel.py --version $(NEXT_STANDIN) --out $(NEXT_WHEELS) >/dev/null

# The sandbox profiles' model, staged from the controller: its weight shard, reproducible bytes.
.PHONY: standin-model
standin-model:
	$(PYTHON) sandbox/models/make_shard.py

# BARE=1: every node boots from the bare image (a fresh OS: the deploy installs what it needs).
sandbox:
	$(PYTHON) sandbox/sandbox.py up --nodes $(NODES) $(if $(BARE),--bare $(NODES)) --routers $(ROUTERS) --monitoring $(MONITORING)

# The gateway's locked wheels for router hosts without internet: ROUTER_PIN's lock (unset: every
# router lock in locks/), downloaded once into build/wheelhouse/<lock>/ with the pinned uv wheel,
# every sha256 checked, as `make wheelhouse` does for an engine (the wheel cache too).
.PHONY: router-wheels
router-wheels:
	$(PYTHON) -m sglang_deploy.plan.wheelhouse --router $(ROUTER_ARGS)

# SGLang's published Grafana dashboard (sgl-project/sglang, Apache-2.0; docs/grafana.md),
# downloaded once at the commit its queries were checked at against the stand-in's /metrics;
# the deploy provisions it where a monitoring host has Grafana (grafana_dashboard_files).
SGLANG_DASHBOARD        := build/grafana/sglang-dashboard.json
SGLANG_DASHBOARD_COMMIT ?= bac2cc6711e0342e25d27bbcdef773555ad402eb
SGLANG_DASHBOARD_URL     = https://raw.githubusercontent.com/sgl-project/sglang/$(SGLANG_DASHBOARD_COMMIT)/examples/monitoring/grafana/dashboards/json/sglang-dashboard.json
.PHONY: grafana-dashboards
grafana-dashboards: $(SGLANG_DASHBOARD)
$(SGLANG_DASHBOARD):
	mkdir -p $(@D)
	curl -fsSL -o $@.part $(SGLANG_DASHBOARD_URL)
	$(PYTHON) -m json.tool $@.part >/dev/null && mv $@.part $@

sandbox-down:
	$(PYTHON) sandbox/sandbox.py down

deploy: wheels $(ENGINE_WHEELHOUSES) $(if $(filter-out 0,$(ROUTERS)),router-wheels)
	$(LIMIT_CHECK)$(PYINFRA) -y $(INVENTORY) deploy.py $(LIMIT_ARGS)

# What a deploy would change, with diffs (secret values shown as ***); changes nothing.
plan: wheels $(ENGINE_WHEELHOUSES) $(if $(filter-out 0,$(ROUTERS)),router-wheels)
	$(LIMIT_CHECK)$(PYINFRA) $(INVENTORY) deploy.py --dry --diff $(LIMIT_ARGS) < /dev/null

# testinfra assertions, then the per-host report (also as JSON, for machines), printed whether
# or not an assertion failed; fails when either did. Secret values never appear in either.
verify: export SGLANG_DEPLOY_VERIFY_DEEP = $(DEEP)
verify:
	status=0; \
	  $(PYTEST) -p no:cacheprovider tests/host --inventory $(INVENTORY) --limit "$(LIMIT_HOSTS)" -q || status=1; \
	  $(PYTHON) -m sglang_deploy.verify.summary $(INVENTORY) --limit "$(LIMIT_HOSTS)" --json reports/verify.json || status=1; \
	  exit $$status

# The fleet on one screen (read-only, one SSH command per host, all at once); JSON=1: as JSON.
.PHONY: status
status:
	$(PYTHON) -m sglang_deploy.status $(INVENTORY) --limit "$(LIMIT_HOSTS)" $(if $(JSON),--json) $(if $(WIDE),--wide)

demo: setup sandbox deploy verify

test-unit: lint lint-profiles wheels
	$(PYTEST) tests/unit -q

# Format and lint (ruff, configured in pyproject.toml); `make format` rewrites what it can.
.PHONY: lint format
lint:
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .

format:
	$(PYTHON) -m ruff format .
	$(PYTHON) -m ruff check --fix .

# End-to-end on fresh sandbox nodes, torn down even when a test fails, in shards side by side,
# each on a sandbox of its own, in a copy of the working tree of its own (build/e2e/<shard>/:
# its own reports/ and locks/); sandbox/e2e_shards.py holds the shards: the main scenarios on 3
# nodes, node 3 bare, and the fleet's behind a router node with a monitoring node, reached as a
# login user with sudo, both split by test files, and the main scenarios as a login user with
# sudo, node 2 bare. The waiting (the stand-in's load and warmup, gates, drains) overlaps: the
# suite takes about as long as its longest shard (15 min on 2 cores; 51 min one after another).
# E2E_JOBS=N: at most N shards at once (E2E_JOBS=1: one after another); E2E_SHARDS=a,b: only
# those. Each shard's output goes to reports/e2e/<shard>.log (all printed at the end), its wall
# time (sandbox up to down) to $(PHASE_TIMES), which `make test` prints at the end, and every
# test's own time to reports/e2e-durations/<shard>.json (tests/e2e/conftest.py, which also fails
# a test over the suite's ceiling that does not say why it must take longer).
E2E_JOBS   ?=
E2E_SHARDS ?=
PHASE_TIMES := reports/test-phase-times.txt
test-e2e: wheels router-wheels $(ENGINE_WHEELHOUSES)
	@mkdir -p reports; $(PYTHON) sandbox/e2e_shards.py --times $(PHASE_TIMES) \
	  $(if $(E2E_JOBS),--jobs $(E2E_JOBS)) $(if $(E2E_SHARDS),--only $(E2E_SHARDS))

# The README's test command: unit tests, then every end-to-end phase; each phase's wall time at
# the end, whether or not one failed.
test: setup
	@mkdir -p reports; rm -f $(PHASE_TIMES); status=0; started=$$(date +%s); \
	$(MAKE) --no-print-directory test-unit || status=$$?; \
	echo "unit (lint, profiles, wheels, tests/unit): $$(( $$(date +%s) - started )) s" > $(PHASE_TIMES).unit; \
	if [ $$status -eq 0 ]; then $(MAKE) --no-print-directory test-e2e || status=$$?; fi; \
	echo "== make test: wall time per phase"; cat $(PHASE_TIMES).unit $(PHASE_TIMES) 2>/dev/null; \
	echo "total: $$(( $$(date +%s) - started )) s"; rm -f $(PHASE_TIMES).unit; exit $$status

clean:
	rm -rf build engine-standin/build .pytest_cache

.PHONY: wheelhouse-%
wheelhouse-%: wheels
	$(PYTHON) -m sglang_deploy.plan.wheelhouse $*

# Locks (locks/, committed): every distribution of each profile's engine closure with its
# sha256, resolved by uv for the nodes' platform (engine.platform, engine.python_version), and of
# each gateway pin set for the router hosts' (router_platform, router_python_version).
# PROFILE=name: that profile's lock only; ROUTER_PIN=pins: that router pin set's only; neither:
# every profile, every router lock in locks/ and the router_packages default. Prints what moved.
PROFILE ?=
.PHONY: lock
lock: wheels
	$(PYTHON) -m sglang_deploy.plan.locks lock $(PROFILE) $(if $(ROUTER_PIN),--router $(ROUTER_ARGS))

# The locked wheels of PROFILE's lock (and the pinned uv wheel the nodes build venvs with),
# downloaded once into build/wheelhouse/<lock>/, every sha256 checked; kept between runs, and
# what was downloaded also in the wheel cache outside the checkout ($SGLANG_DEPLOY_WHEEL_CACHE,
# ~/.cache/sglang-deploy/wheels), which `make clean` and a fresh clone (CI) keep.
.PHONY: wheelhouse
wheelhouse: wheels
	@test -n "$(PROFILE)" || { echo "make wheelhouse PROFILE=<name>"; exit 2; }
	$(PYTHON) -m sglang_deploy.plan.wheelhouse $(PROFILE)

# Profiles: schema, flag names, NCCL lint (warnings printed; --strict makes them fatal).
.PHONY: lint-profiles schema
lint-profiles:
	$(PYTHON) -m sglang_deploy.profile.lint

# JSON Schema of a profile, for editors (committed; a unit test keeps it current).
schema:
	$(PYTHON) -m sglang_deploy.profile.lint --schema > schema/profile.schema.json.tmp
	mv schema/profile.schema.json.tmp schema/profile.schema.json

# docs/settings.md and docs/profile-keys.md from the settings and profile models (committed; a
# unit test keeps them current).
.PHONY: docs
docs:
	$(PYTHON) -m sglang_deploy.docs

# Reinstall exactly the engine distributions whose installed files drifted, then restart.
.PHONY: repair
repair: wheels $(ENGINE_WHEELHOUSES)
	$(LIMIT_CHECK)$(PYINFRA) -y $(INVENTORY) deploy.py --data repair=true $(LIMIT_ARGS)

# The option list of the pinned engine's parser, which `make lint-profiles` checks flag names
# against (sglang_deploy/engine_options/, committed). SGLANG_REAL_VENV: a venv with the real
# engine; tests/unit/test_real_sglang_parser.py builds one there (CPU only) on first run.
SGLANG_REAL_VENV ?= $(HOME)/.cache/sglang-deploy/real-sglang-venv
.PHONY: engine-options
engine-options:
	@test -x $(SGLANG_REAL_VENV)/bin/python || { echo "no engine venv at $(SGLANG_REAL_VENV): run $(PYTEST) tests/unit/test_real_sglang_parser.py first (it builds one)"; exit 1; }
	$(PYTHON) -m sglang_deploy.profile.engine_flags --python $(SGLANG_REAL_VENV)/bin/python

# reports/index.html: decode tok/s over time per node and profile (the deploys' decode checks,
# reports/throughput/<host>.jsonl), plots as SVG files beside it, and the latest figures.
.PHONY: report
report:
	$(PYTHON) -m sglang_deploy.report.throughput_report

# A/B all-reduce on each host's GPUs: NCCL's defaults vs the profile's env file, interleaved
# (reports/nccl-ab/<host>/). NCCL_AB_ARGS: --ablate, --stop-server, --rounds N, --sizes 4K,1M.
.PHONY: nccl-ab
nccl-ab:
	$(PYTHON) -m sglang_deploy.report.nccl_ab_runner $(INVENTORY) $(if $(LIMIT_HOSTS),--limit $(LIMIT_HOSTS)) $(NCCL_AB_ARGS)

# A/B of serving profiles on one node, out of rotation, each through the gate and benchmarked,
# then its own profile back (reports/ab/, `make report`). AB_ARGS: --repeats N, --max-tokens 32,96.
.PHONY: ab
ab:
	@test -n "$(PROFILES)" -a -n "$(HOST)" || { echo "usage: make ab PROFILES=a,b[,c] HOST=node [AB_ARGS=...]"; exit 2; }
	$(PYTHON) -m sglang_deploy.report.ab_runner $(INVENTORY) --host $(HOST) --profiles $(PROFILES) $(AB_ARGS)
