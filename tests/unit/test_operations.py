"""Operations case by case: what each yields for a given node state (facts faked), and that it
calls host.noop when there is nothing to do."""

import base64
import hashlib
import os
import subprocess
import time

import pytest
from pyinfra.api import FunctionCommand, StringCommand
from pyinfra.api.command import FileUploadCommand
from pyinfra.context import ctx_host

from sglang_deploy import operations
from sglang_deploy.facts.engine_venvs import EngineVenvs
from sglang_deploy.facts.serving import (
    EngineDrift,
    FileDigests,
    InstalledDistributions,
    InterpreterStartup,
    LastGood,
    Serving,
    UnitState,
    WorkerEnvironment,
)
from sglang_deploy.node.lib import status
from sglang_deploy.operations import files as files_ops
from sglang_deploy.operations import service
from sglang_deploy.plan.host_plan import plan_for


def on_node(content, mode):
    """FileDigests' answer for files holding ``content`` with ``mode``, whatever paths are asked."""
    digest = hashlib.sha256(content.encode()).hexdigest()
    return lambda paths: {path: {"mode": mode, "user": "root", "sha256": digest} for path in paths}


class FakeHost:
    """Answers facts from a table keyed by fact class; records noops."""

    name = "node1"

    def __init__(self, facts):
        self.facts = facts
        self.noops = []

    def get_fact(self, fact, **kwargs):
        answer = self.facts.get(fact)
        return answer(**kwargs) if callable(answer) else answer

    def noop(self, text):
        self.noops.append(text)

    def get_temp_filename(self, *args, **kwargs):
        return "/tmp/upload"

    def log(self, *args, **kwargs):
        pass


@pytest.fixture
def run(monkeypatch):
    def run(op, facts, *args, **kwargs):
        fake = FakeHost(facts)
        monkeypatch.setattr(files_ops, "_diff_wanted", lambda: False)
        with ctx_host.use(fake):
            commands = list(op._inner(*args, **kwargs))
        return [str(c) if isinstance(c, str) else c for c in commands], fake.noops

    return run


# No find_links: unit tests do not need the stand-in wheel built.
PLAN = plan_for(
    {
        "profile": "sandbox",
        "profile_overrides": {"engine": {"find_links": []}},
        "sglang_deploy_dir": "/opt/sd",
        "env_dir": "/etc/sglang",
        "unit_dir": "/etc/systemd/system",
        "state_dir": "/var/lib/sd",
        "run_dir": "/run/sglang-deploy",
        "deploy_lock_wait_s": 1,
        "rollback": True,
        "repair": False,
    }
)
PINS = ["sglang==0.5.23+sandbox"]


# -- engine ----------------------------------------------------------------------------------

V = "/opt/sglang/venvs/sglang-0.5.23+sandbox-abc"
LINK = "/opt/sglang/venv"


def venvs_fact(live=None, pending=None, built=True):
    return {
        "venvs": [{"name": V.rsplit("/", 1)[1], "built_at": 1.0 if built else None}],
        "live": live,
        "pending": pending,
        "last_good": None,
    }


def test_engine_with_its_venv_built_and_live_is_a_noop(run):
    facts = {
        InstalledDistributions: {"sglang": "0.5.23+sandbox"},
        EngineVenvs: venvs_fact(live=V.rsplit("/", 1)[1]),
    }
    commands, noops = run(operations.engine, facts, V, LINK, "python3", PINS, "/opt/sd/node")
    assert commands == [] and noops == [f"{LINK} -> {V} holds sglang==0.5.23+sandbox"]


def test_a_new_pin_set_is_built_beside_the_live_venv_and_staged_for_the_restart(run):
    facts = {
        EngineVenvs: {
            "venvs": [{"name": "old", "built_at": 1.0}],
            "live": "old",
            "pending": None,
            "last_good": "old",
        }
    }
    commands, _ = run(operations.engine, facts, V, LINK, "python3", PINS, "/opt/sd/node", wheels_dir="/w")
    assert commands[0] == f"rm -rf {V} && mkdir -p /opt/sglang/venvs"
    assert commands[1] == f"python3 -m venv --copies {V}"
    assert commands[3] == (
        f"{V}/bin/pip install --no-input --disable-pip-version-check "
        "--no-index --find-links /w sglang==0.5.23+sandbox"
    )
    assert commands[4] == f"python3 /opt/sd/node/venvs.py mark --venv {V}"
    # The live venv and the unit's link are not touched: only the link for the restart.
    assert commands[5:] == [f"ln -sfn {V} {LINK}.next"]
    assert not any("/old" in c or c.endswith(f" {LINK}") for c in commands)


def test_a_built_venv_that_is_not_live_is_staged_again_without_a_rebuild(run):
    facts = {InstalledDistributions: {"sglang": "0.5.23+sandbox"}, EngineVenvs: venvs_fact(live="other")}
    commands, _ = run(operations.engine, facts, V, LINK, "python3", PINS, "/opt/sd/node")
    assert commands == [f"ln -sfn {V} {LINK}.next"]


def test_a_first_deploy_points_the_link_at_once(run):
    facts = {EngineVenvs: {"venvs": [], "live": None, "pending": None, "last_good": None}}
    commands, _ = run(operations.engine, facts, V, LINK, "python3", PINS, "/opt/sd/node")
    assert commands[-1] == f"ln -sfn {V} {LINK}"


def test_an_unfinished_build_is_built_again(run):
    facts = {EngineVenvs: venvs_fact(live="other", built=False)}
    commands, _ = run(operations.engine, facts, V, LINK, "python3", PINS, "/opt/sd/node")
    assert commands[0].startswith(f"rm -rf {V} ") and commands[-2].endswith(f"mark --venv {V}")


def test_a_tool_venv_is_created_with_its_pins_when_missing(run):
    commands, _ = run(
        operations.tool_venv,
        {InstalledDistributions: None},
        "/opt/hf/venv",
        "python3",
        ["huggingface_hub==0.36.0"],
        wheels_dir="/w",
    )
    assert commands == [
        "rm -rf /opt/hf/venv && mkdir -p /opt/hf",
        "python3 -m venv /opt/hf/venv",
        "/opt/hf/venv/bin/pip install --no-input --disable-pip-version-check "
        "--no-index --find-links /w huggingface_hub==0.36.0",
    ]


def test_a_tool_venv_holding_its_pins_is_a_noop_and_a_differing_pin_is_reinstalled(run):
    held = {InstalledDistributions: {"sglang-router": "0.3.2", "aiohttp": "3.14.5"}}
    commands, noops = run(operations.tool_venv, held, "/opt/r/venv", "python3", ["sglang-router==0.3.2"])
    assert commands == [] and noops == ["/opt/r/venv holds sglang-router==0.3.2"]
    commands, _ = run(operations.tool_venv, held, "/opt/r/venv", "python3", ["sglang-router==0.3.3"])
    assert commands == [
        "/opt/r/venv/bin/pip install --no-input --disable-pip-version-check sglang-router==0.3.3"
    ]


def test_engine_installs_only_the_differing_pins(run):
    installed = {"sglang": "0.5.22", "torch": "2.13.0"}
    facts = {InstalledDistributions: installed, EngineVenvs: venvs_fact(live=V.rsplit("/", 1)[1])}
    commands, _ = run(
        operations.engine, facts, V, LINK, "python3", ["sglang==0.5.23", "torch==2.13.0"], "/opt/sd/node"
    )
    assert commands == [f"{V}/bin/pip install --no-input --disable-pip-version-check sglang==0.5.23"]


def test_engine_repair_reinstalls_drifted_and_removes_strays_in_its_own_venv(run):
    drift = {
        "distributions": {
            "sglang": {
                "version": "0.5.23",
                "modified": ["sglang/a.py"],
                "missing": [],
                "unexpected": ["sglang/stray.py"],
            }
        }
    }
    facts = {
        InstalledDistributions: {"sglang": "0.5.23"},
        EngineDrift: drift,
        EngineVenvs: venvs_fact(live=V.rsplit("/", 1)[1]),
        InterpreterStartup: {"purelib": "/v/lib/site", "site_dirs": ["/v/lib/site"]},
    }
    commands, _ = run(
        operations.engine,
        facts,
        V,
        LINK,
        "python3",
        ["sglang==0.5.23"],
        "/opt/sd/node",
        repair=("/opt/sd/node", ["sglang"]),
    )
    assert commands == [
        f"{V}/bin/pip install --no-input --disable-pip-version-check --force-reinstall --no-deps "
        "sglang==0.5.23",
        "cd /v/lib/site && rm -f -- sglang/stray.py",
    ]


def test_pruning_keeps_what_another_service_of_the_node_runs_or_goes_back_to(run):
    venvs = [{"name": n, "built_at": float(i)} for i, n in enumerate(["b-good", "b-live", "old", "mine"])]
    found = {
        "venvs": venvs,
        "live": "mine",
        "pending": None,
        "last_good": "mine",
        "in_use": {"b-live": ["live at /srv/b/venv"], "b-good": ["the last known good in /var/lib/sd/b"]},
    }
    commands, _ = run(
        operations.old_venvs_pruned,
        {EngineVenvs: found},
        "/opt/sglang/venvs",
        LINK,
        0,
        "/opt/sglang/venvs/mine",
        "/opt/sd/node",
        "/var/lib/sd/a/last-good",
    )
    assert commands == ["rm -rf -- /opt/sglang/venvs/old"]


# -- files -----------------------------------------------------------------------------------


def test_secret_file_unchanged_is_a_noop(run):
    content = 'A="1"\n'
    facts = {FileDigests: on_node(content, "600")}
    commands, noops = run(operations.secret_file, facts, "/etc/sglang/s.env", content)
    assert commands == [] and noops == ["/etc/sglang/s.env is up to date"]


def test_secret_file_with_wrong_mode_is_fixed_without_upload(run):
    content = 'A="1"\n'
    facts = {FileDigests: on_node(content, "644")}
    commands, _ = run(operations.secret_file, facts, "/etc/sglang/s.env", content)
    assert commands == ["chown root:root /etc/sglang/s.env && chmod 0600 /etc/sglang/s.env"]


def test_secret_file_changed_is_written_from_stdin_never_from_an_upload(run):
    commands, _ = run(
        operations.secret_file, {FileDigests: on_node("old", "600")}, "/etc/sglang/s.env", 'A="secret"\n'
    )
    (write,) = commands  # no FileUploadCommand: as a sudo user, pyinfra's goes through /tmp
    assert isinstance(write, StringCommand) and "secret" not in write.get_raw_value()
    assert "secret" in base64.b64decode(write.connector_arguments["_stdin"].split("\n", 1)[1]).decode()
    assert 'mv -f "$new" /etc/sglang/s.env' in write.get_raw_value()


class Node:
    """Runs an operation's commands on this machine, under ``root``: shell commands as they
    are; an upload as pyinfra's SFTP does it as root (the remote file opened for writing, in
    place), optionally dying halfway (a full disk, a dropped link)."""

    def __init__(self, root, fail_uploads=False):
        self.root, self.fail_uploads, self.upload_modes = root, fail_uploads, []

    def path(self, remote):
        return str(self.root) + remote

    def run(self, commands):
        import io

        for command in commands:
            if isinstance(command, StringCommand):  # a secret, on the command's stdin
                self.run_with_stdin(command)
                continue
            if isinstance(command, FileUploadCommand):
                data = command.src.getvalue() if isinstance(command.src, io.StringIO) else None
                data = data.encode() if data is not None else open(command.src, "rb").read()
                with open(self.path(command.dest), "wb") as f:
                    self.upload_modes.append(os.stat(self.path(command.dest)).st_mode & 0o777)
                    if self.fail_uploads:
                        f.write(data[: len(data) // 2])
                        raise OSError(28, "No space left on device")
                    f.write(data)
                continue
            subprocess.run(["bash", "-c", self.under_root(command)], check=True)

    def under_root(self, text):
        text = text.replace(" /", " " + str(self.root) + "/").replace("=/", "=" + str(self.root) + "/")
        if os.geteuid() != 0:
            text = text.replace("chown root:root", "true")
        return text

    def run_with_stdin(self, command):
        """As pyinfra's SSH connector sends `_stdin`; a failing "upload" is a link that drops
        halfway through it: what arrived so far, then end of input."""
        data = command.connector_arguments["_stdin"].encode()
        shell = subprocess.Popen(
            ["bash", "-c", self.under_root(command.get_raw_value())], stdin=subprocess.PIPE
        )
        if self.fail_uploads:  # past the digest line, half of the content
            digest_line = data.index(b"\n") + 1
            shell.stdin.write(data[: digest_line + (len(data) - digest_line) // 2])
            shell.stdin.flush()
            new = self.path("/etc/sglang/.s.env.sglang-deploy-new")
            deadline = time.monotonic() + 10
            while shell.poll() is None and not os.path.exists(new) and time.monotonic() < deadline:
                time.sleep(0.01)
            self.upload_modes.append(os.stat(new).st_mode & 0o777)
        else:
            shell.stdin.write(data)
        shell.stdin.close()
        if shell.wait(timeout=30) != 0:
            raise OSError(5, "the link dropped")


@pytest.mark.parametrize(
    "write",
    [
        lambda run, d, local: run(
            operations.secret_file, {FileDigests: {}}, f"{d}/s.env", "HF_TOKEN=new-secret\n"
        ),
        lambda run, d, local: run(
            operations.startup_hook,
            {InterpreterStartup: {"purelib": d, "site_dirs": [d]}, FileDigests: {}},
            "/v/bin/python",
            "NEW MODULE",
            "import new\n",
        ),
        lambda run, d, local: run(operations.binary_file, {}, local("w.whl", "NEW WHEEL"), f"{d}/w.whl"),
    ],
    ids=["env file", "start-up hook", "wheel"],
)
def test_a_file_the_server_starts_from_is_written_whole_or_not_at_all(run, tmp_path, write, monkeypatch):
    d = "/etc/sglang"
    (tmp_path / "etc" / "sglang").mkdir(parents=True)
    monkeypatch.setattr(files_ops, "_remote", lambda dest: None)  # the wheel's digest fact
    old = {
        "s.env": "HF_TOKEN=old\n",
        "sglang_deploy_env.py": "OLD",
        "sglang_deploy_env.pth": "import old\n",
        "w.whl": "OLD WHEEL",
    }
    for name, text in old.items():
        (tmp_path / "etc" / "sglang" / name).write_text(text)

    def local(name, text):
        (tmp_path / "controller").mkdir(exist_ok=True)
        (tmp_path / "controller" / name).write_text(text)
        return str(tmp_path / "controller" / name)

    commands, _ = write(run, d, local)
    dying = Node(tmp_path, fail_uploads=True)
    with pytest.raises(OSError):
        dying.run(commands)
    for name, text in old.items():  # the old file, whole
        assert (tmp_path / "etc" / "sglang" / name).read_text() == text
    assert dying.upload_modes == [0o600]  # the content landed in a private file only
    node = Node(tmp_path)
    node.run(commands)  # the next run
    written = {
        p.name: p for p in (tmp_path / "etc" / "sglang").iterdir() if p.read_text() not in old.values()
    }
    assert written and all(not name.startswith(".") for name in written)  # no temporary file left
    modes = {name: os.stat(path).st_mode & 0o777 for name, path in written.items()}
    assert modes in (
        {"s.env": 0o600},
        {"sglang_deploy_env.py": 0o644, "sglang_deploy_env.pth": 0o644},
        {"w.whl": 0o644},
    )


def test_unit_unchanged_is_a_noop_and_changed_is_verified_before_install(run):
    text = "[Service]\n"
    commands, noops = run(
        operations.unit_file,
        {FileDigests: on_node(text, "644")},
        "sglang.service",
        text,
        PLAN.settings.run_dir,
    )
    assert commands == [] and noops
    commands, _ = run(operations.unit_file, {FileDigests: {}}, "sglang.service", text, PLAN.settings.run_dir)
    assert [c for c in commands if isinstance(c, str)] == [
        "mkdir -p /run/sglang-deploy",
        "systemd-analyze verify /run/sglang-deploy/sglang.service",
        "install -m 0644 -o root -g root /run/sglang-deploy/sglang.service "
        "/etc/systemd/system/.sglang.service.sglang-deploy-new && "
        "sync /etc/systemd/system/.sglang.service.sglang-deploy-new && "
        "mv -f /etc/systemd/system/.sglang.service.sglang-deploy-new /etc/systemd/system/sglang.service",
        "systemctl daemon-reload",
    ]


def test_pth_directory_is_the_one_the_interpreter_processes():
    assert operations.pth_directory({"purelib": "/v/lib/site", "site_dirs": ["/v/lib/site"]}) == "/v/lib/site"
    assert operations.pth_directory({"purelib": "/x", "site_dirs": ["/v/lib/dist"]}) == "/v/lib/dist"


# -- service ---------------------------------------------------------------------------------

SERVING_FACTS = {
    UnitState: {"UnitFileState": "enabled", "ActiveState": "active"},
    Serving: {"ready": True},
    WorkerEnvironment: {"status": status.READY, "workers": [{}, {}]},
}


def test_serving_node_is_left_alone(run):
    commands, noops = run(operations.serving, SERVING_FACTS, PLAN.scripts, "/opt/sglang/venv/bin/python")
    assert commands == []
    assert noops == ["sglang.service serves tiny-standin; 2 schedulers carry the profile's environment"]


def test_stopped_disabled_unit_is_enabled_started_and_gated(run):
    facts = {**SERVING_FACTS, UnitState: {"UnitFileState": "disabled", "ActiveState": "failed"}}
    commands, _ = run(operations.serving, facts, PLAN.scripts, "/opt/sglang/venv/bin/python")
    assert commands[0] == "systemctl enable sglang.service"
    assert isinstance(commands[1], FunctionCommand) and commands[1].function is service._start_and_record


def test_active_but_not_ready_is_gated_not_restarted(run):
    facts = {**SERVING_FACTS, Serving: {"ready": False}}
    commands, _ = run(operations.serving, facts, PLAN.scripts, "/opt/sglang/venv/bin/python")
    assert [c.function for c in commands] == [service._gate_and_record]


STARTUP = {
    "purelib": "/opt/sglang/venv/lib/python3.11/site-packages",
    "site_dirs": ["/opt/sglang/venv/lib/python3.11/site-packages"],
}


def test_serving_the_last_known_good_is_left_alone(run):
    facts = {
        **SERVING_FACTS,
        InterpreterStartup: STARTUP,
        LastGood: {"last_good": "sandbox", "differs": [], "not_running": None},
    }
    commands, noops = run(operations.serving, facts, PLAN.scripts, "/opt/sglang/venv/bin/python")
    assert commands == [] and len(noops) == 1


def test_serving_a_configuration_not_recorded_as_last_good_records_it(run):
    # A deploy killed while its gate waited: the new configuration serves, the record is older.
    facts = {
        **SERVING_FACTS,
        InterpreterStartup: STARTUP,
        LastGood: {"last_good": "sandbox-old", "differs": ["env"], "not_running": None},
    }
    commands, noops = run(operations.serving, facts, PLAN.scripts, "/opt/sglang/venv/bin/python")
    assert [c.function for c in commands] == [service._last_good_is_what_serves]
    assert noops == []


def test_last_good_compare_and_save_name_the_unit():
    hook = {"hook": "/v/site/h.py", "hook_pth": "/v/site/h.pth"}
    for command in (PLAN.scripts.save_last_good(hook), PLAN.scripts.compare_last_good(hook)):
        assert "--unit sglang.service" in command and "--file hook=/v/site/h.py" in command
    assert " compare " in PLAN.scripts.compare_last_good(hook)


def test_workers_without_the_profile_env_fail_the_check(run):
    facts = {**SERVING_FACTS, WorkerEnvironment: {"status": status.WORKER_ENV_MISMATCH}}
    commands, _ = run(operations.serving, facts, PLAN.scripts, "/opt/sglang/venv/bin/python")
    assert [c.function for c in commands] == [service._check_workers]


def test_node_scripts_command_lines():
    scripts = PLAN.scripts
    assert scripts.gate() == (
        "python3 /opt/sd/node/gate.py --unit sglang.service --host 127.0.0.1 --port 30000 "
        "--served-name tiny-standin --timeout 120 --interval 0.25 "
        "--progress-every 10.0 --hang-after 300.0 --fired-up-grace 15.0 --settle 2.0 "
        "--json /run/sglang-deploy/sglang.service.gate.json"
    )
    assert scripts.restart() == (
        "python3 /opt/sd/node/restart.py --unit sglang.service --port 30000 --stop-timeout 150"
    )
    assert scripts.gpus_needed() == 2
    # The sandbox engine is locked: drift over every locked distribution.
    assert "--drift annotated-doc annotated-types anyio " in scripts.preflight("/opt/sglang/venv/bin/python")
    assert "--no-argv" in scripts.preflight(argv_check=False)
    assert scripts.restore_last_good() == (
        "python3 /opt/sd/node/lastgood.py restore --dir /var/lib/sd/sglang/last-good"
    )


def test_manifests_diff_by_version_and_record():
    from sglang_deploy.report import manifest

    a = {
        "distributions": [
            {"name": "sglang", "version": "0.5.23", "record_sha256": "x"},
            {"name": "torch", "version": "2.13.0", "record_sha256": "t"},
        ]
    }
    b = {
        "distributions": [
            {"name": "sglang", "version": "0.5.23", "record_sha256": "y"},
            {"name": "torch", "version": "2.14.1", "record_sha256": "t"},
            {"name": "sgl-kernel", "version": "0.3.0", "record_sha256": "k"},
        ]
    }
    assert manifest.diff(a, b) == [
        "sgl-kernel: only in B",
        "sglang 0.5.23: different RECORD (a different build)",
        "torch: 2.13.0 vs 2.14.1",
    ]
    assert manifest.diff(a, a) == []


def test_manifest_record_writes_a_dated_file_and_latest(tmp_path):
    from sglang_deploy.report import manifest

    found = {
        "manifest": [{"name": "sglang", "version": "0.5.23", "record_sha256": "x"}],
        "missing_distributions": [],
    }
    path = manifest.record("node1", "sandbox", found, directory=tmp_path)
    assert path.parent == tmp_path / "node1"
    assert (tmp_path / "node1" / "latest.json").read_text() == path.read_text()


HOOK_STARTUP = {"purelib": "/v/lib/site", "site_dirs": ["/v/lib/site"]}


def test_startup_hook_up_to_date_is_a_noop_from_one_fact(run):
    asked = []

    def digests(paths):
        asked.append(paths)
        texts = {
            "/v/lib/site/sglang_deploy_env.py": "MODULE",
            "/v/lib/site/sglang_deploy_env.pth": "import x\n",
        }
        return {path: on_node(texts[path], "644")([path])[path] for path in paths}

    facts = {InterpreterStartup: HOOK_STARTUP, FileDigests: digests}
    commands, noops = run(operations.startup_hook, facts, "/v/bin/python", "MODULE", "import x\n")
    assert commands == [] and noops == ["start-up hook /v/lib/site/sglang_deploy_env.pth is up to date"]
    assert len(asked) == 1


def test_startup_hook_uploads_only_what_differs_and_fixes_modes(run):
    def digests(paths):
        module = on_node("MODULE", "600")(paths[:1])  # right text, wrong mode
        return module  # the .pth is missing

    facts = {InterpreterStartup: HOOK_STARTUP, FileDigests: digests}
    commands, noops = run(operations.startup_hook, facts, "/v/bin/python", "MODULE", "import x\n")
    assert commands[0] == "chmod 0644 /v/lib/site/sglang_deploy_env.py"
    temp = "/v/lib/site/.sglang_deploy_env.pth.sglang-deploy-new"
    assert isinstance(commands[2], FileUploadCommand) and commands[2].dest == temp
    assert commands[3].endswith(
        f"chmod 0644 {temp} && sync {temp} && mv -f {temp} /v/lib/site/sglang_deploy_env.pth"
    )
    assert len(commands) == 4 and noops == []
