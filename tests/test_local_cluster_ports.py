"""LocalCluster's first start survives a port taken between choosing it and the node binding it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from kafkakit import Admin
from kafkakit.broker.local_cluster import LocalCluster, PortInUseError


async def test_a_taken_port_means_a_new_start_on_fresh_ports(tmp_path: Path) -> None:
    cluster = LocalCluster(2, tmp_path / "cluster")
    taken = int(cluster.address(2).rpartition(":")[2])
    with socket.socket() as squatter:  # what a client's outgoing connection did in a CI run
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        async with cluster:
            assert taken not in {int(a.rpartition(":")[2]) for a in cluster.bootstrap_servers.split(",")}
            async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
                assert {b.node_id for b in (await admin.describe_cluster()).brokers} == {1, 2}


async def test_an_existing_cluster_directory_is_never_wiped_for_new_ports(tmp_path: Path) -> None:
    data = tmp_path / "cluster"
    (data / "node-1").mkdir(parents=True)
    (data / "node-1" / "keep-me").write_text("a previous run's data")
    cluster = LocalCluster(1, data)
    taken = int(cluster.address(1).rpartition(":")[2])
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        with pytest.raises(PortInUseError, match="address already in use"):
            await cluster.start()
    assert (data / "node-1" / "keep-me").read_text() == "a previous run's data"
