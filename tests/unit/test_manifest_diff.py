"""report/manifest.py: two nodes' installed distributions compared, one pair or the whole fleet
(every host's latest manifest against its profile's first host)."""

from sglang_deploy.report import manifest

DISTS = [
    {"name": "sglang", "version": "0.5.23", "record_sha256": "a" * 64},
    {"name": "fastapi", "version": "0.115.0", "record_sha256": "b" * 64},
]


def recorded(tmp_path, host, profile, dists):
    return manifest.record(host, profile, {"manifest": dists}, directory=tmp_path)


def test_a_fleet_running_one_lock_has_no_difference(tmp_path, capsys):
    for host in ("node1", "node2", "node3"):
        recorded(tmp_path, host, "baseline", DISTS)
    assert manifest.main(["diff", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "baseline: 3 host(s) (node1, node2, node3), 2 distributions each" in out
    assert "same distributions, versions and RECORDs" in out


def test_a_node_with_another_build_or_an_extra_distribution_is_named(tmp_path, capsys):
    recorded(tmp_path, "node1", "baseline", DISTS)
    rebuilt = [
        dict(DISTS[0], record_sha256="c" * 64),
        DISTS[1],
        {"name": "six", "version": "1", "record_sha256": ""},
    ]
    recorded(tmp_path, "node2", "baseline", rebuilt)
    recorded(tmp_path, "node3", "eagle3", DISTS[:1])  # another profile: compared with its own
    assert manifest.main(["diff", "--dir", str(tmp_path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert "baseline: node1 vs node2: sglang 0.5.23: different RECORD (a different build)" in lines
    assert "baseline: node1 vs node2: six: only in B" in lines
    assert not [line for line in lines if "node3 vs" in line or "vs node3" in line]


def test_two_files_are_compared_as_before(tmp_path, capsys):
    a = recorded(tmp_path, "node1", "baseline", DISTS)
    b = recorded(tmp_path, "node2", "baseline", DISTS[:1])
    assert manifest.main(["diff", str(a), str(b)]) == 1
    assert "fastapi: only in A" in capsys.readouterr().out
