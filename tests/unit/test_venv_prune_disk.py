"""Pruning an engine venv gives its disk back: uv installs a lock with a cache of the install's
own, removed after (a shared cache kept every pruned venv's blocks, hard-linked), and a lock's
wheelhouse goes once no venv built from it is left anywhere on the node (registered when the
venv was marked), unless the deploy installs it or it arrived within a day. Real uv, real
installs of a small fake closure (bench/venv_prune.py builds its wheels)."""

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

from pyinfra.context import ctx_host
from test_operations import FakeHost

from sglang_deploy import operations
from sglang_deploy.facts.engine_venvs import EngineVenvs, Wheelhouses
from sglang_deploy.node import venvs
from sglang_deploy.operations.engine import locked_install
from sglang_deploy.plan.venv_names import WHEELHOUSE_RECENT_S, wheelhouses_to_remove

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("bench_venv_prune", REPO / "bench" / "venv_prune.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def built_venv(tmp_path, name="v1"):
    """A venv built as the deploy builds one from a lock; uv's default cache (root's
    ~/.cache/uv on a node) pointed at a directory of the test's."""
    wheels, lock = bench.closure(tmp_path / "deploy", 3 << 20, 2)
    venv = tmp_path / "venvs" / name
    subprocess.run([sys.executable, "-m", "venv", "--copies", "--without-pip", str(venv)], check=True)
    default_cache = tmp_path / "root-cache-uv"
    command = locked_install(str(venv), str(lock), str(wheels), f"{sys.executable} -m uv --offline")
    env = {**os.environ, "UV_CACHE_DIR": str(default_cache), "HOME": str(tmp_path)}
    done = subprocess.run(command, shell=True, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return venv, lock, default_cache


def test_a_locked_venv_owns_its_blocks_and_leaves_no_cache_behind(tmp_path):
    venv, _, default_cache = built_venv(tmp_path)
    shared = [
        os.path.join(r, n)
        for r, _, files in os.walk(venv)
        for n in files
        if os.lstat(os.path.join(r, n)).st_nlink > 1
    ]
    assert shared == []  # no file shares its blocks with a cache: removing the venv frees them
    assert bench.tree_bytes(default_cache) == 0 and not (venv / ".uv-cache").exists()
    assert (venv / "lib").exists() and bench.tree_bytes(venv) > 3 << 20


def test_the_wheelhouse_of_a_lock_no_venv_is_left_of_goes_with_the_prune(tmp_path, capsys):
    deploy = tmp_path / "deploy"
    venv, lock, _ = built_venv(tmp_path)
    venvs.mark(str(venv), str(lock))  # as the deploy's build ends
    capsys.readouterr()
    (deploy / "wheelhouse" / "new-lock").mkdir()  # the lock this deploy installs
    (deploy / "locks" / "new-lock.txt").write_text("")
    old = time.time() - WHEELHOUSE_RECENT_S - 60
    for path in (lock, lock.parent.parent / "wheelhouse" / "bench-lock", deploy / "locks" / "new-lock.txt"):
        os.utime(path, (old, old))
    houses = venvs.wheelhouses(str(deploy))
    assert [(h["name"], h["venvs"]) for h in houses] == [("bench-lock", [str(venv)]), ("new-lock", [])]
    # While the venv stands its wheelhouse stays; the lock this deploy installs always does.
    assert wheelhouses_to_remove(houses, [], keep="new-lock") == []
    found = {"venvs": [{"name": "v1", "built_at": 1.0}, {"name": "v2", "built_at": 2.0}], "live": "v2"}
    facts = {
        EngineVenvs: dict(found, pending=None, last_good="v2", in_use={}),
        Wheelhouses: {"wheelhouses": houses},
    }
    fake = FakeHost(facts)
    with ctx_host.use(fake):
        commands = list(
            operations.old_venvs_pruned._inner(
                str(venv.parent), "/opt/sglang/venv", 0, f"{venv.parent}/v2", "/opt/sd/node", None,
                deploy_dir=str(deploy), lock=str(deploy / "locks" / "new-lock.txt"),
            )
        )  # fmt: skip
    assert commands[0] == f"rm -rf -- {venv}"
    assert commands[1] == "rm -rf -- " + " ".join(
        str(deploy / p) for p in ("wheelhouse/bench-lock", "locks/bench-lock.txt", "locks/bench-lock.venvs")
    )
    for command in commands:
        subprocess.run(command, shell=True, check=True)
    assert sorted(os.listdir(deploy / "wheelhouse")) == ["new-lock"]
    assert sorted(os.listdir(deploy / "locks")) == ["new-lock.txt"]


def test_a_wheelhouse_that_just_arrived_stays_for_the_build_that_may_follow():
    houses = [{"name": "b", "venvs": [], "age_s": 60}, {"name": "c", "venvs": ["/v/c"], "age_s": 10**6}]
    assert wheelhouses_to_remove(houses, [], keep=None) == []
    assert wheelhouses_to_remove(houses, ["/v/c"], keep=None) == ["c"]


def test_nothing_to_prune_is_a_noop():
    houses = {"wheelhouses": [{"name": "a", "venvs": [], "age_s": 10**6}]}
    found = {
        "venvs": [{"name": "v", "built_at": 1.0}],
        "live": "v",
        "pending": None,
        "last_good": "v",
        "in_use": {},
    }
    fake = FakeHost({EngineVenvs: found, Wheelhouses: houses})
    with ctx_host.use(fake):
        commands = list(
            operations.old_venvs_pruned._inner(
                "/opt/sglang/venvs", "/opt/sglang/venv", 1, "/opt/sglang/venvs/v", "/opt/sd/node", None,
                deploy_dir="/opt/sd", lock="/opt/sd/locks/a.txt",
            )
        )  # fmt: skip
    assert commands == [] and fake.noops
