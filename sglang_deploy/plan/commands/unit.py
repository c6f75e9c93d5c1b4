"""Command lines of our on-node scripts for one unit and its profile (NodeScripts): each
fills the arguments of a script from the profile and builds its line by builder.script or the
command functions beside it."""

import json
import posixpath
import shlex

from sglang_deploy.plan.commands.builder import api_key_args, optional, script, textfile_args
from sglang_deploy.plan.commands.engine import drift_command, manifest_command
from sglang_deploy.plan.commands.model import model_stage_command
from sglang_deploy.plan.commands.service import (
    cycles_dir,
    detach_ack_command,
    detach_follow_command,
    detach_start_command,
    gate_args,
    workers_command,
)
from sglang_deploy.plan.commands.status import metrics_textfile_command, node_status_command, passport_command
from sglang_deploy.plan.model_sources import manifest_source, served_dirs, targets
from sglang_deploy.plan.settings import default

# The profile's throughput expectations decode_check.py judges, each its --<name> when set.
EXPECTATIONS = (
    "min_decode_tok_s",
    "max_regression_pct",
    "min_speedup_over",
    "min_speedup_pct",
    "min_accept_length",
)


class NodeScripts:
    """Command lines of our on-node scripts (sglang_deploy/node/, uploaded to ``directory``)
    for one unit and its profile."""

    def __init__(
        self,
        directory,
        unit,
        profile,
        files,
        last_good_dir,
        wheels_dir,
        run_dir,
        min_free_gib=default("venv_min_free_gib"),
        lock=None,
        passport_path=None,
        drift_names=None,
        exports_metrics=False,
    ):
        self.directory = directory
        self.unit = unit
        self.profile = profile
        self.files = files  # role -> path of what the unit runs from (env file, unit file)
        self.last_good_dir = last_good_dir
        self.wheels_dir = wheels_dir
        self.run_dir = run_dir  # the deploy's runtime files (gate reports)
        self.min_free_gib = min_free_gib  # free disk left beside the engine venvs
        self.lock = lock  # the engine's lock on the node (exact.py checks the venv holds it), or None
        self.passport_path = passport_path  # the node's hardware passport (passport.py), per node
        # The distributions drift.py checks against their RECORD (default: engine.drift_check;
        # a locked engine's plan gives every locked distribution).
        self.drift_names = list(profile.engine.drift_check if drift_names is None else drift_names)
        # The node runs a node exporter (the node_exporter setting): the scripts that change
        # what the alert rules judge (rotation, drift) write their samples into its textfile
        # directory as they run.
        self.exports_metrics = exports_metrics
        # The venv of the profile's pin set (NodePlan.bind_venv); until named, the link the
        # unit runs through (profile.engine.venv), i.e. the live one.
        self.venv = profile.engine.venv

    def _run(self, name, *args):
        return script("python3", self.directory, name, *args)

    @property
    def cycles_dir(self):
        """Where this service's detached restart cycles keep their files."""
        return cycles_dir(self.run_dir, self.profile.service.name)

    def detach_start(self, command, cycle_id, stop_timeout=None):
        """detach.py start: the restart cycle ``command`` detached from the deploy's session."""
        service = self.profile.service.name
        return detach_start_command(
            self.directory, self.cycles_dir, service, cycle_id, self.profile.name, command, stop_timeout
        )

    def detach_follow(self, cycle_id, offset, for_s=10.0):
        return detach_follow_command(self.directory, self.cycles_dir, cycle_id, offset, for_s)

    def detach_ack(self, cycle_id):
        return detach_ack_command(self.directory, self.cycles_dir, cycle_id)

    def restart(self, start=True):
        service = self.profile.service
        # Beyond TimeoutStopSec, so systemd's own SIGKILL has happened before we give up.
        return self._run(
            "restart.py",
            "--unit",
            self.unit,
            "--port",
            service.port,
            "--stop-timeout",
            service.timeout_stop_sec + 30,
            *optional(not start, "--no-start"),
        )

    def stop(self):
        """restart.py --no-start: stopped, its port and GPU memory released."""
        return self.restart(start=False)

    def start(self):
        return f"systemctl start {shlex.quote(self.unit)}"

    def follower_stop(self, wait_s):
        """follower.py stop: a serving group follower's end awaited, killed after ``wait_s``."""
        return self._run("follower.py", "stop", "--unit", self.unit, "--wait", f"{wait_s:g}")

    def follower_cause(self):
        """follower.py cause: why a follower's server ended, in its result line."""
        return self._run("follower.py", "cause", "--unit", self.unit)

    def journal(self):
        """lib/systemd.py journal --json: the lines of the unit's current start, in its result line."""
        return self._run("lib/systemd.py", "journal", self.unit, "--json")

    def api_key_args(self):
        """The flags with which a script that asks this server reads the API key it sends: the
        env file and the variable of the secret with `server_arg: api-key` (never its value);
        none when the profile gives the server no API key."""
        return api_key_args(self.files.get("env"), self.profile.secret_server_args.get("api-key"))

    def gate(self, *more):
        """gate.py on the unit, its report at gate_report; ``more``: e.g. --recheck."""
        args = [*gate_args(self.profile), *self.api_key_args(), "--json", self.gate_report, *more]
        return self._run("gate.py", "--unit", self.unit, *args)

    def recheck(self):
        """gate.py --recheck: the server still the one the gate's report saw ready (before a save)."""
        return self.gate("--recheck")

    @property
    def gate_report(self):
        """Where the gate leaves its summary (phase times, cause) of the last start it gated."""
        return f"{self.run_dir}/{self.unit}.gate.json"

    def workers(self):
        expect = json.dumps(self.profile.hook_vars(), sort_keys=True)
        return self._run("workers.py", "--unit", self.unit, "--expect-json", expect)

    def workers_report(self):
        """workers.py with only its result line (the report) as output."""
        return workers_command(self.directory, self.unit, self.profile.hook_vars())

    def textfile_flags(self):
        """The flags with which rotation.py, drift.py and preflight.py write this service's
        samples into the node exporter's textfile directory; none without a node exporter."""
        if not self.exports_metrics:
            return []
        return textfile_args(self.profile.service.name, self.profile.service.port)

    def drift(self):
        """drift.py over the drift-checked distributions (drift_names) and the pins; what it
        finds is the node's drift sample."""
        return drift_command(
            self.venv, self.directory, self.drift_names, self.profile.engine.packages, self.textfile_flags()
        )

    def manifest(self):
        """drift.py --manifest over the pinned and the drift-checked distributions."""
        return manifest_command(self.venv, self.directory, self.manifest_names)

    @property
    def manifest_names(self):
        pins = [pin.partition("==")[0] for pin in self.profile.engine.packages]
        return list(dict.fromkeys(pins + self.drift_names))

    def save_last_good(self, hook_files):
        """Save what is installed as the last known good, if the unit's server runs it."""
        return self._last_good("save", hook_files)

    def compare_last_good(self, hook_files):
        """JSON: the last known good's profile, what differs from what is installed, and why
        the server does not run what is installed (null when it does)."""
        return self._last_good("compare", hook_files)

    def _last_good(self, action, hook_files):
        files = {**self.files, **hook_files}
        args = [
            action,
            "--dir",
            self.last_good_dir,
            "--profile",
            self.profile.name,
            "--venv",
            self.profile.engine.venv,
            "--unit",
            self.unit,
        ]
        for role, path in sorted(files.items()):
            args += ["--file", f"{role}={path}"]
        for pin in self.profile.engine.packages:
            args += ["--package", pin.partition("==")[0]]
        for model_dir in served_dirs(self.profile):
            args += ["--model", model_dir]
        if self.wheels_dir:
            args += ["--wheels-dir", self.wheels_dir]
        return self._run("lastgood.py", *args)

    def gpus_needed(self):
        """GPUs this node's workers take: tp × pp × dp replicas, this node's share of nnodes
        (preflight.gpu_layout, the count preflight and `make verify` judge)."""
        from sglang_deploy.node.preflight import gpu_layout

        return len(gpu_layout(self.profile.argv())["gpus"])

    def preflight(self, python="python3", argv_check=True, allow_drift=False, new_venv=None):
        """preflight.py; ``new_venv``: a venv about to be built, whose disk it checks too."""
        engine = self.profile.engine
        flags = ["--drift", *self.drift_names, *self.textfile_flags()] if argv_check else ["--no-argv"]
        flags += ["--allow-drift"] if engine.allow_drift or allow_drift else []
        flags += ["--new-venv", new_venv, "--live-venv", engine.venv] if new_venv else []
        # The GPUs the server sees: preflight counts them against the layout's.
        visible = self.profile.env.get("CUDA_VISIBLE_DEVICES")
        flags += ["--cuda-visible-devices", visible] if visible is not None else []
        # Under repair an extra or missing distribution is what is about to be fixed.
        flags += ["--lock", self.lock] if self.lock and argv_check and not allow_drift else []
        return script(
            python,
            self.directory,
            "preflight.py",
            "--unit",
            self.unit,
            "--argv-json",
            json.dumps(self.profile.argv()),
            *self._gpu_settings_flags(),
            "--disk-path",
            self.venv,
            "--min-free-gib",
            self.min_free_gib,
            *flags,
        )

    def switch(self):
        """venvs.py switch: the unit's link to the venv the deploy staged (none: no change)."""
        return self._run("venvs.py", "switch", "--link", self.profile.engine.venv)

    def _gpu_settings_flags(self):
        """preflight.py's flags for the profile's `gpu:` settings (none when it asks for none)."""
        gpu = self.profile.gpu
        return [
            *(["--min-driver", gpu.min_driver] if gpu.min_driver else []),
            *(["--gpu-model", gpu.model] if gpu.model else []),
        ]

    @property
    def kept_last_good_dir(self):
        """Where a canary's last known good is kept while it bakes (lastgood.py keep)."""
        return f"{self.last_good_dir}.before-canary"

    def keep_last_good(self):
        """lastgood.py keep: the last known good copied aside before a canary restarts."""
        return self._run("lastgood.py", "keep", "--dir", self.last_good_dir, "--to", self.kept_last_good_dir)

    def revert_cycle(self, hook_files):
        """cycle.py --revert: a canary that failed its bake back on the record kept before it
        (lastgood.py reinstate), restarted and gated."""
        reinstate = self._run(
            "lastgood.py", "reinstate", "--dir", self.last_good_dir, "--kept", self.kept_last_good_dir
        )
        return self.cycle(hook_files, restore=reinstate, revert=True)

    def cycle(self, hook_files, rollback=default("rollback"), running=False, restore=None, revert=False):
        """cycle.py: preflight, restart, gate, workers, decode check, recheck, save; on a failed gate
        restore, restart and gate again: each step one of the command lines above. ``running``:
        the server already runs what is installed, the cycle starts at the gate."""
        steps = {
            "preflight": self.preflight(f"{self.venv}/bin/python"),
            "switch": self.switch(),
            "restart": self.restart(),
            "gate": self.gate(),
            "workers": self.workers(),
            "recheck": self.recheck(),
            "save": self.save_last_good(hook_files),
            "restore": restore or self.restore_last_good(),
        }
        if self.decode_check():
            steps["decode"] = self.decode_check()
        if self.model_swap():
            steps["model"] = self.model_swap()
        return self._run(
            "cycle.py",
            "--steps-json",
            json.dumps(steps, sort_keys=True),
            *([] if rollback else ["--no-rollback"]),
            *(["--running"] if running else []),
            *(["--revert"] if revert else []),
        )

    def model_swap(self):
        """model_stage.py swap: the models the profile stages, swapped in when one waits
        (staged and verified with the profile's source); None when it stages none."""
        wanted = {target.path: manifest_source(target) for target in targets(self.profile)}
        if not wanted:
            return None
        return model_stage_command(self.directory, "swap", None, want=wanted)

    @property
    def throughput_history(self):
        """The node's decode check history (JSON lines), beside the last known good."""
        return f"{posixpath.dirname(self.last_good_dir)}/throughput.jsonl"

    def decode_check(self):
        """decode_check.py with the profile's throughput section, or None when it is off."""
        check, service = self.profile.throughput, self.profile.service
        if not check.enabled:
            return None
        args = [
            "--host",
            service.probe_host,
            "--port",
            service.port,
            "--served-name",
            self.profile.model.served_name,
            "--profile",
            self.profile.name,
            "--history",
            self.throughput_history,
            "--last-good-dir",
            self.last_good_dir,
            "--requests",
            check.requests,
            "--warmup",
            check.warmup_requests,
            "--max-tokens",
            check.max_tokens,
            "--timeout",
            check.timeout_s,
            "--on-regression",
            check.on_regression,
        ]
        for prompt in check.prompts:
            args += ["--prompt", prompt]
        for rule in EXPECTATIONS:  # each set expectation, as decode_check.py's --<rule>
            if getattr(check, rule) is not None:
                args += ["--" + rule.replace("_", "-"), getattr(check, rule)]
        return self._run("decode_check.py", *args, *self.api_key_args())

    def node_status(self, venvs_dir, passport):
        """node_status.py node: what this unit runs and how it last did (`make status`)."""
        service = self.profile.service
        return node_status_command(
            self.directory,
            self.unit,
            service.port,
            self.profile.engine.venv,
            venvs_dir,
            self.last_good_dir,
            self.throughput_history,
            passport,
            host=service.probe_host,
            auth=self.api_key_args(),
        )

    def metrics_textfile(self, routers=True, pcie_json=None, textfile_dir=None, check=False):
        """metrics_textfile.py over this service's decode check history and last known good,
        with the profile's throughput expectations (what the alert rules compare against) and
        the node's hardware passport's GPU links; ``routers``: whether the inventory names any
        (without, no rotation sample); ``check``: only whether the file would change."""
        expected, service = self.profile.throughput, self.profile.service
        return metrics_textfile_command(
            self.directory,
            service.name,
            service.port,
            self.throughput_history,
            self.last_good_dir,
            expected=expected.alerted,
            pcie_json=pcie_json,
            textfile_dir=textfile_dir,
            passport=self.passport_path,
            no_routers=not routers,
            check=check,
        )

    def nccl_ab(self, *args):
        """nccl_ab.py (the A/B all-reduce sweep) with ``args`` (sglang_deploy.report.nccl_ab_runner builds them)."""
        return self._run("nccl_ab.py", *args)

    def passport(self):
        """passport.py collect: the node's hardware passport, written only when it changed."""
        return passport_command(self.directory, self.passport_path)

    def restore_last_good(self):
        return self._run("lastgood.py", "restore", "--dir", self.last_good_dir)
