"""node/metrics_textfile.py: the deploy's decode check figures, expectations and GPU links into a
node exporter textfile, from a history and a last known good written by the deploy's own writers
(decode_check.py, node/lib/last_good_record.py), whole or not at all, beside the node's own
samples (rotation, drift) without ever counting them as its change; and its command line."""

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from sglang_deploy.node import decode_check, metrics_textfile
from sglang_deploy.node.lib import decode_rate, last_good_record, result, status, textfile
from sglang_deploy.plan import commands
from tests.unit.test_gpu_health import captured
from tests.unit.test_node_passport import SMI_Q, passport_of, with_link

parser = pytest.importorskip("prometheus_client.parser", reason="prometheus-client (requirements.txt)")

NODE_DIR = Path(metrics_textfile.__file__).resolve().parent


def _decode_check(tmp_path, monkeypatch, profile, rates, info=None, **expectations):
    """One decode check as the restart cycle runs it, its requests decoding at ``rates`` tok/s
    (None: the server did not answer): decode_check.py appends its entry to the history."""

    def measure(*args):
        if rates is None:
            raise decode_rate.MeasureError("HTTP 503: busy")
        return decode_rate.summary([(101, 100 / rate, 0.05) for rate in rates])

    monkeypatch.setattr(decode_check.decode_rate, "measure", measure)
    monkeypatch.setattr(decode_check, "server_info", lambda base, **_: info or {"version": "0.5.23"})
    argv = [
        "--port=30000",
        "--served-name=m",
        f"--profile={profile}",
        f"--history={tmp_path / 'throughput.jsonl'}",
        f"--last-good-dir={tmp_path / 'last-good'}",
        "--requests=3",
        "--warmup=0",
        "--max-tokens=101",
        "--timeout=10",
    ]
    argv += [f"--{k.replace('_', '-')}={v}" for k, v in expectations.items()]
    return decode_check.main(argv)


def _save_last_good(tmp_path, profile):
    """The last known good's record, written by the record writer lastgood.py save uses."""
    last_good_record.replace(str(tmp_path / "last-good"), lambda staging: {"profile": profile, "files": {}})


def _run(tmp_path, *extra):
    argv = [
        "--service=sglang",
        "--engine-port=30000",
        f"--history={tmp_path / 'throughput.jsonl'}",
        f"--last-good-dir={tmp_path / 'last-good'}",
        f"--dir={tmp_path / 'textfile'}",
        *extra,
    ]
    return metrics_textfile.main(argv)


def _samples(tmp_path):
    text = (tmp_path / "textfile" / "sglang-deploy-sglang.prom").read_text()
    found = {}
    for family in parser.text_string_to_metric_families(text):
        assert family.type == "gauge"
        for sample in family.samples:
            labels = dict(sample.labels)
            assert (labels.pop("service"), labels.pop("engine_port")) == ("sglang", "30000")
            found[(sample.name, tuple(sorted(labels.items())))] = sample.value
    return found


def _value(samples, name, **labels):
    return samples[(name, tuple(sorted(labels.items())))]


@pytest.fixture
def incident(tmp_path, monkeypatch, capsys):
    """The incident: base decoded 82.4 tok/s and became the last known good; the next deploy's
    check measured 60.1 with max_regression_pct 10 under on_regression: fail."""
    _save_last_good(tmp_path, "base")
    assert _decode_check(tmp_path, monkeypatch, "base", [82.0, 82.4, 83.0]) == status.READY
    got = _decode_check(
        tmp_path, monkeypatch, "base", [60.0, 60.1, 61.0], max_regression_pct=10, on_regression="fail"
    )
    assert got == status.THROUGHPUT_REGRESSION
    capsys.readouterr()
    return tmp_path


def test_the_incident_exports_the_figures_the_deploy_judged(incident, capsys):
    assert _run(incident, "--max-regression-pct=10") == 0
    line = result.parse(capsys.readouterr().out.splitlines())
    path = incident / "textfile" / "sglang-deploy-sglang.prom"
    assert line["path"] == str(path) and line["status"] == status.READY
    samples = _samples(incident)
    assert _value(samples, "sglang_deploy_decode_check_tokens_per_second") == 60.1
    assert (
        _value(samples, "sglang_deploy_last_good_decode_tokens_per_second") == 82.4
    )  # the regression was not accepted
    assert _value(samples, "sglang_deploy_decode_check_change_pct") == -27.1
    assert _value(samples, "sglang_deploy_decode_check_accepted") == 0.0
    assert _value(samples, "sglang_deploy_decode_check_measured") == 1.0
    assert _value(samples, "sglang_deploy_max_regression_pct") == 10.0
    # Rotation and drift are the node's own samples, in files of their own (lib/textfile.py).
    assert not {name for name, _ in samples} & {"sglang_deploy_in_rotation", "sglang_deploy_drift_detected"}
    assert _value(samples, "sglang_deploy_decode_check_info", profile="base", last_good_profile="base") == 1.0
    entry = decode_check.read_history(incident / "throughput.jsonl")[-1]
    when = _value(samples, "sglang_deploy_decode_check_timestamp_seconds")
    assert decode_check.time.strftime("%Y-%m-%dT%H:%M:%SZ", decode_check.time.gmtime(when)) == entry["time"]
    assert line["samples"] == len(samples)
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert os.listdir(incident / "textfile") == ["sglang-deploy-sglang.prom"]  # no temporary left


def test_the_file_passes_promtools_metrics_check(incident):
    if shutil.which("promtool") is None:
        pytest.skip("promtool not installed (Debian package: prometheus)")
    _run(incident, "--max-regression-pct=10")
    text = (incident / "textfile" / "sglang-deploy-sglang.prom").read_bytes()
    done = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_unmeasured_check_keeps_the_last_figure_and_says_it_did_not_measure(incident, monkeypatch, capsys):
    assert _decode_check(incident, monkeypatch, "base", None) == status.DECODE_UNMEASURED
    _run(incident)
    samples = _samples(incident)
    assert _value(samples, "sglang_deploy_decode_check_measured") == 0.0
    assert _value(samples, "sglang_deploy_decode_check_tokens_per_second") == 60.1
    assert ("sglang_deploy_decode_check_change_pct", ()) not in samples
    assert ("sglang_deploy_max_regression_pct", ()) not in samples  # the profile sets none: no rule applies


def test_a_node_without_history_or_last_good_exports_no_figures(tmp_path):
    assert _run(tmp_path) == 0
    names = {name for name, _ in _samples(tmp_path)}
    assert names == {"sglang_deploy_textfile_timestamp_seconds"}


def test_a_regression_accepted_under_warn_becomes_the_baseline_and_is_still_exported(
    tmp_path, monkeypatch, capsys
):
    _save_last_good(tmp_path, "base")
    _decode_check(tmp_path, monkeypatch, "base", [82.4])
    assert _decode_check(tmp_path, monkeypatch, "base", [60.1], max_regression_pct=10) == status.READY
    _run(tmp_path, "--max-regression-pct=10")
    samples = _samples(tmp_path)
    assert (
        _value(samples, "sglang_deploy_last_good_decode_tokens_per_second") == 60.1
    )  # what the next check judges against
    assert _value(samples, "sglang_deploy_decode_check_change_pct") == -27.1  # SGLangDecodeCheckRegressed
    assert _value(samples, "sglang_deploy_decode_check_accepted") == 1.0


def test_pcie_links_degraded_in_generation_or_width_and_not_checked(tmp_path):
    gpus = [
        {
            "gpu": "0",
            "bus_id": "00000000:18:00.0",
            "gen_current": 5,
            "gen_max": 5,
            "width_current": 16,
            "width_max": 16,
        },
        {
            "gpu": "1",
            "bus_id": "00000000:2A:00.0",
            "gen_current": 3,
            "gen_max": 5,
            "width_current": 16,
            "width_max": 16,
        },
        {
            "gpu": "2",
            "bus_id": "00000000:3A:00.0",
            "gen_current": 5,
            "gen_max": 5,
            "width_current": 8,
            "width_max": 16,
        },
        {
            "gpu": "3",
            "bus_id": "00000000:5D:00.0",
            "gen_current": None,
            "gen_max": 5,
            "width_current": 16,
            "width_max": 16,
        },
    ]
    (tmp_path / "pcie.json").write_text(json.dumps(gpus))
    assert _run(tmp_path, f"--pcie-json={tmp_path / 'pcie.json'}") == 0
    samples = _samples(tmp_path)
    degraded = {
        dict(labels)["gpu"]: v
        for (name, labels), v in samples.items()
        if name == "sglang_deploy_gpu_pcie_link_degraded"
    }
    assert degraded == {"0": 0.0, "1": 1.0, "2": 1.0}  # GPU 3: not checked, no sample
    assert (
        _value(
            samples, "sglang_deploy_gpu_pcie_link_gen", gpu="1", bus_id="00000000:2A:00.0", state="current"
        )
        == 3
    )
    assert (
        _value(samples, "sglang_deploy_gpu_pcie_link_width", gpu="2", bus_id="00000000:3A:00.0", state="max")
        == 16
    )


@pytest.mark.parametrize(
    "content, says",
    [
        ("{}", "a JSON list"),
        ('[{"gen_current": 4}]', 'with a "gpu"'),
        (
            '[{"gpu": "0", "gen_current": "4", "gen_max": 5, "width_current": 16, "width_max": 16}]',
            "not a whole number",
        ),
        ("[{", "--pcie-json"),
    ],
)
def test_bad_pcie_input_is_a_usage_error_and_keeps_the_old_file(tmp_path, capsys, content, says):
    assert _run(tmp_path) == 0
    before = (tmp_path / "textfile" / "sglang-deploy-sglang.prom").read_text()
    (tmp_path / "pcie.json").write_text(content)
    assert _run(tmp_path, f"--pcie-json={tmp_path / 'pcie.json'}") == status.USAGE
    line = result.parse(capsys.readouterr().out.splitlines())
    assert says in line["cause"]
    assert (tmp_path / "textfile" / "sglang-deploy-sglang.prom").read_text() == before


def test_a_write_that_fails_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    assert _run(tmp_path) == 0
    before = (tmp_path / "textfile" / "sglang-deploy-sglang.prom").read_text()

    def no_rename(src, dst):
        raise OSError("disk went away")

    monkeypatch.setattr(metrics_textfile.os, "replace", no_rename)
    with pytest.raises(OSError):
        _run(tmp_path, "--max-regression-pct=5")
    assert os.listdir(tmp_path / "textfile") == ["sglang-deploy-sglang.prom"]
    assert (tmp_path / "textfile" / "sglang-deploy-sglang.prom").read_text() == before


def test_the_builders_command_line_runs_the_script_as_uploaded(incident):
    """As the node runs it: python3 /opt/.../node/metrics_textfile.py, sibling imports."""
    command = commands.metrics_textfile_command(
        str(NODE_DIR),
        "sglang",
        30000,
        str(incident / "throughput.jsonl"),
        str(incident / "last-good"),
        expected={"max_regression_pct": 10.0},
        textfile_dir=str(incident / "textfile"),
        no_routers=True,
    )
    argv = shlex.split(command)
    assert argv[:2] == ["python3", f"{NODE_DIR}/metrics_textfile.py"] and "--no-routers" in argv
    done = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    samples = _samples(incident)
    assert _value(samples, "sglang_deploy_max_regression_pct") == 10.0


def test_the_command_line_quotes_every_argument_and_defaults_to_debians_directory():
    odd = "/opt/my dir/$(touch x)"
    argv = shlex.split(commands.metrics_textfile_command(odd, "svc", 30001, "/h d", "/g d"))
    assert argv == [
        "python3",
        f"{odd}/metrics_textfile.py",
        "--service",
        "svc",
        "--engine-port",
        "30001",
        "--history",
        "/h d",
        "--last-good-dir",
        "/g d",
    ]
    assert metrics_textfile.DEFAULT_DIR == "/var/lib/prometheus/node-exporter"


# ------------------------------------------------------------------------- the passport's GPU links


def _passport_file(tmp_path, q_text, pstate=None):
    """passport.py's file, from a real H200's `nvidia-smi -q` (or a variation of it)."""
    doc = passport_of(q_text, pstate=pstate)
    (tmp_path / "passport.json").write_text(json.dumps(doc))
    return f"--passport={tmp_path / 'passport.json'}"


def _degraded(samples):
    return {
        dict(labels)["gpu"]: v
        for (name, labels), v in samples.items()
        if name == "sglang_deploy_gpu_pcie_link_degraded"
    }


def test_the_captured_h200s_passport_exports_a_healthy_gen5_x16_link(tmp_path):
    assert _run(tmp_path, _passport_file(tmp_path, captured(SMI_Q))) == 0
    samples = _samples(tmp_path)
    assert _degraded(samples) == {"0": 0.0}
    bus = "00000000:00:06.0"
    assert _value(samples, "sglang_deploy_gpu_pcie_link_gen", gpu="0", bus_id=bus, state="current") == 5
    assert _value(samples, "sglang_deploy_gpu_pcie_link_width", gpu="0", bus_id=bus, state="max") == 16


def test_a_passport_link_at_x8_is_degraded_and_a_lower_gen_below_p0_is_not(tmp_path):
    assert _run(tmp_path, _passport_file(tmp_path, with_link(width=8))) == 0
    assert _degraded(_samples(tmp_path)) == {"0": 1.0}
    # The deploy's own rule (gpu_links): Gen1 at P8 is the driver saving power.
    assert _run(tmp_path, _passport_file(tmp_path, with_link(gen=1), pstate="P8")) == 0
    assert _degraded(_samples(tmp_path)) == {"0": 0.0}


def test_no_passport_yet_exports_no_link(tmp_path):
    assert _run(tmp_path, f"--passport={tmp_path / 'absent.json'}") == 0
    assert _degraded(_samples(tmp_path)) == {}


@pytest.mark.parametrize("content", ["[1]", "{"])
def test_a_bad_passport_is_a_usage_error_and_keeps_the_old_file(tmp_path, capsys, content):
    assert _run(tmp_path) == 0
    before = (tmp_path / "textfile" / "sglang-deploy-sglang.prom").read_text()
    (tmp_path / "passport.json").write_text(content)
    assert _run(tmp_path, f"--passport={tmp_path / 'passport.json'}") == status.USAGE
    assert "--passport" in result.parse(capsys.readouterr().out.splitlines())["cause"]
    assert (tmp_path / "textfile" / "sglang-deploy-sglang.prom").read_text() == before


# --------------------------------------------------------------------------- changed or up to date


def test_check_says_changed_and_writes_nothing_then_the_write_then_up_to_date(incident, capsys):
    path = incident / "textfile" / "sglang-deploy-sglang.prom"
    assert _run(incident, "--check", "--max-regression-pct=10") == 0
    assert result.parse(capsys.readouterr().out.splitlines())["changed"] is True
    assert not path.exists()
    assert _run(incident, "--max-regression-pct=10") == 0
    assert result.parse(capsys.readouterr().out.splitlines())["changed"] is True
    written = path.read_text()
    # Only the write's own timestamp would differ: up to date, and the file is left as it is.
    assert _run(incident, "--check", "--max-regression-pct=10") == 0
    assert result.parse(capsys.readouterr().out.splitlines())["changed"] is False
    assert _run(incident, "--max-regression-pct=10") == 0
    assert result.parse(capsys.readouterr().out.splitlines())["changed"] is False
    assert path.read_text() == written
    # A figure that changed (the profile's expectation) is a change.
    assert _run(incident, "--check", "--max-regression-pct=5") == 0
    assert result.parse(capsys.readouterr().out.splitlines())["changed"] is True
    assert path.read_text() == written


def test_the_builder_passes_the_passport_and_check():
    argv = shlex.split(
        commands.metrics_textfile_command("/d", "svc", 30001, "/h", "/g", passport="/p/p.json", check=True)
    )
    assert argv[argv.index("--passport") + 1] == "/p/p.json" and argv[-1] == "--check"


# ------------------------------------------------------------------ the node's own samples beside it


def _own_sample(tmp_path, metric, value, **labels):
    """A sample the node writes of its own (rotation.py, a drift check), as they write it."""
    args = SimpleNamespace(
        textfile_service="sglang", textfile_port=30000, textfile_dir=str(tmp_path / "textfile")
    )
    return textfile.export(args, metric, value, labels)


def test_the_nodes_own_samples_never_make_the_deploys_file_change(incident, capsys):
    """The no-op rule: rotation.py and the drift checks write between two runs of the deploy's
    step; the step's check compares only its own file, so the next run reports no change."""
    assert _run(incident, "--max-regression-pct=10") == 0
    capsys.readouterr()
    written = (incident / "textfile" / "sglang-deploy-sglang.prom").read_text()
    assert _own_sample(incident, "in_rotation", 0) is True
    assert _own_sample(incident, "drift_detected", 1, venv="v1") is True
    assert _run(incident, "--check", "--max-regression-pct=10") == 0
    assert result.parse(capsys.readouterr().out.splitlines())["changed"] is False
    assert _run(incident, "--max-regression-pct=10") == 0
    assert result.parse(capsys.readouterr().out.splitlines())["changed"] is False
    assert (incident / "textfile" / "sglang-deploy-sglang.prom").read_text() == written
    assert sorted(os.listdir(incident / "textfile")) == [
        "sglang-deploy-sglang.prom",
        "sglang-deploy-sglang@drift.prom",
        "sglang-deploy-sglang@rotation.prom",
    ]


def test_behind_no_router_a_rotation_sample_left_from_routers_is_removed_once(incident, capsys):
    rotation = incident / "textfile" / "sglang-deploy-sglang@rotation.prom"
    assert _run(incident) == 0
    assert _own_sample(incident, "in_rotation", 0) is True  # out when the routers went away
    capsys.readouterr()
    assert _run(incident, "--check", "--no-routers") == 0
    assert result.parse(capsys.readouterr().out.splitlines())["changed"] is True
    assert rotation.exists()  # --check writes nothing
    assert _run(incident, "--no-routers") == 0
    assert result.parse(capsys.readouterr().out.splitlines())["changed"] is True
    assert not rotation.exists()
    assert _run(incident, "--check", "--no-routers") == 0
    assert result.parse(capsys.readouterr().out.splitlines())["changed"] is False
    # Behind routers the rotation file is rotation.py's: the deploy's step leaves it alone.
    assert _own_sample(incident, "in_rotation", 1) is True
    assert _run(incident) == 0
    assert rotation.exists()


def test_every_metric_the_node_exports_has_its_help():
    assert set(textfile.STATE) <= set(metrics_textfile.HELP)


def test_a_speculating_servers_accept_length_and_rate_are_exported(tmp_path, monkeypatch, capsys):
    _save_last_good(tmp_path, "eagle3")
    info = {
        "version": "0.5.23",
        "speculative_algorithm": "EAGLE3",
        "speculative_num_steps": 2,
        "speculative_num_draft_tokens": 3,
        "internal_states": [{"avg_spec_accept_length": 1.9}],
    }
    assert _decode_check(tmp_path, monkeypatch, "base", [82.0, 82.4, 83.0]) == status.READY
    checked = _decode_check(
        tmp_path, monkeypatch, "eagle3", [60.0, 60.1, 61.0], info=info, min_speedup_over="base"
    )
    assert checked == status.READY  # warn: said, recorded
    assert _run(tmp_path, "--min-speedup-pct=0", "--min-accept-length=1.5") == 0
    samples = _samples(tmp_path)
    assert _value(samples, "sglang_deploy_decode_check_speedup_pct", over="base") == -27.1
    assert _value(samples, "sglang_deploy_min_speedup_pct") == 0.0
    assert _value(samples, "sglang_deploy_min_accept_length") == 1.5
    assert _value(samples, "sglang_deploy_decode_check_spec_accept_length", algorithm="EAGLE3") == 1.9
    assert _value(samples, "sglang_deploy_decode_check_spec_accept_rate", algorithm="EAGLE3") == 0.45
