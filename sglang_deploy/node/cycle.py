"""The restart cycle of one unit on this node, in one call: preflight, switch (the unit's
engine venv link to the venv the deploy built, if it staged one; then, with a "model" command,
a staged model swapped in: model_stage.py swap), restart, readiness gate (which also watches the
server for the profile's readiness.settle_s once it is up), workers' environment, then save what
serves as the last known good, once the recheck (gate.py --recheck) found it still the server the
gate saw ready. A failed gate, workers check or recheck, or a save that is refused, puts the last
known good back, restarts on it and gates it again (unless --no-rollback). A failed preflight
stops nothing: the files go back and the running server keeps serving. With a "decode" command
(decode_check.py), the decode rate is measured after the workers check: a regression under the
profile's `on_regression: rollback` rolls back like a failed gate, under `fail` it leaves the new
configuration serving unrecorded (outcome "regressed"), under `warn` it is served and recorded;
a check that could not measure (DECODE_UNMEASURED, or one that died) is a failed step whatever
the policy: it rolls back, and the recheck says whether the server died meanwhile (then its
cause is the cycle's).
With --running the server already runs what is installed (the deploy started it, or a run that
died midway left it unrecorded): the cycle starts at the gate, so nothing is recorded as the
last known good without its decode check. With --revert the server serves a configuration that
passed its gate but failed a canary's bake: the cycle starts at the rollback (its "restore" step
is then lastgood.py reinstate: the record kept before the canary restarted). The decisions are decide()'s, which a serving
group's restart runs too, with steps that act across its members (operations/group_restart.py).

    python3 cycle.py --steps-json '{"preflight": CMD, "switch": CMD, "restart": CMD, "gate": CMD,
                                    "workers": CMD, "recheck": CMD, "save": CMD, "restore": CMD}'
                     [--no-rollback] [--running | --revert]

Each CMD is one of our scripts' command lines (NodeScripts builds them). Their progress lines
stream through as they come; their result lines (result.py) are read, not shown. Ends with one
result line: {"outcome": "served" | "preflight_failed" | "failed" | "rolled_back" |
"rollback_failed" | "regressed", "profile": the profile restored (rolled_back,
rollback_failed), "restored": whether the last known good files went back, "steps": [{"step",
"status", "cause"}], "cause": the first step that failed (a failed recheck's first: a server
that died explains the checks that failed before it), "throughput": the decode check's
figures, when it ran, "restored_throughput": the restored server's after a rollback}. Exit
status: 0 served, else that of the step the cause is.
"""

import argparse
import json
import shlex
import sys

if __package__:
    from .lib import result, status
else:  # run as a script: our scripts' directory is on sys.path
    from lib import result, status

STEPS = ("preflight", "switch", "restart", "gate", "workers", "recheck", "save", "restore")
OPTIONAL_STEPS = ("decode", "model")
LABELS = {
    "preflight": "preflight",
    "switch": "engine venv switch",
    "model": "staged model swap",
    "restart": "restart",
    "gate": "readiness gate",
    "decode": "decode check",
    "workers": "worker environment check",
    "recheck": "recheck of the gated server",
    "save": "recording last known good",
    "restore": "restoring the last known good files",
}


def decide(run, rollback=True, running=False, revert=False):
    """The restart cycle's decisions, written once: node/cycle.py runs them on a node, a serving
    group's restart (operations/group_restart.py) across its members. ``run(step, profile=None)``
    runs one step and returns (ok, its result line as a dict, {} when it printed none); the
    steps are STEPS' and OPTIONAL_STEPS' ("decode" is (True, {}) where there is no check),
    plus "rollback" (restore, after a failure past the stop: the runner may announce it) and
    "remeasure" (the restored server's decode rate, with its profile; never fails). Returns
    (outcome, details for the result line: "restored", and "profile" after a rollback).
    ``revert``: what serves failed a canary's bake: straight to the rollback."""

    def all_of(*names):
        return all(run(name)[0] for name in names)

    if revert:
        passed = False
    elif running:
        passed = all_of("gate", "workers")
    elif not (run("preflight")[0] and run("switch")[0]):  # nothing stopped yet
        return "preflight_failed", {"restored": run("restore")[0]}
    else:
        passed = all_of("restart", "gate", "workers")
    if passed and not revert:
        decoded, found = run("decode")
        if decoded:
            # Recorded only while it is still the server the gate saw ready: not one that died
            # (or was restarted) since, which would crash-loop with nothing to roll back to.
            if run("recheck")[0] and run("save")[0]:
                return "served", {}
            # Not recorded: the next crash or deploy would restore an older configuration
            # than the one serving, and a crash-loop of this one nothing: roll back now.
        elif found.get("status") == status.THROUGHPUT_REGRESSION:  # slower: its policy decides
            if not (rollback and found.get("on_regression") == "rollback"):
                return "regressed", {"restored": False}
        else:  # the check could not measure (or died): a failed step; did the server die?
            run("recheck")
    if not rollback:
        return "failed", {"restored": False}
    restored, found = run("rollback")
    if not restored:
        return "rollback_failed", {"restored": False, "profile": None}
    previous = found.get("profile")
    # The workers are not checked against this profile's env: they run the previous one's.
    if not all_of("restart", "gate"):
        return "rollback_failed", {"restored": True, "profile": previous}
    run("remeasure", previous)
    return "rolled_back", {"restored": True, "profile": previous}


class Cycle:
    """decide()'s steps on this node: each one of our scripts, run here."""

    def __init__(self, commands):
        self.commands = commands
        self.steps = []  # {"step", "status", "cause"} of every step run, in order
        self.details = {}  # the decode check's figures and policy, for the result line

    def step(self, name, profile=None):
        """decide()'s runner: (ok, the step's result line)."""
        if name == "decode" and "decode" not in self.commands:
            return True, {}
        if name == "switch" and "model" in self.commands:
            # A staged model waits (model_stage.py swap): swapped in after preflight and the
            # switch, still before anything stops; a failure here is the switch's.
            switched = self.run("switch")
            return (switched[0] and self.run("model")[0]), switched[1]
        if name == "rollback":
            print("rolling back to the last configuration that passed the gate", flush=True)
            return self.run("restore", "rollback")
        if name == "remeasure":
            self.remeasured(profile)
            return True, {}
        return self.run(name)

    def run(self, name, label=None):
        """Run one step, streaming its progress lines: (ok, its result line)."""
        code, lines = result.run_streaming(self.commands[name])
        found = result.parse(lines) or {}
        cause = found.get("cause")
        self.details.update((key, found[key]) for key in ("throughput", "on_regression") if key in found)
        if code != status.READY and not cause:  # it died before its result line
            cause = next((line.strip() for line in reversed(lines) if line.strip()), "no output")
        self.steps.append(
            dict(
                {
                    "step": label or LABELS[name],
                    "status": code,
                    "cause": cause if code != status.READY else None,
                },
                **({"profile": found["profile"]} if "profile" in found else {}),
            )
        )
        return code == status.READY, dict(found, status=code)

    def end(self, outcome, **details):
        failed = [step for step in self.steps if step["status"] != status.READY]
        # A server that died after its gate is why the checks before the recheck failed.
        failed.sort(key=lambda step: step["step"] != LABELS["recheck"])
        code = (
            status.READY
            if outcome == "served"
            else (
                status.PREFLIGHT_FAILED
                if outcome == "preflight_failed"
                # a revert that went as asked has no failed step: it did what it was run for
                else (failed[0]["status"] if failed else status.READY)
            )
        )
        return result.emit(
            code,
            failed[0]["cause"] if failed else None,
            outcome=outcome,
            steps=self.steps,
            **dict(self.details, **details),
        )

    def remeasured(self, profile):
        """After a rollback, the restored server's decode rate, recorded under its own profile
        (its figure goes to the result's "restored_throughput"; it never fails the cycle)."""
        if "decode" not in self.commands or not profile:
            return
        found = result.parse(result.run_streaming(restored_decode(self.commands["decode"], profile))[1]) or {}
        if "throughput" in found:
            self.details["restored_throughput"] = found["throughput"]


def restored_decode(decode, profile):
    """The decode check's command line for the restored server, recorded under its profile."""
    return "%s --restored --profile %s" % (decode, shlex.quote(profile))


def cycle(commands, rollback=True, running=False, revert=False):
    c = Cycle(commands)
    outcome, details = decide(c.step, rollback or revert, running, revert)
    return c.end(outcome, **details)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps-json",
        required=True,
        help="{step: command line} for "
        + ", ".join(STEPS)
        + " (and optionally "
        + ", ".join(OPTIONAL_STEPS)
        + ")",
    )
    parser.add_argument(
        "--no-rollback",
        dest="rollback",
        action="store_false",
        help="leave a configuration that fails its gate as it is",
    )
    parser.add_argument(
        "--running", action="store_true", help="the server already runs what is installed: start at the gate"
    )
    parser.add_argument(
        "--revert", action="store_true", help="what serves failed a canary's bake: start at the rollback"
    )
    args = parser.parse_args(argv)
    commands = json.loads(args.steps_json)
    missing = [name for name in STEPS if name not in commands]
    if missing:
        parser.error("--steps-json lacks " + ", ".join(missing))
    return cycle(commands, args.rollback, args.running, args.revert)


if __name__ == "__main__":
    sys.exit(main())
