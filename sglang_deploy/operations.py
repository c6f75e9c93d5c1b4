"""pyinfra operations for an SGLang node.

Each operation yields commands only when the node differs from what is asked, and calls
``host.noop`` otherwise, so a re-run with nothing changed reports no changes.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import shlex
from io import StringIO
from pathlib import Path

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, StringCommand, operation
from pyinfra.api.command import FileUploadCommand
from pyinfra.facts.files import File, FileContents, Sha1File
from pyinfra.operations import files

from . import manifest
from .facts import (EngineDrift, EngineManifest, InstalledDistributions, InterpreterStartup, Preflight, Serving, UnitState,
                    WorkerEnvironment, canonical_name)
from .node import status

NODE_DIR = Path(__file__).resolve().parent / "node"
HOOK_MODULE = "sglang_deploy_env.py"
HOOK_PTH = "sglang_deploy_env.pth"


# -- Engine ----------------------------------------------------------------------------------

@operation()
def engine(venv, python, packages, wheels_dir=None, repair=None):
    """
    Create ``venv`` and install exactly the pinned ``packages`` where they differ.

    + venv: path of the virtual environment
    + python: interpreter that creates it
    + packages: exact pins, ``name==version``
    + wheels_dir: remote directory of uploaded wheels; when given pip installs from it alone
    + repair: ``(scripts_dir, distributions)``: force-reinstall those of the distributions
      whose installed files drifted from their RECORD
    """
    installed = host.get_fact(InstalledDistributions, venv=venv)
    if installed is None:
        yield f"{shlex.quote(python)} -m venv {shlex.quote(venv)}"
        installed = {}
    pip = (f"{shlex.quote(venv)}/bin/pip install --no-input --disable-pip-version-check "
           + (f"--no-index --find-links {shlex.quote(wheels_dir)} " if wheels_dir else ""))
    differing = [pin for pin in packages if _pin_differs(pin, installed)]
    if differing:
        yield pip + " ".join(shlex.quote(pin) for pin in differing)
    drifted, strays = _drift(venv, *repair) if repair and not differing else ([], [])
    if drifted:
        yield pip + "--force-reinstall --no-deps " + " ".join(shlex.quote(pin) for pin in drifted)
    if strays:
        # Files no RECORD lists survive a reinstall: remove them.
        site = pth_directory(host.get_fact(InterpreterStartup, python=f"{venv}/bin/python"))
        yield f"cd {shlex.quote(site)} && rm -f -- " + " ".join(shlex.quote(p) for p in strays)
    if not differing and not drifted and not strays:
        host.noop(f"{venv} holds {', '.join(packages)}")


def _drift(venv, scripts_dir, distributions):
    """(``name==installed version`` of each distribution whose RECORD'd files drifted, the
    unexpected files found among them, relative to site-packages)."""
    report = host.get_fact(EngineDrift, venv=venv, scripts_dir=scripts_dir,
                           distributions=distributions) or {"distributions": {}}
    found = report["distributions"].items()
    pins = [f"{name}=={r['version']}" for name, r in found if r["modified"] or r["missing"]]
    return pins, [path for _, r in found for path in r["unexpected"]]


def _pin_differs(pin, installed):
    name, _, version = pin.partition("==")
    return installed.get(canonical_name(name)) != version


# -- Files -----------------------------------------------------------------------------------

@operation()
def secret_file(dest, content, secret_values=(), mode="0600"):
    """
    Upload ``content`` to ``dest`` (root-owned, ``mode``), never showing secrets: the upload's
    temporary file lives beside ``dest`` and ``--diff`` shows secret values as ``***``.

    + dest: remote path; its directory must exist and be private
    + content: the file's text
    + secret_values: strings to hide in diffs
    + mode: file mode
    """
    remote_sha1 = host.get_fact(Sha1File, path=dest)
    if remote_sha1 == hashlib.sha1(content.encode()).hexdigest():
        remote = host.get_fact(File, path=dest) or {}
        # pyinfra's File fact writes modes as octal digits in an int: 0600 -> 600.
        if remote.get("mode") != int(mode) or remote.get("user") != "root":
            yield f"chown root:root {shlex.quote(dest)} && chmod {mode} {shlex.quote(dest)}"
        else:
            host.noop(f"{dest} is up to date")
        return
    _log_redacted_diff(dest, content, secret_values)
    directory = dest.rsplit("/", 1)[0]
    yield FileUploadCommand(
        StringIO(content), dest,
        remote_temp_filename=host.get_temp_filename(dest, temp_directory=directory),
    )
    yield f"chown root:root {shlex.quote(dest)} && chmod {mode} {shlex.quote(dest)}"


def _diff_wanted():
    from pyinfra.context import state

    return state.config.DIFF


def _log_redacted_diff(dest, content, secret_values):
    if not _diff_wanted():
        return
    current = host.get_fact(FileContents, path=dest)
    redact = _redactor(secret_values)
    before = [redact(line) + "\n" for line in (current or [])]
    after = [redact(line) + "\n" for line in content.splitlines()]
    note = " (secrets shown as ***)" if secret_values else ""
    host.log(f"Will write {dest}{note}", logger.info)
    for line in difflib.unified_diff(before, after, "remote", "desired", n=1):
        logger.info("  %s", line.rstrip("\n"))


def _redactor(secret_values):
    secrets = [value for value in secret_values if value]

    def redact(line):
        for value in secrets:
            line = line.replace(value, "***")
        return line
    return redact


@operation()
def startup_hook(python, module_text, pth_text):
    """
    Install the environment hook where ``python`` really runs start-up code: a module plus a
    ``.pth`` that imports it, in a directory the interpreter processes ``.pth`` files from.
    A ``.pth`` cannot be shadowed the way a venv's ``sitecustomize.py`` is on Debian.

    + python: the interpreter whose start-up gets the hook (the venv's, or the system's)
    + module_text: the hook module's source
    + pth_text: the ``.pth`` line that imports it
    """
    startup = host.get_fact(InterpreterStartup, python=python)
    if startup is None:
        host.noop(f"{python} does not exist yet (a dry run before the engine step)")
        return
    directory = pth_directory(startup)
    yield from files.put._inner(src=StringIO(module_text), dest=f"{directory}/{HOOK_MODULE}",
                                mode="0644")
    yield from files.put._inner(src=StringIO(pth_text), dest=f"{directory}/{HOOK_PTH}",
                                mode="0644")


def pth_directory(startup):
    """The site directory for our ``.pth``: the purelib one if the interpreter processes it."""
    if startup["purelib"] in startup["site_dirs"]:
        return startup["purelib"]
    return startup["site_dirs"][0]


# -- systemd unit ----------------------------------------------------------------------------

@operation()
def unit_file(unit, content, unit_dir="/etc/systemd/system", staging_dir="/run/sglang-deploy"):
    """
    Install a unit file once ``systemd-analyze verify`` accepted it, then daemon-reload; a
    rejected unit never replaces the one a running server came from.

    + unit: unit name, e.g. ``sglang.service``
    + content: the unit file's text
    + unit_dir: where units are installed
    + staging_dir: where the candidate is verified (its file name must be the unit's)
    """
    dest = f"{unit_dir}/{unit}"
    if host.get_fact(Sha1File, path=dest) == hashlib.sha1(content.encode()).hexdigest():
        host.noop(f"{dest} is up to date")
        return
    _log_redacted_diff(dest, content, ())
    staged = f"{staging_dir}/{unit}"
    yield f"mkdir -p {shlex.quote(staging_dir)}"
    yield FileUploadCommand(StringIO(content), staged,
                            remote_temp_filename=host.get_temp_filename(staged))
    yield f"systemd-analyze verify {shlex.quote(staged)}"
    yield f"install -m 0644 -o root -g root {shlex.quote(staged)} {shlex.quote(dest)}"
    yield "systemctl daemon-reload"


# -- Preflight -------------------------------------------------------------------------------

@operation()
def preflight(scripts, engine_ready, repairing=False):
    """
    Check, before anything on the node changes, that this configuration can start there: the
    engine's own parser accepts the argv (when the pinned engine is already installed; the
    restart repeats it after an install), model paths, GPUs, port, free disk. A check only:
    never a change.

    + scripts: ``NodeScripts`` for this node
    + engine_ready: whether the venv already holds the pinned engine
    + repairing: drift is about to be repaired, so it only warns here
    """
    if host.get_fact(File, path=f"{scripts.directory}/preflight.py") is None:
        host.noop("preflight runs once our scripts are on the node (a dry run of a first deploy)")
        return
    python = f"{scripts.profile.engine.venv}/bin/python" if engine_ready else "python3"
    result = host.get_fact(Preflight, command=scripts.preflight(
        python, argv_check=engine_ready, allow_drift=repairing))
    for line in result["lines"]:
        if line.startswith("preflight warning: "):
            host.log(line, logger.warning)
    if result["status"] != status.READY:
        yield FunctionCommand(_fail, ("preflight failed: " + "; ".join(
            line.split(": ", 1)[1] for line in result["lines"] if line.startswith("preflight failed")),), {})
        return
    host.noop("; ".join(result["lines"]))


def engine_matches(venv, packages):
    """Whether the venv already holds exactly the pinned packages (a fact read)."""
    installed = host.get_fact(InstalledDistributions, venv=venv)
    return installed is not None and not any(_pin_differs(pin, installed) for pin in packages)


# -- Service ---------------------------------------------------------------------------------

class NodeScripts:
    """Command lines of our on-node scripts (sglang_deploy/node/, uploaded to ``directory``)
    for one unit and its profile."""

    def __init__(self, directory, unit, profile, files, last_good_dir, wheels_dir):
        self.directory = directory
        self.unit = unit
        self.profile = profile
        self.files = files  # role -> path of what the unit runs from (env file, unit file)
        self.last_good_dir = last_good_dir
        self.wheels_dir = wheels_dir

    def _run(self, script, *args):
        quoted = " ".join(shlex.quote(str(arg)) for arg in args)
        return f"python3 {shlex.quote(self.directory)}/{script} {quoted}"

    def restart(self):
        service = self.profile.service
        # Beyond TimeoutStopSec, so systemd's own SIGKILL has happened before we give up.
        return self._run("restart.py", "--unit", self.unit, "--port", service.port,
                         "--stop-timeout", service.timeout_stop_sec + 30)

    def start(self):
        return f"systemctl start {shlex.quote(self.unit)}"

    def gate(self):
        readiness, service = self.profile.readiness, self.profile.service
        return self._run("gate.py", "--unit", self.unit, "--port", service.port,
                         "--served-name", self.profile.model.served_name,
                         "--timeout", readiness.timeout_s,
                         "--interval", readiness.poll_interval_s,
                         "--progress-every", readiness.progress_every_s,
                         "--hang-after", readiness.hang_after_s)

    def workers(self):
        expect = json.dumps(self.profile.hook_vars(), sort_keys=True)
        return self._run("workers.py", "--unit", self.unit, "--expect-json", expect)

    def save_last_good(self, hook_files):
        files = {**self.files, **hook_files}
        args = ["save", "--dir", self.last_good_dir, "--profile", self.profile.name,
                "--venv", self.profile.engine.venv]
        for role, path in sorted(files.items()):
            args += ["--file", f"{role}={path}"]
        for pin in self.profile.engine.packages:
            args += ["--package", pin.partition("==")[0]]
        if self.wheels_dir:
            args += ["--wheels-dir", self.wheels_dir]
        return self._run("lastgood.py", *args)

    def gpus_needed(self):
        """GPUs this node needs: tensor × pipeline parallel, shared across --nnodes."""
        args = self.profile.server_args
        return max(1, int(args.get("tp-size") or args.get("tensor-parallel-size") or 1)
                   * int(args.get("pp-size") or args.get("pipeline-parallel-size") or 1)
                   // int(args.get("nnodes") or 1))

    def preflight(self, python="python3", argv_check=True, allow_drift=False):
        engine = self.profile.engine
        flags = ["--drift", *engine.drift_check] if argv_check else ["--no-argv"]
        flags += ["--allow-drift"] if engine.allow_drift or allow_drift else []
        quoted = " ".join(shlex.quote(str(arg)) for arg in [
            "--unit", self.unit, "--argv-json", json.dumps(self.profile.argv()),
            "--gpus-needed", self.gpus_needed(), "--disk-path", self.profile.engine.venv, *flags])
        return f"{shlex.quote(python)} {shlex.quote(self.directory)}/preflight.py {quoted}"

    def restore_last_good(self):
        return self._run("lastgood.py", "restore", "--dir", self.last_good_dir)


def _run_step(host, what, command):
    """Run one step, streaming its output; on failure log what failed and why (the script's
    own cause line) and return (False, output)."""
    ok, output = host.run_shell_command(StringCommand(command), print_output=True)
    if not ok:
        cause = status.cause_line(output.stdout_lines + output.stderr_lines)
        host.log_styled(f"{what} failed: {cause}", fg="red", log_func=logger.error)
    return ok, output


def _run_steps(host, steps):
    return all(_run_step(host, what, command)[0] for what, command in steps)


def _serve_steps(scripts, first):
    """Start (or restart), gate, check the workers."""
    return [first, ("readiness gate", scripts.gate()),
            ("worker environment check", scripts.workers())]


def _record_last_good(host, scripts, hook_python):
    startup = host.get_fact(InterpreterStartup, python=hook_python)
    directory = pth_directory(startup)
    hook_files = {"hook": f"{directory}/{HOOK_MODULE}", "hook_pth": f"{directory}/{HOOK_PTH}"}
    return _run_steps(host, [("recording last known good", scripts.save_last_good(hook_files))])


def _restart_or_roll_back(state, host, scripts, hook_python, rollback):
    """Preflight, then restart on the new configuration; if it does not pass the gate, put the
    last one that did back, restart on it and gate again. Either way a failed change fails the
    deploy. A failed preflight stops nothing: the files go back and the server keeps serving."""
    venv_python = f"{scripts.profile.engine.venv}/bin/python"
    if not _run_steps(host, [("preflight", scripts.preflight(venv_python))]):
        ok, _ = _run_step(host, "restoring the last known good files", scripts.restore_last_good())
        if ok:
            host.log_styled("nothing was stopped: the running server is untouched", fg="yellow",
                            log_func=logger.error)
        return False
    if _run_steps(host, _serve_steps(scripts, ("restart", scripts.restart()))):
        return _record_last_good(host, scripts, hook_python)
    if not rollback:
        host.log_styled("rollback disabled: the node is left as it is", fg="red",
                        log_func=logger.error)
        return False
    host.log("rolling back to the last configuration that passed the gate", logger.warning)
    ok, output = host.run_shell_command(StringCommand(scripts.restore_last_good()),
                                        print_output=True)
    if not ok:
        cause = status.cause_line(output.stdout_lines + output.stderr_lines)
        host.log_styled(f"rollback impossible: {cause}", fg="red", log_func=logger.error)
        return False
    previous = output.stdout_lines[-1].split()[1] if output.stdout_lines else "?"
    if _run_steps(host, _serve_steps(scripts, ("restart", scripts.restart()))[:2]):
        host.log_styled(f"rolled back: serving {previous} again", fg="yellow",
                        log_func=logger.error)
    else:
        host.log_styled(f"rollback to {previous} failed too", fg="red", log_func=logger.error)
    return False


@operation(is_idempotent=False)
def restarted(scripts, hook_python, rollback=True):
    """
    Restart the server and hold the deploy until it serves: stop and wait for the old
    processes, port and GPU memory to be released; start; readiness gate; worker environment;
    then record this configuration as the node's last known good. A start that fails is rolled
    back to the last known good (unless ``rollback`` is off) and fails the deploy.

    + scripts: ``NodeScripts`` for this node
    + hook_python: interpreter whose start-up hook belongs to the configuration
    + rollback: restore the last known good when the new configuration fails its gate
    """
    yield FunctionCommand(_restart_or_roll_back, (scripts, hook_python, rollback), {})


def _start_and_record(state, host, scripts, hook_python):
    return (_run_steps(host, _serve_steps(scripts, ("start", scripts.start())))
            and _record_last_good(host, scripts, hook_python))


def _gate_and_check(state, host, scripts):
    return _run_steps(host, _serve_steps(scripts, ("readiness gate", scripts.gate()))[1:])


def _check_workers(state, host, scripts):
    return _run_steps(host, [("worker environment check", scripts.workers())])


@operation()
def serving(scripts, hook_python):
    """
    Ensure the unit is enabled and serving without touching a server that already serves:
    start and gate it when it is not active, gate it when it is active but not ready, and
    check that every scheduler carries the profile's environment.

    + scripts: ``NodeScripts`` for this node
    + hook_python: interpreter whose start-up hook belongs to the configuration
    """
    unit, profile = scripts.unit, scripts.profile
    unit_state = host.get_fact(UnitState, unit=unit)
    if unit_state.get("UnitFileState") != "enabled":
        yield f"systemctl enable {shlex.quote(unit)}"
    if unit_state.get("ActiveState") not in ("active", "activating"):
        yield FunctionCommand(_start_and_record, (scripts, hook_python), {})
        return
    serving_now = host.get_fact(Serving, port=profile.service.port,
                                served_name=profile.model.served_name)
    if not (serving_now and serving_now["ready"]):
        yield FunctionCommand(_gate_and_check, (scripts,), {})
        return
    report = host.get_fact(WorkerEnvironment, scripts_dir=scripts.directory, unit=unit,
                           expect=profile.hook_vars())
    if not report or report.get("status") != status.READY:
        yield FunctionCommand(_check_workers, (scripts,), {})
        return
    host.noop(f"{unit} serves {profile.model.served_name}; "
              f"{len(report['workers'])} schedulers carry the profile's environment")


# -- One deploy at a time per node -----------------------------------------------------------

_HELD_LOCKS = {}  # host name -> open SSH channel holding the node's lock, or the refusal


@operation()
def deploy_lock(path, wait_s, holder):
    """
    Hold the node's deploy lock for the rest of this run, so two operators cannot interleave
    restarts. The lock lives in an SSH session of its own: it goes away with this process,
    however the process ends. Taking it is not a change.

    + path: lock file on the node
    + wait_s: how long to wait for another deploy to finish
    + holder: who we are, shown to whoever waits for us
    """
    outcome = _HELD_LOCKS.get(host.name)
    if outcome is None:
        outcome = _HELD_LOCKS[host.name] = _take_lock(path, wait_s, holder)
    if isinstance(outcome, str):
        yield FunctionCommand(_fail, (f"deploy lock {path}: {outcome}",), {})
        return
    host.noop(f"holding the deploy lock {path}")


def _take_lock(path, wait_s, holder):
    """The channel holding the lock, or a one-line reason why it could not be taken."""
    client = getattr(host.connector, "client", None)
    if client is None:
        return "this connector cannot hold a lock (SSH only)"
    source = (NODE_DIR / "lock.py").read_text()
    channel = client.get_transport().open_session()
    channel.exec_command(f"python3 -c {shlex.quote(source)} --path {shlex.quote(path)} "
                         f"--wait {float(wait_s)} --holder {shlex.quote(holder)}")
    lines = channel.makefile("r")
    for line in lines:
        line = line.strip()
        if line == "locked":
            return channel
        if line.startswith("waiting: "):
            host.log(f"waiting up to {wait_s:.0f}s for the deploy lock, held by "
                     f"{line[len('waiting: '):]}", logger.warning)
        elif line.startswith("busy: "):
            return f"held by {line[len('busy: '):]} (waited {wait_s:.0f}s)"
    return f"lock helper exited with status {channel.recv_exit_status()}"


def _fail(state, host, message):
    host.log_styled(message, fg="red", log_func=logger.error)
    return False


# -- Records ---------------------------------------------------------------------------------

@operation()
def manifest_recorded(scripts, profile):
    """
    Record on the controller what the node's engine holds (distribution, version, RECORD
    digest), so two nodes or two dates can be diffed. Writes only local files: never a change.

    + scripts: ``NodeScripts`` for this node
    + profile: the host's profile (its pins and drift_check name the distributions)
    """
    from pyinfra.context import state

    if state.is_executing:  # not while planning a --dry run
        _record_manifest(scripts, profile)
    yield from ()  # writes on the controller only: no command for the node


def _record_manifest(scripts, profile):
    names = list(dict.fromkeys([pin.partition("==")[0] for pin in profile.engine.packages]
                               + profile.engine.drift_check))
    found = host.get_fact(EngineManifest, venv=profile.engine.venv,
                          scripts_dir=scripts.directory, distributions=names)
    if not found:
        host.noop("no engine manifest: the venv or our scripts are missing")
        return
    path = manifest.record(host.name, profile.name, found)
    host.noop(f"engine manifest recorded in {path.relative_to(manifest.REPO_ROOT)}")
