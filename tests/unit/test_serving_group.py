"""Serving groups: hosts of one multi-node server, their ranks, the flags each runs, and the
inconsistent groups refused before anything changes."""

import json

import pytest

from sglang_deploy.errors import DeployError
from sglang_deploy.plan import serving_group
from sglang_deploy.plan.host_plan import plan_for
from sglang_deploy.plan.hosts import REPO_ROOT, deploy_defaults, gpu_hosts, sandbox_hosts
from sglang_deploy.profile.schema import load_profile

GROUP_ARGS = {"server_args": {"tp-size": 2, "nnodes": 2}}


def host(name, **data):
    return name, {
        "profile": "baseline",
        "profile_overrides": GROUP_ARGS,
        "ssh_hostname": f"10.0.0.{name[-1]}",
        **data,
    }


def profile_of(data):
    return load_profile(data["profile"], overrides=data.get("profile_overrides"))


def test_inventory_order_ranks_the_group_and_rank_0s_cluster_address_is_the_dist_init_host():
    members = serving_group.resolve(
        [
            host("n1", serving_group="g", cluster_address="192.168.1.1", socket_ifname="ens1"),
            host("n3"),
            host("n2", serving_group="g", cluster_address="192.168.1.2"),
        ]
    )
    assert set(members) == {"n1", "n2"}
    follower = members["n2"]
    assert (follower.rank, follower.hosts, follower.leader, follower.size) == (1, ("n1", "n2"), "n1", 2)
    assert follower.server_args(20000) == {"nnodes": 2, "node-rank": 1, "dist-init-addr": "192.168.1.1:20000"}
    assert members["n1"].env() == {"NCCL_SOCKET_IFNAME": "ens1", "GLOO_SOCKET_IFNAME": "ens1"}
    assert follower.env() == {}


def test_explicit_node_rank_wins_over_the_order_and_ipv6_is_bracketed():
    members = serving_group.resolve(
        [
            host("a", serving_group="g", node_rank=1),
            host("b", serving_group="g", node_rank=0, cluster_address="fd00::2"),
        ]
    )
    assert members["b"].is_leader and members["a"].hosts == ("b", "a")
    assert members["a"].dist_init_addr(5000) == "[fd00::2]:5000"


def test_without_cluster_address_rank_0_is_reached_at_its_ssh_hostname():
    members = serving_group.resolve([host("n1", serving_group="g"), host("n2", serving_group="g")])
    assert members["n2"].dist_init_addr(20000) == "10.0.0.1:20000"


@pytest.mark.parametrize(
    "ranks, message",
    [
        ((0, None), "node_rank is set on some members but not on n2"),
        ((0, 0), "node_rank must be 0..1, each once: n1=0, n2=0"),
        ((1, 2), "node_rank must be 0..1"),
    ],
)
def test_inconsistent_node_ranks_are_refused_naming_the_hosts(ranks, message):
    with pytest.raises(DeployError, match=message):
        serving_group.resolve(
            [
                host("n1", serving_group="g", node_rank=ranks[0]),
                host("n2", serving_group="g", node_rank=ranks[1]),
            ]
        )


def test_a_group_smaller_than_the_profiles_nnodes_is_refused_naming_its_hosts():
    hosts = [host("n1", serving_group="g"), host("n2"), host("n3")]
    with pytest.raises(
        DeployError,
        match=r"serving group g: 1 member\(s\) \(n1\) but profile "
        r"baseline has nnodes 2",
    ):
        serving_group.resolve_checked(hosts, profile_of)


def test_members_with_different_profiles_are_refused_naming_the_odd_one():
    hosts = [
        host("n1", serving_group="g"),
        host(
            "n2",
            serving_group="g",
            profile_overrides={"server_args": {"tp-size": 2, "nnodes": 2}, "env": {"NCCL_BUFFSIZE": "1"}},
        ),
    ]
    with pytest.raises(
        DeployError,
        match=r"every member must run the same profile as rank 0 n1 "
        r"\(baseline\); n2 \(baseline\) differ",
    ):
        serving_group.resolve_checked(hosts, profile_of)


def test_a_member_may_serve_on_its_own_port():
    hosts = [
        host("n1", serving_group="g"),
        host("n2", serving_group="g", profile_overrides={**GROUP_ARGS, "service": {"port": 30002}}),
    ]
    assert set(serving_group.resolve_checked(hosts, profile_of)) == {"n1", "n2"}


def test_a_member_may_run_a_service_of_another_name_and_so_another_engine_link():
    # A service's engine link is its own (profile/fields.py engine_home), as its port is.
    hosts = [
        host("n1", serving_group="g"),
        host("n2", serving_group="g", profile_overrides={**GROUP_ARGS, "service": {"name": "kimi"}}),
    ]
    assert set(serving_group.resolve_checked(hosts, profile_of)) == {"n1", "n2"}


def test_gpus_must_be_shared_evenly_by_the_nodes():
    odd = {"server_args": {"tp-size": 3, "nnodes": 2}}
    hosts = [
        host("n1", serving_group="g", profile_overrides=odd),
        host("n2", serving_group="g", profile_overrides=odd),
    ]
    with pytest.raises(DeployError, match="tp-size x pp-size = 3 GPUs cannot be shared evenly by 2 nodes"):
        serving_group.resolve_checked(hosts, profile_of)


def test_a_multi_node_profile_on_a_host_in_no_group_is_refused():
    with pytest.raises(DeployError, match="spans 2 nodes .* n1 is in no serving_group"):
        serving_group.resolve_checked([host("n1")], profile_of)


def test_a_group_is_deployed_whole():
    hosts = [host("n1", serving_group="g"), host("n2", serving_group="g"), host("n3", profile_overrides={})]
    with pytest.raises(DeployError, match=r"serving group g: n2 not in this run \(--limit\)"):
        serving_group.resolve_checked(hosts, profile_of, limited={"n1", "n3"})
    assert "n3" not in serving_group.resolve_checked(hosts, profile_of, limited={"n3"})  # n3 alone: fine


def test_each_member_renders_its_rank_and_the_groups_dist_init_addr_with_identical_env():
    hosts = [host("n1", serving_group="g", socket_ifname="ens1"), host("n2", serving_group="g")]
    members = serving_group.resolve_checked(hosts, profile_of)
    plans = {
        name: plan_for({**deploy_defaults(), **data}, operator_env={}, member=members[name])
        for name, data in hosts
    }
    for name, rank in (("n1", 0), ("n2", 1)):
        unit = plans[name].unit_text
        assert f"--nnodes 2 --node-rank {rank} --dist-init-addr 10.0.0.1:20000" in unit
        assert plans[name].group is members[name]
    # The profile's variables are the same on both; rank 0 adds its own interface.
    assert plans["n2"].env_text in plans["n1"].env_text.replace('GLOO_SOCKET_IFNAME="ens1"\n', "").replace(
        'NCCL_SOCKET_IFNAME="ens1"\n', ""
    )
    assert 'NCCL_SOCKET_IFNAME="ens1"' in plans["n1"].env_text and "IFNAME" not in plans["n2"].env_text
    assert plans["n1"].hook_module != plans["n2"].hook_module  # the hook carries the same extras


def test_a_host_alone_renders_as_before():
    data = {**deploy_defaults(), "profile": "baseline"}
    assert plan_for(data, operator_env={}).unit_text == plan_for(data, operator_env={}, member=None).unit_text
    assert "--nnodes" not in plan_for(data, operator_env={}).unit_text


def test_the_example_hosts_file_has_a_valid_group():
    hosts = gpu_hosts(REPO_ROOT / "inventory" / "hosts.example.yml")
    members = serving_group.resolve_checked(hosts, profile_of)
    assert {name: m.rank for name, m in members.items()} == {"gpu-node-04": 0, "gpu-node-05": 1}
    assert members["gpu-node-05"].dist_init_addr(20000) == "192.168.100.14:20000"


def test_sandbox_groups_share_rank_0s_dist_init_port(tmp_path, monkeypatch):
    state = tmp_path / "state.json"
    state.write_text(
        json.dumps(
            {
                "key": "/k",
                "nodes": [
                    {
                        "name": f"node{i}",
                        "ssh_host": "127.0.0.1",
                        "ssh_port": 2200 + i,
                        "ssh_user": "root",
                        "server_port": 30000 + i,
                    }
                    for i in (1, 2, 3)
                ],
            }
        )
    )
    monkeypatch.setenv("SGLANG_DEPLOY_SANDBOX_GROUPS", "g1=node2+node1")
    hosts = dict(sandbox_hosts(state))
    assert (hosts["node2"]["node_rank"], hosts["node1"]["node_rank"]) == (0, 1)
    assert hosts["node1"]["profile_overrides"] == {"service": {"port": 30001, "dist_init_port": 31002}}
    assert "serving_group" not in hosts["node3"]
    monkeypatch.setenv("SGLANG_DEPLOY_SANDBOX_GROUPS", "g1")
    with pytest.raises(DeployError, match="expected GROUP=NODE"):
        sandbox_hosts(state)


def test_verify_may_look_at_one_member_of_a_group():
    hosts = [host("n1", serving_group="g"), host("n2", serving_group="g"), host("n3", profile="nonexistent")]
    members = serving_group.resolve_checked(hosts, profile_of, limited={"n2"}, whole=False)
    assert members["n2"].leader_port == 30000  # n3's profile, outside the run, is never read
