"""The SGLang stand-in under a plain systemd unit on a sandbox node (no deploy involved):
what reaches spawned schedulers, and how each injected failure looks from outside.

- variables of the unit's EnvironmentFile= reach every scheduler, over the start-up hook's
  defaults; variables exported in an SSH shell before `systemctl restart` do not (the
  incident's trap). A titled scheduler's /proc/<pid>/environ is blank (setproctitle, as on
  SGLang), so what each one holds is read from the hook's records, as the deploy's check does;
- each failure the stand-in can inject shows in the exit status, the journal and the port;
- how a stop ends: SIGTERM to the main process alone (drained, exit 0) and `systemctl stop`.
"""

import json
import time

import pytest

from sglang_deploy.plan.render import HOOK_MODULE, render_hook_module, render_hook_pth
from sglang_deploy.plan.wheelhouse import lock_wheels_dir
from sglang_deploy.profile.schema import load_profile

from .sandbox import nodes, ssh

pytestmark = pytest.mark.e2e

NODE, UNIT, VENV = "node2", "standin-plain.service", "/opt/standin-plain"
UNIT_TEXT = f"""[Service]
Type=exec
EnvironmentFile=/etc/standin-plain.env
Environment=PYTHONUNBUFFERED=1
Environment=SGLANG_DEPLOY_ENV_RECORDS=/run/standin-plain
RuntimeDirectory=standin-plain
ExecStart={VENV}/bin/python -m sglang.launch_server --model-path /models/tiny-standin --tp-size 2 \\
  --context-length 512 --host 127.0.0.1 --port {{port}}
Restart=no
"""
ENV_TEXT = 'NCCL_PROTO="LL"\nNCCL_P2P_LEVEL="SYS"\nSPACED="a b $c # d"\nSGLANG_STANDIN_LOAD_SECONDS="1"\n'
# The start-up hook's defaults: a value that reached a scheduler from elsewhere wins over them.
HOOK_ENV = {
    name: "from-the-hook" for name in ("NCCL_PROTO", "NCCL_P2P_LEVEL", "SPACED", "NCCL_ALGO", "NCCL_NTHREADS")
}


@pytest.fixture(scope="module")
def plain_unit():
    # The stand-in and its closure (fastapi, pydantic, ...), from the sandbox lock's wheelhouse
    # (`make wheelhouse-sandbox`): the node has no index.
    wheels = [
        w
        for w in lock_wheels_dir(load_profile("sandbox").engine).glob("*.whl")
        if not w.name.startswith("uv-")
    ]
    assert any(w.name.startswith("sglang-") for w in wheels), "run `make wheelhouse-sandbox`"
    ssh(NODE, "rm -rf /tmp/standin-wheels && mkdir /tmp/standin-wheels")
    for wheel in wheels:
        ssh(NODE, f"cat > /tmp/standin-wheels/{wheel.name}", stdin=wheel.read_bytes())
    ssh(
        NODE,
        f"test -x {VENV}/bin/python || python3 -m venv {VENV}; "
        f"{VENV}/bin/pip install -q --no-index --find-links /tmp/standin-wheels --force-reinstall "
        "sglang==0.5.23+sandbox",
    )
    site = ssh(
        NODE, f"{VENV}/bin/python -c 'import sysconfig; print(sysconfig.get_path(\"purelib\"))'"
    ).strip()
    profile = load_profile("sandbox", overrides={"env": HOOK_ENV})
    ssh(NODE, f"cat > {site}/{HOOK_MODULE}.py", stdin=render_hook_module(profile))
    ssh(NODE, f"cat > {site}/{HOOK_MODULE}.pth", stdin=render_hook_pth(profile))
    ssh(NODE, f"cat > /etc/systemd/system/{UNIT}", stdin=UNIT_TEXT.format(port=port()))
    yield
    ssh(
        NODE,
        f"systemctl stop {UNIT}; rm -f /etc/systemd/system/{UNIT} /etc/standin-plain.env; "
        f"systemctl daemon-reload; systemctl reset-failed {UNIT}",
        check=False,
    )


def start(env_text=ENV_TEXT, shell_exports=""):
    ssh(NODE, "cat > /etc/standin-plain.env", stdin=env_text)
    ssh(
        NODE,
        f"{shell_exports} systemctl daemon-reload; systemctl reset-failed {UNIT} 2>/dev/null; "
        f"systemctl restart {UNIT}",
    )


def wait_for(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def port():
    """The plain unit's port: 1000 above node2's server port (the nodes share the host's network)."""
    return nodes()[1][NODE]["server_port"] + 1000


def healthy():
    return (
        ssh(
            NODE,
            f"curl -s -o /dev/null -w '%{{http_code}}' -m 2 http://127.0.0.1:{port()}/health",
            check=False,
        )
        == "200"
    )


def scheduler_environs():
    """Each scheduler's variables as its start-up hook recorded them (its /proc/<pid>/environ
    reads as NUL bytes: checked too)."""
    main = ssh(NODE, f"systemctl show -p MainPID --value {UNIT}").strip()
    pids = ssh(NODE, f"pgrep -P {main} -f '^sglang::scheduler'").split()
    for pid in pids:
        assert not ssh(NODE, f"tr -d '\\0' < /proc/{pid}/environ"), pid
    return {pid: json.loads(ssh(NODE, f"cat /run/standin-plain/{pid}.json"))["variables"] for pid in pids}


def port_listening():
    return f":{port()} " in ssh(NODE, f"ss -Hltn 'sport = :{port()}'", check=False)


def test_env_file_reaches_every_spawned_scheduler(plain_unit):
    start()
    assert wait_for(healthy)
    environs = scheduler_environs()
    assert len(environs) == 2
    for pid, environ in environs.items():
        assert environ["NCCL_PROTO"] == "LL" and environ["NCCL_P2P_LEVEL"] == "SYS", pid
        assert environ["SPACED"] == "a b $c # d", pid


def test_variables_exported_in_the_ssh_shell_do_not_reach_them(plain_unit):
    start(shell_exports="export NCCL_ALGO=Ring NCCL_NTHREADS=512;")
    assert wait_for(healthy)
    for pid, environ in scheduler_environs().items():
        assert environ["NCCL_ALGO"] == environ["NCCL_NTHREADS"] == "from-the-hook", pid


@pytest.mark.parametrize(
    "mode, journal_text, exits",
    [
        ("crash-load", "Traceback (most recent call last)", True),
        ("cuda-oom", "torch.OutOfMemoryError: CUDA out of memory", True),
        ("nccl-error", "NCCL error", True),
        ("warmup-fails", "Initialization failed. warmup error", True),
        ("scheduler-dies-after-ready", "scheduler is dead", True),
        ("hang", "Load weight begin", False),
    ],
)
def test_each_injected_failure_is_visible_from_outside(plain_unit, mode, journal_text, exits):
    start(ENV_TEXT + f'SGLANG_STANDIN_FAIL="{mode}"\nSGLANG_STANDIN_FAIL_AFTER_SECONDS="1"\n')
    state = lambda: ssh(NODE, f"systemctl show -p ActiveState,ExecMainStatus {UNIT}")  # noqa: E731
    if exits:
        assert wait_for(lambda: "ActiveState=failed" in state()), state()
        assert "ExecMainStatus=0" not in state()
    else:
        time.sleep(4)
        assert "ActiveState=active" in state()
    journal = ssh(
        NODE,
        f"journalctl -u {UNIT} -o cat --no-pager "
        f"_SYSTEMD_INVOCATION_ID=$(systemctl show -p InvocationID --value {UNIT})",
    )
    assert journal_text in journal, journal[-2000:]
    assert not port_listening()


def test_stop_main_process_drains_and_systemctl_stop_ends_through_the_watchdog(plain_unit):
    """SGLang 0.5.23's two stops (docs/sglang-shutdown.md). SIGTERM to the main process alone:
    it drains at its next 5-s look and exits 0. `systemctl stop` (KillMode=control-group):
    the schedulers die of the same SIGTERM, the 1-s watchdog fails the launcher: the stop
    returns within about a second and leaves the unit failed."""
    show = lambda: ssh(NODE, f"systemctl show -p ActiveState,Result,ExecMainStatus {UNIT}")  # noqa: E731
    invocation = lambda: ssh(NODE, f"systemctl show -p InvocationID --value {UNIT}").strip()  # noqa: E731
    journal = lambda run: ssh(
        NODE,
        f"journalctl -u {UNIT} -o cat --no-pager "  # noqa: E731
        f"_SYSTEMD_INVOCATION_ID={run}",
    )
    start()
    run = invocation()  # an inactive unit has none any more
    assert wait_for(healthy), journal(run)[-2000:]
    sent = time.monotonic()
    ssh(NODE, f"systemctl kill --kill-who=main --signal=SIGTERM {UNIT}")
    assert wait_for(lambda: "ActiveState=inactive" in show(), timeout=10), show()
    drained = time.monotonic() - sent
    assert drained < 6.5 and "Result=success" in show() and "ExecMainStatus=0" in show(), (drained, show())
    assert "Gracefully exiting... Remaining number of requests 0." in journal(run)
    assert not port_listening()

    start()
    run = invocation()
    assert wait_for(healthy), journal(run)[-2000:]
    sent = time.monotonic()
    ssh(NODE, f"systemctl stop {UNIT}")
    took = time.monotonic() - sent
    assert took < 2.5, took
    assert "ActiveState=failed" in show(), show()
    assert "Subprocess scheduler_0" in journal(run) and "crashed with exit code -15" in journal(run)
    assert not port_listening()
    print(f"\nSIGTERM to the main process: down after {drained:.1f}s; systemctl stop: {took:.1f}s")
