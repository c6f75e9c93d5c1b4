"""GPU persistence mode as Ubuntu packages NVIDIA's driver: its nvidia-persistenced unit runs the
daemon with --no-persistence-mode, so "enabled and running" is not "on". The deploy's step and
`make verify` read the state one way (facts/gpu.py persistence_problems); the step overrides
ExecStart with a drop-in and confirms on the node. Played against a fake node: systemctl and
nvidia-smi stand-ins on PATH that behave as the packaged daemon does."""

import shlex
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from pyinfra.api import FunctionCommand
from pyinfra.api.command import FileUploadCommand
from pyinfra.context import ctx_host

from sglang_deploy.facts.gpu import GpuPersistence, persistence_problems
from sglang_deploy.operations.gpu_node import persistence_mode
from sglang_deploy.plan.commands import persistence_check_command
from sglang_deploy.verify.gpu_checks import persistence
from sglang_deploy.verify.verdict import FAILED, OK

NODE_SCRIPTS = Path(__file__).resolve().parents[2] / "sglang_deploy" / "node"
UBUNTU_ARGV = "/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose"

# systemctl as a node with Ubuntu's nvidia-utils: the unit's ExecStart is the package's unless
# our drop-in overrides it; (re)starting the daemon sets every GPU's persistence mode the way
# its command line says. nvidia-smi answers from that state (-pm 1 turns it on until a reboot).
SYSTEMCTL = r"""#!/bin/bash
node=$FAKE_NODE
argv="UBUNTU_ARGV"
dropin=$node/units/nvidia-persistenced.service.d/sglang-deploy.conf
[ -f "$dropin" ] && argv=$(sed -n 's/^ExecStart=\(.\+\)$/\1/p' "$dropin")
case "$1" in
show)
  echo "LoadState=$(cat $node/load)"
  echo "UnitFileState=$(cat $node/enabled)"
  echo "ActiveState=$(cat $node/active)"
  [ "$(cat $node/load)" = loaded ] && echo "ExecStart={ path=${argv%% *} ; argv[]=$argv ; ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }"
  ;;
daemon-reload) ;;
enable) echo enabled > $node/enabled ;;
start|restart)
  echo active > $node/active
  case "$argv" in *--no-persistence-mode*) echo Disabled > $node/pm ;; *) echo Enabled > $node/pm ;; esac
  echo "$1" >> $node/log ;;
*) exit 1 ;;
esac
""".replace("UBUNTU_ARGV", UBUNTU_ARGV)
NVIDIA_SMI = r"""#!/bin/bash
node=$FAKE_NODE
if [ "$1" = -pm ]; then [ -f $node/stuck ] || echo Enabled > $node/pm; exit 0; fi
echo "index, name, driver_version, persistence_mode, pci.bus_id"
for i in 0 1 2 3 4 5 6 7; do echo "$i, NVIDIA H200, 580.159.04, $(cat $node/pm), 00000000:0$i:00.0"; done
"""


@pytest.fixture
def node(tmp_path):
    """A fake node: (its state directory, a shell that runs a command there, as root)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("systemctl", SYSTEMCTL), ("nvidia-smi", NVIDIA_SMI)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    state = tmp_path / "node"
    (state / "units").mkdir(parents=True)
    for name, value in (("load", "loaded"), ("enabled", "enabled"), ("active", "active"), ("pm", "Disabled")):
        (state / name).write_text(value + "\n")

    def sh(command):
        env = f"PATH={shlex.quote(str(bin_dir))}:$PATH FAKE_NODE={shlex.quote(str(state))}"
        return subprocess.run(f"export {env}; {command}", shell=True, capture_output=True, text=True)

    return SimpleNamespace(state=state, sh=sh, run=lambda command: SimpleNamespace(stdout=sh(command).stdout))


class FakeHost:
    name = "node1"

    def __init__(self, node):
        self.node, self.noops, self.logs = node, [], []

    def get_fact(self, fact, **kwargs):
        return fact().process(self.node.sh(fact().command(**kwargs)).stdout.splitlines())

    def noop(self, text):
        self.noops.append(text)

    def log(self, text, *args, **kwargs):
        self.logs.append(text)


def step(node, scripts_dir=str(NODE_SCRIPTS)):
    """Run the deploy's step on the node: its commands executed there, in order; (commands, noops)."""
    fake = FakeHost(node)
    with ctx_host.use(fake):
        commands = list(
            persistence_mode._inner(True, scripts_dir=scripts_dir, unit_dir=str(node.state / "units"))
        )
    for command in commands:
        if isinstance(command, FileUploadCommand):
            Path(command.dest).write_text(command.src.getvalue())
            continue
        assert not isinstance(command, FunctionCommand)
        done = node.sh(str(command))
        assert done.returncode == 0, (command, done.stderr)
    return commands, fake.noops


def verify(node):
    plan = SimpleNamespace(
        profile=SimpleNamespace(gpu=SimpleNamespace(min_driver=None, model=None, persistence_mode=True))
    )
    return persistence(node, plan)


def test_ubuntus_unit_is_run_without_no_persistence_mode_and_the_step_and_verify_agree(node):
    found = verify(node)
    assert found.state == FAILED and "--no-persistence-mode (Ubuntu's packaging)" in found.detail
    assert "persistence mode off on GPU 0, 1, 2, 3, 4, 5, 6, 7" in found.detail
    commands, noops = step(node)
    assert noops == [] and (node.state / "pm").read_text().strip() == "Enabled"
    dropin = (node.state / "units" / "nvidia-persistenced.service.d" / "sglang-deploy.conf").read_text()
    assert (
        "[Service]\nExecStart=\nExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --verbose\n"
        in dropin
    )
    assert [str(c) for c in commands[-3:]] == [
        "systemctl daemon-reload",
        "systemctl restart nvidia-persistenced.service",
        persistence_check_command(str(NODE_SCRIPTS)),  # confirmed on the node: passed
    ]
    assert verify(node).state == OK
    assert step(node) == (
        [],
        ["persistence mode: on for every GPU (nvidia-persistenced.service enabled and running)"],
    )


def test_the_step_fails_when_what_it_did_left_a_gpu_off(node):
    step(node)  # the drop-in is there; then a GPU that keeps refusing (the fake's "stuck" knob)
    (node.state / "pm").write_text("Disabled\n")
    (node.state / "stuck").write_text("")
    with pytest.raises(AssertionError, match="persistence mode still off on GPU 0, 1, 2"):
        step(node)  # `nvidia-smi -pm 1`, then the confirmation: the step fails, it claims nothing


def test_without_the_daemon_nvidia_smi_sets_it_and_verify_agrees(node):
    (node.state / "load").write_text("not-found\n")
    assert verify(node).state == FAILED
    commands, _ = step(node)
    assert str(commands[0]) == "nvidia-smi -pm 1" and verify(node).state == OK
    assert step(node) == ([], ["persistence mode: on for every GPU"])


@pytest.mark.parametrize(
    "load, enabled, active, pm",
    [
        ("loaded", "enabled", "active", "Enabled"),
        ("loaded", "disabled", "active", "Enabled"),
        ("loaded", "enabled", "inactive", "Enabled"),
        ("loaded", "enabled", "active", "Disabled"),
        ("not-found", "", "inactive", "Enabled"),
        ("not-found", "", "inactive", "Disabled"),
    ],
)
def test_the_step_does_nothing_exactly_where_verify_says_ok(node, load, enabled, active, pm):
    for name, value in (("load", load), ("enabled", enabled), ("active", active), ("pm", pm)):
        (node.state / name).write_text(value + "\n")
    found = GpuPersistence().process(node.sh(GpuPersistence().command()).stdout.splitlines())
    fake = FakeHost(node)
    with ctx_host.use(fake):
        commands = list(persistence_mode._inner(True, scripts_dir=None, unit_dir=str(node.state / "units")))
    assert (commands == []) == (verify(node).state == OK) == (persistence_problems(found) == [])
