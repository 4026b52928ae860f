"""The broker_min cluster harness itself (tests/broker_min_cluster.py): 3 broker_min nodes behind
fault proxies, driven by kafkakit, as tests/test_kafka_cluster.py checks KafkaCluster.

One cluster serves the whole module; after every test ``heal()`` clears proxy
faults, resumes and restarts nodes and waits for full ISRs.
"""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import Iterator

import pytest
from kafkakit import Admin, Consumer, KafkaError, Producer, TopicPartition

from tests.broker_min_cluster import BrokerMinCluster, broker_min_cluster_fixture
from tests.proxied_cluster import wait_for

broker_min_cluster = broker_min_cluster_fixture()

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(autouse=True)
def healed(broker_min_cluster: BrokerMinCluster) -> Iterator[None]:
    """Leave the cluster healthy for the next test, even when this one failed."""
    yield
    broker_min_cluster.heal()


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _producer(cluster: BrokerMinCluster, client_id: str, *, request_timeout_ms: int = 5000) -> Producer:
    return Producer(
        bootstrap_servers=cluster.bootstrap_servers, client_id=client_id, acks="all",
        enable_idempotence=True, request_timeout_ms=request_timeout_ms, delivery_timeout_ms=60000,
        retry_backoff_ms=100,
    )  # fmt: skip


async def _read_back(bootstrap: str, topic: str, count: int, timeout: float = 30.0) -> list[bytes | None]:
    values: list[bytes | None] = []
    async with Consumer(
        bootstrap_servers=bootstrap, client_id="reader", auto_offset_reset="earliest", request_timeout_ms=10000
    ) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        deadline = time.monotonic() + timeout
        while len(values) < count and time.monotonic() < deadline:
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                values.extend(r.value for r in batch)
    return values


async def test_three_nodes_behind_their_proxies_with_kafkas_listener_layout(
    broker_min_cluster: BrokerMinCluster,
) -> None:
    cluster = broker_min_cluster
    assert cluster.startup_seconds is not None
    async with Admin(bootstrap_servers=cluster.bootstrap_servers, client_id="describer") as admin:
        described = await admin.describe_cluster()
    # Every node advertises its proxy's port on PLAINTEXT, so clients never bypass the proxies.
    assert {b.node_id: b.port for b in described.brokers} == {n: cluster.proxy(n).port for n in (1, 2, 3)}
    assert sum(cluster.proxy(n).counters().connections_by_client.get("describer", 0) for n in (1, 2, 3)) >= 1
    assert cluster.registered_brokers() == [1, 2, 3]
    assert cluster.active_controller() == described.controller_id
    props = cluster.server_properties(1)
    assert props["inter.broker.listener.name"] == "INTERNAL"
    assert props["listeners"].split(",")[1].startswith("INTERNAL://")
    assert props["advertised.listeners"].startswith(f"PLAINTEXT://127.0.0.1:{cluster.proxy(1).port},")
    assert (props["min.insync.replicas"], props["default.replication.factor"]) == ("2", "3")
    assert (props["offsets.topic.replication.factor"], props["transaction.state.log.replication.factor"]) == (
        "3",
        "3",
    )


async def test_leader_killed_and_restarted_keeps_every_acknowledged_record(
    broker_min_cluster: BrokerMinCluster,
) -> None:
    cluster = broker_min_cluster
    topic = _name("kill-leader")
    await asyncio.to_thread(cluster.create_topic, topic)
    state = cluster.partition_state(topic, 0)
    assert sorted(state.replicas) == sorted(state.isr) == [1, 2, 3] and state.leader in (1, 2, 3)
    victim = cluster.leader_of(topic)
    async with _producer(cluster, "survivor") as producer:
        before = [await (await producer.send(topic, f"b{i}".encode(), partition=0)) for i in range(20)]
        cluster.kill(victim)
        assert not cluster.is_running(victim) and victim not in cluster.live_nodes()
        new_leader = await asyncio.to_thread(cluster.wait_leader, topic, exclude=[victim])
        assert new_leader != victim
        during = await (await producer.send(topic, b"during", partition=0))
        assert sorted(await asyncio.to_thread(cluster.wait_isr, topic, 0, 2)) == sorted({1, 2, 3} - {victim})
        await asyncio.to_thread(cluster.start, victim)
        assert sorted(await asyncio.to_thread(cluster.wait_isr, topic, 0, 3)) == [1, 2, 3]
    assert [m.offset for m in before] == list(range(20)) and during.offset == 20
    assert await _read_back(cluster.bootstrap_servers, topic, 21) == [
        *(f"b{i}".encode() for i in range(20)),
        b"during",
    ]


def test_active_controller_moves_off_a_killed_node(broker_min_cluster: BrokerMinCluster) -> None:
    cluster = broker_min_cluster
    controller = cluster.active_controller()
    cluster.kill(controller)
    moved = wait_for(
        lambda: (c := cluster.active_controller()) != controller and c, timeout=30, what="a new controller"
    )
    assert moved in set(cluster.node_ids) - {controller}
    survivors = sorted(set(cluster.node_ids) - {controller})
    wait_for(lambda: cluster.registered_brokers() == survivors, timeout=15, what="the killed node fenced")


async def test_stop_moves_leaderships_away_first(broker_min_cluster: BrokerMinCluster) -> None:
    cluster = broker_min_cluster
    topic = _name("stop")
    await asyncio.to_thread(cluster.create_topic, topic)
    victim = cluster.leader_of(topic)
    started = time.monotonic()
    await asyncio.to_thread(cluster.stop, victim)
    assert time.monotonic() - started < 20  # a controlled shutdown, not the SIGKILL after 30 s
    # The controller moved the leadership before the node exited: no wait for a session timeout.
    assert cluster.leader_of(topic) not in (victim, -1)


async def test_paused_leader_loses_leadership_and_catches_up_after_resume(
    broker_min_cluster: BrokerMinCluster,
) -> None:
    cluster = broker_min_cluster
    topic = _name("pause")
    await asyncio.to_thread(cluster.create_topic, topic)
    victim = cluster.leader_of(topic)
    async with _producer(cluster, "pause-writer") as producer:
        first = await (await producer.send(topic, b"before", partition=0))
        cluster.pause(victim)
        assert cluster.is_paused(victim) and cluster.is_running(victim)
        during = await (await producer.send(topic, b"during", partition=0))
        assert await asyncio.to_thread(cluster.wait_leader, topic, exclude=[victim]) != victim
        cluster.resume(victim)
        await asyncio.to_thread(cluster.wait_isr, topic, 0, 3)
        after = await (await producer.send(topic, b"after", partition=0))
    assert (first.offset, during.offset, after.offset) == (0, 1, 2)


async def test_node_restarted_on_a_new_port_is_reached_through_metadata(
    broker_min_cluster: BrokerMinCluster,
) -> None:
    cluster = broker_min_cluster
    node = 2
    old_address = cluster.bootstrap_of(node)
    await asyncio.to_thread(cluster.restart, node, new_port=True, crash=True)
    assert cluster.bootstrap_of(node) != old_address
    with pytest.raises(ConnectionRefusedError):  # nothing listens on the old address any more
        socket.create_connection(("127.0.0.1", int(old_address.rpartition(":")[2])), timeout=2).close()
    topic = _name("new-port")
    await asyncio.to_thread(cluster.create_topic, topic, assignments={0: [node, 1, 3]})
    assert cluster.leader_of(topic) == node
    async with _producer(cluster, "mover") as producer:
        assert (await (await producer.send(topic, b"new port", partition=0))).offset == 0
    assert cluster.proxy(node).counters().connections_by_client.get("mover", 0) >= 1


async def test_proxy_faults_reach_clients_only(broker_min_cluster: BrokerMinCluster) -> None:
    """A cut of every client connection leaves replication (INTERNAL), the quorum (CONTROLLER)
    and the harness's queries (the nodes' own client ports) untouched."""
    cluster = broker_min_cluster
    topic = _name("cut")
    await asyncio.to_thread(cluster.create_topic, topic)
    async with _producer(cluster, "cut-off", request_timeout_ms=1000) as producer:
        await (await producer.send(topic, b"x0", partition=0))
        for n in cluster.node_ids:
            cluster.proxy(n).blackhole()
        doomed = await producer.send(topic, b"x1", partition=0)
        # Longer than a broker session (5 s) and than replica.lag.time.max.ms (10 s): a fenced
        # broker or a follower fetching through the proxies would show.
        await asyncio.sleep(11)
        assert not doomed.done()
        assert cluster.registered_brokers() == [1, 2, 3]
        assert sorted(cluster.partition_state(topic, 0).isr) == [1, 2, 3]
        assert cluster.active_controller() in (1, 2, 3)
        assert sum(cluster.proxy(n).counters().blackholed_bytes for n in cluster.node_ids) > 0
        for n in cluster.node_ids:
            cluster.proxy(n).clear()
        await asyncio.wait_for(doomed, 30)  # the producer retries on new connections
    assert await _read_back(cluster.bootstrap_servers, topic, 2) == [b"x0", b"x1"]


async def test_blackhole_of_one_client_times_it_out_while_another_works(
    broker_min_cluster: BrokerMinCluster,
) -> None:
    cluster = broker_min_cluster
    topic = _name("blackhole")
    await asyncio.to_thread(cluster.create_topic, topic)
    proxy = cluster.proxy(cluster.leader_of(topic))
    async with (
        Producer(bootstrap_servers=cluster.bootstrap_servers, client_id="victim", request_timeout_ms=1000,
                 delivery_timeout_ms=3000, acks="all") as victim,
        _producer(cluster, "bystander") as bystander,
    ):  # fmt: skip
        await (await victim.send(topic, b"v0", partition=0))
        proxy.blackhole("victim")
        doomed = await victim.send(topic, b"v1", partition=0)
        fine = await (await bystander.send(topic, b"b0", partition=0))
        with pytest.raises(KafkaError):
            await doomed
        proxy.clear()
        await (await victim.send(topic, b"v2", partition=0))
    assert fine.offset == 1
    assert await _read_back(cluster.bootstrap_servers, topic, 3) == [b"v0", b"b0", b"v2"]
