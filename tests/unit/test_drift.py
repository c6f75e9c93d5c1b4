"""drift.py run by a real venv's interpreter against real wheels built and installed with pip."""

import hashlib
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_deploy.facts.serving import InstalledDistributions
from sglang_deploy.node import drift
from sglang_deploy.node.lib import installed, status
from sglang_deploy.plan import commands
from sglang_deploy.plan.host_plan import plan_for

DRIFT = Path(drift.__file__).resolve()


def find_python(version):
    """A working interpreter of that version (pyenv's or on PATH), or None."""
    candidates = sorted(Path.home().glob(".pyenv/versions/%s.*/bin/python%s" % (version, version)))
    candidates.append(shutil.which("python" + version))
    for candidate in filter(None, candidates):
        probe = subprocess.run(
            [
                str(candidate),
                "-c",
                "import sys; assert sys.version_info[:2] == (%s)" % version.replace(".", ", "),
            ],
            capture_output=True,
        )
        if probe.returncode == 0:
            return str(candidate)
    return None


# 3.9: the oldest the on-node scripts support; 3.12+: Distribution.files drops missing files there.
OTHER_PYTHONS = {v: find_python(v) for v in ("3.9", "3.12", "3.13")}

SETUP = """\
from setuptools import setup
setup(name={name!r}, version={version!r}, packages={packages!r},
      package_data={{"tinypkg.sub": ["data.txt"]}},
      entry_points={{"console_scripts": ["tiny-cli=tinypkg.core:main"]}} if {name!r} == "tinypkg" else {{}})
"""


def build_wheel(root, name, version, files, packages):
    src = root / name
    for rel, text in files.items():
        path = src / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (src / "setup.py").write_text(SETUP.format(name=name, version=version, packages=packages))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            str(src),
            "-w",
            str(root / "dist"),
        ],
        check=True,
        cwd=root,
    )
    return next((root / "dist").glob(name.replace("-", "_") + "-*.whl"))


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    root = tmp_path_factory.mktemp("wheels")
    main = build_wheel(
        root,
        "tinypkg",
        "1.2.3",
        {
            "tinypkg/__init__.py": 'VERSION = "1.2.3"\n',
            "tinypkg/core.py": "def main():\n    return 0\n",
            "tinypkg/sub/__init__.py": "",
            "tinypkg/sub/data.txt": "data\n",
        },
        ["tinypkg", "tinypkg.sub"],
    )
    # A second distribution installing into the first one's package directory (a plugin / namespace).
    plugin = build_wheel(
        root, "tinypkg-plugins", "0.1", {"tinypkg/plugins/extra.py": "X = 1\n"}, ["tinypkg.plugins"]
    )
    return [main, plugin]


def make_venv(root, wheels, python=sys.executable):
    venv = root / "venv"
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True)
    vpy = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(vpy), "install", "-q", "--no-index", "--no-deps"]
        + [str(w) for w in wheels],
        check=True,
    )
    site = Path(
        subprocess.run(
            [str(vpy), "-c", "import tinypkg, os; print(os.path.dirname(tinypkg.__path__[0]))"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    return vpy, site


@pytest.fixture(scope="module")
def pristine(tmp_path_factory, wheels):
    return make_venv(tmp_path_factory.mktemp("pristine"), wheels)


@pytest.fixture
def venv(tmp_path, pristine):
    """A copy of the pristine venv for one test to damage (venvs locate themselves from bin/python)."""
    vpy, site = pristine
    root = vpy.parent.parent
    shutil.copytree(root, tmp_path / "venv", symlinks=True)
    return tmp_path / "venv" / vpy.relative_to(root), tmp_path / "venv" / site.relative_to(root)


def run(vpy, *args):
    proc = subprocess.run([str(vpy), str(DRIFT)] + list(args), capture_output=True, text=True)
    assert proc.returncode in (drift.CLEAN, drift.DRIFT, drift.NOT_INSTALLED), proc.stderr
    return proc.returncode, proc.stdout


def run_json(vpy, *args):
    rc, out = run(vpy, "--json", *args)
    return rc, json.loads(out)


def test_clean_install(venv):
    vpy, _site = venv
    rc, report = run_json(vpy, "tinypkg", "tinypkg-plugins")
    assert rc == drift.CLEAN == report["status"]
    r = report["distributions"]["tinypkg"]
    assert r["version"] == "1.2.3" and r["record"] is True
    # __init__, core, sub/__init__, sub/data.txt, the console script, and the hashed dist-info files
    assert r["files_checked"] >= 6
    assert r["skipped"] >= 2  # RECORD itself and the .pyc files pip compiled
    assert (r["modified"], r["missing"], r["unexpected"], r["unreadable"]) == ([], [], [], [])
    assert report["distributions"]["tinypkg-plugins"]["unexpected"] == []
    assert report["missing_distributions"] == []
    assert "version_mismatch" not in r
    assert report["python"] == str(vpy)


def test_edited_files_are_modified_same_size_or_not(venv):
    vpy, site = venv
    core = site / "tinypkg" / "core.py"
    core.write_text(core.read_text().replace("return 0", "return 1"))  # same size: only the hash tells
    init = site / "tinypkg" / "__init__.py"
    init.write_text(init.read_text() + "PATCHED = True\n")  # size differs: no hashing needed
    rc, report = run_json(vpy, "tinypkg")
    assert rc == drift.DRIFT
    r = report["distributions"]["tinypkg"]
    assert r["modified"] == ["tinypkg/__init__.py", "tinypkg/core.py"]
    assert r["missing"] == [] and r["unexpected"] == []


def test_console_script_outside_site_packages_is_checked(venv):
    vpy, _site = venv
    script = vpy.parent / "tiny-cli"
    script.write_text(script.read_text() + "# edited\n")
    _rc, report = run_json(vpy, "tinypkg")
    assert report["distributions"]["tinypkg"]["modified"] == ["../../../bin/tiny-cli"]


def test_deleted_file_is_missing(venv):
    vpy, site = venv
    (site / "tinypkg" / "sub" / "data.txt").unlink()
    rc, report = run_json(vpy, "tinypkg")
    assert rc == drift.DRIFT
    assert report["distributions"]["tinypkg"]["missing"] == ["tinypkg/sub/data.txt"]
    assert report["distributions"]["tinypkg"]["modified"] == []


def test_stray_py_is_unexpected_but_caches_plugins_and_the_hook_are_not(venv):
    vpy, site = venv
    (site / "tinypkg" / "sub" / "hotfix.py").write_text("PATCH = 1\n")
    (site / "tinypkg" / "__pycache__" / "hotfix.cpython-311.pyc").write_bytes(b"\0")
    (site / "tinypkg" / "notes.txt").write_text("not python\n")
    (site / "sglang_deploy_env.py").write_text("# the start-up hook lives at the top of site-packages\n")
    rc, report = run_json(vpy, "tinypkg", "tinypkg-plugins")
    assert rc == drift.DRIFT
    assert report["distributions"]["tinypkg"]["unexpected"] == ["tinypkg/sub/hotfix.py"]
    # tinypkg/plugins/extra.py belongs to tinypkg-plugins' RECORD, not a stray of tinypkg
    assert report["distributions"]["tinypkg-plugins"]["unexpected"] == ["tinypkg/sub/hotfix.py"]


def test_pins(venv):
    vpy, _site = venv
    rc, report = run_json(vpy, "--pins", "tinypkg==1.2.3")
    assert rc == drift.CLEAN
    assert report["distributions"]["tinypkg"]["version_mismatch"] is None
    rc, report = run_json(vpy, "tinypkg-plugins", "--pins", "TinyPkg==1.2.4")
    assert rc == drift.DRIFT
    assert report["distributions"]["TinyPkg"]["version_mismatch"] == {
        "expected": "1.2.4",
        "installed": "1.2.3",
    }
    assert report["distributions"]["tinypkg-plugins"]["version_mismatch"] is None  # not pinned


def test_unknown_distribution_exits_4_even_with_drift(venv):
    vpy, site = venv
    (site / "tinypkg" / "core.py").unlink()
    rc, report = run_json(vpy, "tinypkg", "no-such-dist")
    assert rc == drift.NOT_INSTALLED
    assert report["missing_distributions"] == ["no-such-dist"]
    assert report["distributions"]["tinypkg"]["missing"] == ["tinypkg/core.py"]


def test_name_normalisation(venv):
    vpy, _site = venv
    rc, report = run_json(vpy, "TinyPkg_Plugins")
    assert rc == drift.CLEAN and report["distributions"]["TinyPkg_Plugins"]["version"] == "0.1"


def test_threaded_and_single_threaded_agree(tmp_path, wheels):
    vpy, site = make_venv(tmp_path, wheels)
    for i in range(200):  # enough files for several thread-pool chunks
        (site / "tinypkg" / ("gen_%03d.py" % i)).write_text("X = %d\n" % i)
    (site / "tinypkg" / "core.py").write_text("changed\n")
    results = [run_json(vpy, "--workers", str(n), "tinypkg")[1]["distributions"]["tinypkg"] for n in (1, 4)]
    assert results[0] == results[1]
    assert len(results[0]["unexpected"]) == 200 and results[0]["modified"] == ["tinypkg/core.py"]


def test_human_output(venv):
    vpy, site = venv
    (site / "tinypkg" / "core.py").write_text("changed\n")
    rc, out = run(vpy, "tinypkg", "ghost")
    lines = out.splitlines()
    assert rc == drift.NOT_INSTALLED
    assert lines[0].startswith("tinypkg 1.2.3: ") and ", 1 modified, 0 missing, 0 unexpected, " in lines[0]
    assert lines[1] == "  modified tinypkg/core.py"
    assert lines[2] == "ghost: not installed"
    assert lines[3].startswith("not installed: ghost (")


def test_manifest(venv):
    vpy, site = venv
    rc, report = run_json(vpy, "--manifest", "tinypkg-plugins", "tinypkg")
    assert rc == drift.CLEAN
    record = site / "tinypkg-1.2.3.dist-info" / "RECORD"
    assert report["manifest"][0] == {
        "name": "tinypkg",
        "version": "1.2.3",
        "record_sha256": hashlib.sha256(record.read_bytes()).hexdigest(),
    }
    assert [m["name"] for m in report["manifest"]] == ["tinypkg", "tinypkg-plugins"]
    # --manifest prints JSON with or without --json, and --all lists every distribution of the venv
    rc, out = run(vpy, "--manifest", "--all")
    assert {m["name"] for m in json.loads(out)["manifest"]} == {"tinypkg", "tinypkg-plugins"}
    rc, report = run_json(vpy, "--manifest", "tinypkg", "nope")
    assert rc == drift.NOT_INSTALLED and report["missing_distributions"] == ["nope"]


def test_the_manifest_leaves_out_what_uv_wrote_about_the_install(venv):
    """uv lists uv_cache.json (the time its cache unpacked the wheel) in RECORD: the same wheel
    installed on two nodes must still give one digest."""
    vpy, site = venv
    record = site / "tinypkg-1.2.3.dist-info" / "RECORD"
    pip_written = record.read_bytes()
    _, before = run_json(vpy, "--manifest", "tinypkg")
    digests = set()
    for stamp in (
        "b-IgH9JF4MEFq9wLLonnLcLlqBncjKbctVyuEGEOLrw",
        "emdLZztIgmdc8HY-LW0n6zwuIu-HAMxnfpvSbI4PwXw",
    ):
        record.write_bytes(
            pip_written + b"tinypkg-1.2.3.dist-info/uv_cache.json,sha256=" + stamp.encode() + b",127\n"
        )
        _, report = run_json(vpy, "--manifest", "tinypkg")
        digests.add(report["manifest"][0]["record_sha256"])
    assert digests == {before["manifest"][0]["record_sha256"]}
    # Any other line still counts.
    record.write_bytes(pip_written + b"tinypkg/extra.py,sha256=abc,3\n")
    _, report = run_json(vpy, "--manifest", "tinypkg")
    assert report["manifest"][0]["record_sha256"] != before["manifest"][0]["record_sha256"]


def test_usage_errors(venv):
    vpy, _site = venv
    for args in ([], ["--pins", "tinypkg>=1"]):
        proc = subprocess.run([str(vpy), str(DRIFT)] + args, capture_output=True, text=True)
        assert proc.returncode == 2, args


def test_distribution_without_record(venv):
    vpy, site = venv
    (site / "tinypkg-1.2.3.dist-info" / "RECORD").unlink()
    rc, report = run_json(vpy, "tinypkg")
    assert rc == drift.DRIFT
    assert report["distributions"]["tinypkg"]["record"] is False
    rc, report = run_json(vpy, "--manifest", "tinypkg")
    assert report["manifest"][0]["record_sha256"] is None


@pytest.mark.parametrize("version", sorted(OTHER_PYTHONS))
def test_other_interpreters(tmp_path, wheels, version):
    if OTHER_PYTHONS[version] is None:
        pytest.skip("no Python %s interpreter here" % version)
    vpy, site = make_venv(tmp_path, wheels, python=OTHER_PYTHONS[version])
    (site / "tinypkg" / "core.py").write_text("changed\n")
    (site / "tinypkg" / "sub" / "data.txt").unlink()
    (site / "tinypkg" / "stray.py").write_text("")
    rc, report = run_json(vpy, "tinypkg", "--pins", "tinypkg==1.2.3")
    assert rc == drift.DRIFT
    r = report["distributions"]["tinypkg"]
    assert (r["modified"], r["missing"], r["unexpected"], r["version_mismatch"]) == (
        ["tinypkg/core.py"],
        ["tinypkg/sub/data.txt"],
        ["tinypkg/stray.py"],
        None,
    )
    assert report["python"] == str(vpy)


def test_the_uploaded_scripts_run_on_their_own(tmp_path, pristine):
    """drift.py and the modules it was split into travel together: run from a directory holding
    only what the deploy uploads, as the node runs them."""
    plan = plan_for(
        {
            "profile": "sandbox",
            "profile_overrides": {"engine": {"find_links": []}},
            "sglang_deploy_dir": "/opt/sd",
            "env_dir": "/etc/sglang",
            "unit_dir": "/etc/systemd/system",
            "state_dir": "/var/lib/sd",
            "run_dir": "/run/sd",
            "deploy_lock_wait_s": 1,
            "rollback": False,
            "repair": False,
        }
    )
    node = tmp_path / "node"
    node.mkdir()
    (node / "lib").mkdir()
    for local, remote in plan.node_scripts:
        assert remote.startswith("/opt/sd/node/")
        shutil.copy(local, node / remote[len("/opt/sd/node/") :])
    vpy, _site = pristine
    proc = subprocess.run(
        [str(vpy), str(node / "drift.py"), "--json", "tinypkg"], capture_output=True, text=True
    )
    assert proc.returncode == status.READY, proc.stderr
    assert json.loads(proc.stdout)["distributions"]["tinypkg"]["files_checked"] >= 6
    proc = subprocess.run(
        [str(vpy), str(node / "drift.py"), "--manifest", "TinyPkg_Plugins", "nope"],
        capture_output=True,
        text=True,
    )
    report = json.loads(proc.stdout)
    assert proc.returncode == status.NOT_INSTALLED == report["status"], proc.stderr
    assert [e["name"] for e in report["manifest"]] == ["tinypkg-plugins"]


def test_controller_reads_the_node_versions_with_the_node_names(pristine):
    """One versions one-liner and one PEP 503 normalisation, for the controller's fact and the
    node's scripts alike."""
    vpy, _site = pristine
    fact = InstalledDistributions()
    assert shlex.quote(installed.VERSIONS_PY) in fact.command(str(vpy.parent.parent))
    out = subprocess.run([str(vpy), "-c", installed.VERSIONS_PY], capture_output=True, text=True, check=True)
    assert fact.process(out.stdout.splitlines()) == {"tinypkg": "1.2.3", "tinypkg-plugins": "0.1"}
    assert fact.process(['{"Foo__Bar..Baz": "1", "A-_-b": "2"}']) == {"foo-bar-baz": "1", "a-b": "2"}
    assert {installed.canonical(n) for n in ("Foo__Bar..Baz", "foo.bar-baz", "FOO-BAR_BAZ")} == {
        "foo-bar-baz"
    }


def test_drift_names_its_exit_statuses_from_status_only():
    doc = drift.__doc__
    named = set(re.findall(r"status\.([A-Z_]+)", doc))
    assert named == {"READY", "DRIFT", "NOT_INSTALLED"} and named <= set(status.NAMES.values())
    assert not re.search(r"\b[A-Z_]+ \(\d+\)", doc), "exit values are status.py's to state"


def test_what_the_check_found_is_the_nodes_drift_sample_named_after_the_live_venv(tmp_path, venv):
    """As `make verify` runs it (the engine link's interpreter, node/lib/textfile.py's flags):
    the node exporter's drift sample follows every check, labelled with the venv the link points
    at, and --json still prints only its result line."""
    vpy, site = venv
    live = tmp_path / "engine-link"
    live.symlink_to(vpy.parent.parent)
    textfile_dir = tmp_path / "textfile"
    command = commands.drift_command(
        str(live),
        str(DRIFT.parent),
        ["tinypkg"],
        textfile=commands.textfile_args("sglang", 30000, str(textfile_dir)),
    )

    def check():
        done = subprocess.run(shlex.split(command), capture_output=True, text=True)
        assert json.loads(done.stdout)["status"] == done.returncode, done.stderr
        return done.returncode, (textfile_dir / "sglang-deploy-sglang@drift.prom").read_text()

    series = 'sglang_deploy_drift_detected{engine_port="30000",service="sglang",venv="venv"}'
    rc, text = check()
    assert rc == drift.CLEAN and f"{series} 0.0\n" in text
    core = site / "tinypkg" / "core.py"
    original = core.read_text()
    core.write_text(original.replace("return 0", "return 1"))
    rc, text = check()
    assert rc == drift.DRIFT and f"{series} 1.0\n" in text
    core.write_text(original)  # repaired: the next check says so
    rc, text = check()
    assert rc == drift.CLEAN and f"{series} 0.0\n" in text
