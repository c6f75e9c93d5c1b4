"""Several sandboxes side by side (sandbox/sandbox.py --id K): ports and machine names apart,
the id kept in the state file, the inventory reading $SANDBOX_DIR; and the end-to-end shards
(sandbox/e2e_shards.py) that run on them: together they select what the suite's markers select,
each test once."""

import collections
import fcntl
import importlib.util
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sglang_deploy.plan import hosts

REPO = Path(__file__).resolve().parents[2]


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


sandbox = load("sandbox_tool", REPO / "sandbox" / "sandbox.py")
shards = load("e2e_shards", REPO / "sandbox" / "e2e_shards.py")


def test_sandbox_0_is_as_before_and_sandbox_k_is_100_k_ports_up_with_its_own_machine_names(tmp_path):
    assert sandbox.node_record(2, tmp_path)["machine"] == "node2"
    rec = sandbox.node_record(2, tmp_path, sandbox_id=3)
    assert (rec["name"], rec["machine"]) == ("node2", "sandbox3-node2")
    assert (rec["ssh_port"], rec["server_port"]) == (2502, 30302)


def every_port(node):
    """What a node listens on: sshd, and the server port with every port the sandbox inventory
    derives from it (router exporter and probe, node exporter, a group's dist-init port and the
    next one, where the stand-in's torch meets)."""
    server = node["server_port"]
    derived = [
        server - 1000,
        server - hosts.SANDBOX_PROBE_OFFSET,
        hosts.sandbox_exporter_port(node),
        *(server + hosts.SANDBOX_DIST_INIT_OFFSET + d for d in range(2)),
    ]
    return [node["ssh_port"], server, *derived]


def test_no_two_sandboxes_share_a_port(tmp_path):
    owner = {}
    for sandbox_id in range(sandbox.MAX_ID + 1):
        for index in range(1, sandbox.MAX_NODES + 1):
            for port in every_port(sandbox.node_record(index, tmp_path, sandbox_id=sandbox_id)):
                assert owner.setdefault(port, sandbox_id) == sandbox_id, f"port {port}"
                assert port < 32768, "below Linux's ephemeral ports"


@pytest.mark.parametrize("sandbox_id,count", [(-1, 1), (10, 1), (0, 100), (1, 100)])
def test_ids_and_sizes_out_of_range_are_refused(sandbox_id, count):
    with pytest.raises(sandbox.SandboxError):
        sandbox.check_id(sandbox_id, count)


def test_the_id_is_recorded_and_read_back(tmp_path):
    path = tmp_path / "state.json"
    sandbox.write_state(path, tmp_path / "key", [sandbox.node_record(1, tmp_path, sandbox_id=4)], 4)
    state = sandbox.read_state(path)
    assert sandbox.recorded_id(state, path) == 4
    assert sandbox.recorded_id({"nodes": []}, path) == 0  # a state file from before ids
    with pytest.raises(sandbox.SandboxError):
        sandbox.recorded_id({"id": "x", "nodes": []}, path)


def test_a_node_recorded_before_machine_names_is_its_name():
    assert sandbox.machine({"name": "node1"}) == "node1"
    assert sandbox.machine({"name": "node1", "machine": "sandbox2-node1"}) == "sandbox2-node1"


def test_sandbox_id_from_the_environment(monkeypatch):
    monkeypatch.delenv("SANDBOX_ID", raising=False)
    assert sandbox.env_id() == 0
    monkeypatch.setenv("SANDBOX_ID", "7")
    assert sandbox.env_id() == 7
    monkeypatch.setenv("SANDBOX_ID", "seven")
    with pytest.raises(sandbox.SandboxError):
        sandbox.env_id()


def test_shared_locks_coexist_and_exclude_an_exclusive_one(tmp_path):
    lock = tmp_path / "image.lock"
    with sandbox.locked(lock, shared=True), sandbox.locked(lock, shared=True):
        with open(lock) as other:
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_the_inventory_reads_the_state_in_sandbox_dir(tmp_path, monkeypatch):
    state = tmp_path / "state.json"
    sandbox.write_state(state, tmp_path / "key", [sandbox.node_record(1, tmp_path, sandbox_id=2)], 2)
    monkeypatch.setenv("SANDBOX_DIR", str(tmp_path))
    assert hosts.sandbox_state_file() == state
    ((name, data),) = hosts.sandbox_hosts()
    assert (name, data["ssh_port"], data["profile_overrides"]["service"]["port"]) == ("node1", 2401, 30201)
    monkeypatch.delenv("SANDBOX_DIR")
    assert hosts.sandbox_state_file() == REPO / ".sandbox" / "state.json"


# ---------------------------------------------------------------- end-to-end shards


def test_the_rest_shard_leaves_out_the_files_of_the_others_with_its_marker():
    table = (
        shards.Shard("a", "--nodes 1", "m", ("tests/e2e/test_x.py",)),
        shards.Shard("b", "--nodes 1", "m"),
        shards.Shard("c", "--nodes 1", "n"),
    )
    assert shards.pytest_args(table[0], table) == ["-m", "m", "tests/e2e/test_x.py"]
    assert shards.pytest_args(table[1], table) == ["-m", "m", "tests/e2e", "--ignore=tests/e2e/test_x.py"]
    assert shards.pytest_args(table[2], table) == ["-m", "n", "tests/e2e"]


@pytest.mark.parametrize(
    "statuses,combined", [([0, 0], 0), ([0, 5], 5), ([5, 1], 1), ([2, 1], 2), ([0, 0, 130], 130)]
)
def test_exit_statuses_combine(statuses, combined):
    assert shards.combined_status(statuses) == combined


def test_shards_are_picked_by_name_in_table_order():
    assert [s.name for s in shards.pick("")] == [s.name for s in shards.SHARDS]
    assert [s.name for s in shards.pick("sudo,fleet-b")] == ["fleet-b", "sudo"]
    with pytest.raises(SystemExit):
        shards.pick("nope")


def test_a_shard_has_a_sandbox_id_of_its_own_and_runs_its_files_in_the_suite_s_order():
    assert len(shards.SHARDS) <= sandbox.MAX_ID
    assert len({s.name for s in shards.SHARDS}) == len(shards.SHARDS)
    for shard in shards.SHARDS:  # as `pytest tests/e2e` orders them: what one leaves, the next meets
        assert list(shard.files) == sorted(shard.files), shard.name
        assert all((REPO / f).is_file() for f in shard.files), shard.name


def collected(*args, env=None):
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_the_shards_select_every_end_to_end_test_once(tmp_path):
    """Each test the suite's markers select over tests/e2e (as `make test` ran them, one phase
    per marker) is in exactly one shard: nothing dropped, nothing twice."""
    env = {**os.environ, "SANDBOX_DIR": str(tmp_path)}  # no nodes: a fixed parametrization
    markers = sorted({s.marker for s in shards.SHARDS})
    selections = [shards.pytest_args(s) for s in shards.SHARDS]
    selections += [["-m", m, "tests/e2e"] for m in markers] + [["-m", "e2e or fleet or sudo", "tests/e2e"]]
    with ThreadPoolExecutor(max_workers=4) as pool:
        found = list(pool.map(lambda args: collected(*args, env=env), selections))
    by_shard = dict(zip((s.name for s in shards.SHARDS), found))
    by_marker = dict(zip(markers, found[len(shards.SHARDS) :]))
    for marker in markers:
        ran = [t for s in shards.SHARDS if s.marker == marker for t in by_shard[s.name]]
        assert sorted(ran) == sorted(by_marker[marker]), marker
    every = [t for tests in by_shard.values() for t in tests]
    assert not [t for t, n in collections.Counter(every).items() if n > 1], "a test in two shards"
    assert sorted(every) == sorted(found[-1])
    assert all(by_shard.values()), "a shard with no test"


def test_a_workspace_copies_the_tree_without_state_caches_or_other_workspaces(tmp_path):
    root = tmp_path / "repo"
    for path in (
        "sandbox/sandbox.py",
        "build/wheels/a.whl",
        "build/e2e/old/x",
        "reports/verify.json",
        ".git/HEAD",
        ".sandbox/state.json",
        "pkg/__pycache__/m.pyc",
        "pkg/m.py",
        ".gitignore",
    ):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("x")
    copy = tmp_path / "copy"
    shutil.copytree(root, copy, symlinks=True, ignore=shards.copy_ignore(root))
    found = sorted(str(p.relative_to(copy)) for p in copy.rglob("*") if p.is_file())
    assert found == [".gitignore", "build/wheels/a.whl", "pkg/m.py", "sandbox/sandbox.py"]


def test_up_takes_the_id_from_its_flag_or_the_environment(monkeypatch):
    seen = []
    monkeypatch.setattr(sandbox, "cmd_up", lambda *args: seen.append(args[-1]))
    monkeypatch.setenv("SANDBOX_ID", "5")
    assert sandbox.main(["up", "--nodes", "2"]) == 0
    assert sandbox.main(["up", "--nodes", "2", "--id", "3"]) == 0
    monkeypatch.delenv("SANDBOX_ID")
    assert sandbox.main(["up", "--nodes", "2"]) == 0
    assert seen == [5, 3, 0]


def test_a_host_limit_is_raised_never_lowered(tmp_path, capsys):
    limit = tmp_path / "max_user_instances"
    limit.write_text("128\n")
    sandbox.raise_limit(limit, 1024)
    assert limit.read_text() == "1024\n" and "from 128 to 1024" in capsys.readouterr().out
    limit.write_text("8192\n")
    sandbox.raise_limit(limit, 1024)
    assert limit.read_text() == "8192\n"
