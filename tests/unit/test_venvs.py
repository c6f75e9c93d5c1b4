"""One engine venv per pin set: its name, which old ones go, the switch on the node, and the
rollback that points the link back with no install."""

import json
import os

import pytest

from sglang_deploy.node import lastgood, preflight
from sglang_deploy.node import venvs as node_venvs
from sglang_deploy.node.lib import last_good_check, result, status
from sglang_deploy.plan.venv_names import installable_wheels, venv_name, venvs_to_remove, wheel_identity

PINS = ["sglang==0.5.24+sandbox"]
W23 = "sglang-0.5.23+sandbox-py3-none-any.whl"
W24 = "sglang-0.5.24+sandbox-py3-none-any.whl"


# -- the venv's name -------------------------------------------------------------------------


def test_the_name_is_readable_and_stable():
    name = venv_name(PINS, {W24: "a" * 64}, "3.11.2")
    assert name.startswith("sglang-0.5.24+sandbox-") and len(name.rsplit("-", 1)[1]) == 12
    assert venv_name(PINS, {W24: "a" * 64}, "3.11.2") == name


def test_pins_wheels_and_python_each_name_another_venv():
    base = venv_name(PINS, {W24: "a" * 64}, "3.11.2")
    assert venv_name(["sglang==0.5.23+sandbox"], {W24: "a" * 64}, "3.11.2") != base
    assert venv_name(PINS, {W24: "b" * 64}, "3.11.2") != base  # same version, other bytes
    assert venv_name(PINS, {W24: "a" * 64}, "3.11.9") != base
    assert venv_name(PINS + ["torch==2.9.1"], {W24: "a" * 64}, "3.11.2") != base


def test_pin_order_and_spelling_do_not_matter():
    names = {
        venv_name(pins, {W24: "a" * 64}, "3.11.2")
        for pins in (["sglang==0.5.24", "torch==2.9.1"], ["torch==2.9.1", "Sglang==0.5.24"])
    }
    assert len(names) == 1 and names.pop().startswith("sglang-0.5.24-")


def test_the_engine_names_the_venv_wherever_it_is_pinned():
    orders = [
        ["flashinfer-python==0.4.1", "torch==2.9.1", "sglang==0.5.24"],
        ["torch==2.9.1", "sglang[all]==0.5.24", "flashinfer-python==0.4.1"],
        ["sglang==0.5.24", "flashinfer-python==0.4.1", "torch==2.9.1"],
    ]
    assert {venv_name(pins, {}, "3.11.2").rsplit("-", 1)[0] for pins in orders} == {"sglang-0.5.24"}
    assert venv_name(orders[0], {}, "3.11.2") == venv_name(orders[2], {}, "3.11.2")
    # No engine pin: the first pin in canonical order names it.
    assert venv_name(["Torch==2.9.1", "numpy==2.1"], {}, "3.11.2").startswith("numpy-2.1-")


def test_names_where_the_engine_was_pinned_first_are_unchanged():
    """A changed name is a venv rebuilt on upgrade: these are the names earlier releases gave."""
    assert venv_name(PINS, {W24: "a" * 64}, "3.11.2") == "sglang-0.5.24+sandbox-661dca37c22d"
    assert venv_name(["sglang==0.5.23"], {}, "3.10.12") == "sglang-0.5.23-b7be7fd8d6f0"
    assert venv_name(["sglang==0.5.24", "torch==2.9.1"], {}, "3.11.2") == "sglang-0.5.24-4202d678270c"


def test_a_wheel_of_another_version_of_a_pinned_distribution_is_not_part_of_it():
    assert installable_wheels(PINS, {W23: "x", W24: "y", "dep-1.0-py3-none-any.whl": "z"}) == {
        W24: "y",
        "dep-1.0-py3-none-any.whl": "z",
    }
    assert venv_name(PINS, {W24: "y"}, "3.11.2") == venv_name(PINS, {W23: "x", W24: "y"}, "3.11.2")


def test_wheel_file_names_are_read_as_pep_427():
    assert wheel_identity(W24) == ("sglang", "0.5.24+sandbox")
    assert wheel_identity("Typing_Extensions-4.1-1-py3-none-any.whl") == ("typing-extensions", "4.1")
    assert wheel_identity("notawheel.txt") is None


# -- which old venvs go ----------------------------------------------------------------------


def _v(name, at):
    return {"name": name, "built_at": at}


def test_the_newest_k_stay_and_older_ones_go_oldest_first():
    found = [_v("a", 1), _v("b", 2), _v("c", 3), _v("d", 4)]
    assert venvs_to_remove(found, 2, []) == ["a", "b"]


def test_the_live_and_the_last_good_venv_never_go_however_old():
    found = [_v("a", 1), _v("b", 2), _v("c", 3), _v("d", 4)]
    assert venvs_to_remove(found, 1, ["a", "b", None]) == ["c"]


def test_unfinished_builds_go_unless_protected():
    found = [_v("a", 1), _v("half", None), _v("building", None)]
    assert venvs_to_remove(found, 3, ["building"]) == ["half"]


def test_nothing_goes_within_k():
    assert venvs_to_remove([_v("a", 1), _v("b", 2)], 3, []) == []


# -- on the node: switch, list ---------------------------------------------------------------


def _venv(directory, name, finished=True):
    venv = directory / name
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    if finished:
        node_venvs.mark(str(venv))
    return str(venv)


def test_switch_commits_the_staged_link_and_nothing_else(tmp_path, capsys):
    old, new = _venv(tmp_path, "old"), _venv(tmp_path, "new")
    link = str(tmp_path / "venv")
    os.symlink(old, link)
    assert node_venvs.switch(link) == status.READY  # nothing staged
    assert os.readlink(link) == old
    os.symlink(new, link + node_venvs.PENDING)
    assert node_venvs.switch(link) == status.READY
    assert os.readlink(link) == new and not os.path.lexists(link + node_venvs.PENDING)
    listing = node_venvs.listing(str(tmp_path), link)
    assert listing["live"] == "new" and listing["pending"] is None
    assert {v["name"] for v in listing["venvs"] if v["built_at"]} == {"old", "new"}


def test_switch_refuses_an_unfinished_venv(tmp_path, capsys):
    old, half = _venv(tmp_path, "old"), _venv(tmp_path, "half", finished=False)
    link = str(tmp_path / "venv")
    os.symlink(old, link)
    os.symlink(half, link + node_venvs.PENDING)
    assert node_venvs.switch(link) == status.PREFLIGHT_FAILED
    assert os.readlink(link) == old


def test_a_directory_from_before_venvs_is_moved_aside(tmp_path, capsys):
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    new = _venv(tmp_path / "venvs", "new")
    link = str(tmp_path / "venv")
    os.symlink(new, link + node_venvs.PENDING)
    assert node_venvs.switch(link) == status.READY
    assert os.readlink(link) == new and os.path.isdir(link + node_venvs.LEGACY)


# -- rollback: the link back, no install -----------------------------------------------------


def test_restore_points_the_link_at_the_last_good_venv_without_pip(tmp_path, capsys, monkeypatch):
    good, bad = _venv(tmp_path, "good"), _venv(tmp_path, "bad")
    link = str(tmp_path / "venv")
    os.symlink(bad, link)
    os.symlink(bad, link + node_venvs.PENDING)
    manifest = {"venv": link, "venv_target": good, "engine": {"sglang": "0.5.23"}, "wheels_dir": "/nowhere"}
    monkeypatch.setattr(lastgood.subprocess, "run", lambda *a, **k: pytest.fail(f"ran {a}"))
    assert lastgood.restore_venv(manifest) is True
    assert os.readlink(link) == good and not os.path.lexists(link + node_venvs.PENDING)
    assert "nothing downloaded" in capsys.readouterr().out


def test_a_manifest_from_before_venvs_goes_back_to_the_directory_moved_aside(tmp_path, capsys):
    new = _venv(tmp_path / "venvs", "new")
    link = str(tmp_path / "venv")
    os.symlink(new, link)
    legacy = _venv(tmp_path, "venv" + node_venvs.LEGACY)
    assert lastgood.restore_venv({"venv": link, "engine": {}}) is True
    assert os.readlink(link) == legacy


def test_a_manifest_from_before_venvs_reinstalls_as_before(tmp_path):
    assert lastgood.restore_venv({"venv": str(tmp_path / "venv"), "engine": {}}) is False


def test_differences_name_a_switched_venv(tmp_path):
    env = tmp_path / "env"
    env.write_text("A=1\n")
    manifest = {
        "profile": "p",
        "venv_target": "/v/old",
        "engine": {"sglang": "1"},
        "files": {"env": {"path": str(env), "sha256": lastgood.sha256(str(env))}},
    }
    assert lastgood.differences(manifest, "p", {"env": str(env)}, {"sglang": "1"}, "/v/old") == []
    assert lastgood.differences(manifest, "p", {"env": str(env)}, {"sglang": "1"}, "/v/new") == [
        "engine venv old -> new"
    ]


def test_a_server_started_before_the_switch_does_not_run_what_is_installed():
    show = {"ActiveState": "active", "MainPID": "7", "ExecMainStartTimestampMonotonic": str(100 * 10**6)}
    why = last_good_check.not_running(
        show, {"the engine venv link": 1000.0 + 50}, now=1000.0, monotonic=100.0
    )
    assert why and "the engine venv link" in why


# -- preflight: room for a new venv ----------------------------------------------------------


def test_no_room_for_a_new_venv_names_needed_free_and_the_host(tmp_path, monkeypatch):
    live = _venv(tmp_path / "venvs", "live")
    link = str(tmp_path / "venv")
    os.symlink(live, link)
    monkeypatch.setattr(preflight.socket, "gethostname", lambda: "node7")
    verdict, text = preflight.check_new_venv(str(tmp_path / "venvs" / "new"), link, 10**6)
    assert verdict == "failed" and "not enough disk" in text and "node7" in text
    assert "GiB needed for the new engine venv new" in text and "free" in text
    assert "the running server is untouched" in text
    assert preflight.check_new_venv(str(tmp_path / "venvs" / "new"), link, 0)[0] == "ok"


def test_list_emits_its_result_line(tmp_path, capsys):
    _venv(tmp_path / "venvs", "a")
    node_venvs.main(["list", "--dir", str(tmp_path / "venvs"), "--link", str(tmp_path / "venv")])
    found = result.parse(capsys.readouterr().out.splitlines())
    assert found["venvs"][0]["name"] == "a" and found["live"] is None
    assert json.dumps(found)


# -- the venvs directory is shared by every service of the node ------------------------------


def _service(state, service, venvs, live, good):
    """A service's engine link at ``live`` and its last known good running ``good``, recorded
    where the deploy keeps it (<state>/<service>/last-good)."""
    link = str(state / service / "venv")
    os.makedirs(os.path.dirname(link), exist_ok=True)
    os.symlink(str(venvs / live), link)
    record = state / service / "last-good"
    record.mkdir()
    (record / "manifest.json").write_text(
        json.dumps({"profile": service, "venv": link, "venv_target": str(venvs / good), "files": {}})
    )
    return str(record), link


def test_every_service_s_live_and_last_good_venv_is_in_use(tmp_path):
    venvs, state = tmp_path / "venvs", tmp_path / "state"
    for name in ("a-live", "a-good", "b-live", "b-good", "old"):
        _venv(venvs, name)
    mine, link = _service(state, "a", venvs, "a-live", "a-good")
    _service(state, "b", venvs, "b-live", "b-good")
    found = node_venvs.listing(str(venvs), link, mine, proc=str(tmp_path / "no-proc"))
    assert found["live"] == "a-live" and found["last_good"] == "a-good"
    assert sorted(found["in_use"]) == ["a-good", "a-live", "b-good", "b-live"]
    assert found["in_use"]["b-live"] == ["live at %s" % (state / "b" / "venv")]
    protected = [found["live"], found["last_good"], *found["in_use"]]
    assert venvs_to_remove(found["venvs"], 0, protected) == ["old"]


def test_a_service_recorded_elsewhere_and_a_staged_switch_are_in_use(tmp_path, last_good_record):
    venvs = tmp_path / "venvs"
    for name in ("c-live", "c-good", "c-next"):
        _venv(venvs, name)
    record, link = _service(tmp_path / "other-state", "c", venvs, "c-live", "c-good")
    os.symlink(str(venvs / "c-next"), link + node_venvs.PENDING)
    last_good_record.write_text(json.dumps([record]))  # where lastgood.save remembered it
    found = node_venvs.in_use(str(venvs), None, proc=str(tmp_path / "no-proc"))
    assert sorted(found) == ["c-good", "c-live", "c-next"]


def test_a_venv_a_running_process_runs_is_in_use(tmp_path):
    venvs, proc = tmp_path / "venvs", tmp_path / "proc"
    for name in ("served", "copied", "idle"):
        _venv(venvs, name)
    link = tmp_path / "venv"
    os.symlink(str(venvs / "served"), link)
    (proc / "41").mkdir(parents=True)  # `<link>/bin/python -m sglang.launch_server`
    (proc / "41" / "cmdline").write_bytes(b"%s/bin/python\0-m\0sglang.launch_server\0" % bytes(link))
    (proc / "42").mkdir()  # a venv made with --copies: its own interpreter is the executable
    os.symlink(str(venvs / "copied" / "bin" / "python"), proc / "42" / "exe")
    (proc / "43").mkdir()  # nothing of ours
    (proc / "43" / "cmdline").write_bytes(b"/usr/sbin/sshd\0-D\0")
    found = node_venvs.in_use(str(venvs), None, proc=str(proc))
    assert found == {"copied": ["run by process 42"], "served": ["run by process 41"]}


def test_restore_refuses_with_nothing_written_when_its_venv_is_gone(tmp_path, capsys, monkeypatch):
    good, bad = _venv(tmp_path, "good"), _venv(tmp_path, "bad")
    link = str(tmp_path / "venv")
    os.symlink(good, link)
    env = tmp_path / "sglang.env"
    env.write_text("A=1\n")
    monkeypatch.setattr(lastgood, "installed_versions", lambda venv: {})
    assert lastgood.save(str(tmp_path / "lg"), "p1", link, {"env": str(env)}, [], None) == status.READY
    env.write_text("A=2\n")
    node_venvs.point(link, bad)
    os.unlink(os.path.join(good, "bin", "python"))  # pruned, or removed by hand
    monkeypatch.setattr(lastgood.subprocess, "run", lambda *a, **k: pytest.fail(f"ran {a}"))
    assert lastgood.restore(str(tmp_path / "lg")) == status.PREFLIGHT_FAILED
    found = result.parse(capsys.readouterr().out.splitlines())
    assert found["cause"] == (
        "not restoring p1: the last known good's engine venv %s is gone; nothing was changed" % good
    )
    assert env.read_text() == "A=2\n" and os.readlink(link) == bad


# -- node scripts import in one direction ----------------------------------------------------


def test_node_modules_import_each_other_without_a_cycle():
    import ast
    from pathlib import Path

    root = Path(node_venvs.__file__).parent
    modules = {p.stem: p for p in root.glob("*.py")} | {
        "lib." + p.stem: p for p in (root / "lib").glob("*.py")
    }
    graph = {}
    for name, path in modules.items():
        package = "lib" if name.startswith("lib.") else ""
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):  # function-level imports too
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(
                node, ast.ImportFrom
            ):  # `from . import x`, `from .lib import y`, `from lib import y`
                base = ".".join(p for p in (package if node.level else "", node.module or "") if p)
                found |= {base} | {".".join(p for p in (base, alias.name) if p) for alias in node.names}
        graph[name] = {m for m in found if m in modules and m != name}

    def cycle_from(start, path=()):
        for nxt in graph[start]:
            if nxt in path:
                return path[path.index(nxt) :] + (nxt,)
            found = cycle_from(nxt, path + (nxt,))
            if found:
                return found
        return None

    cycles = [c for c in (cycle_from(m, (m,)) for m in sorted(graph)) if c]
    assert not cycles, "import cycle: " + " -> ".join(cycles[0])
    assert "lastgood" in graph and "lib.last_good_record" in graph["venvs"]
