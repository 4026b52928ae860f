"""The multi-broker harness itself: a 3-node Apache Kafka behind fault proxies, driven by kafkakit.

One cluster serves the whole module (``cluster_fixture``); after every test,
``heal()`` clears proxy faults, resumes and restarts nodes and waits for full
ISRs, so each test starts from a healthy cluster whatever the previous one did.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from typing import Literal

import pytest
from kafkakit import Admin, Consumer, KafkaError, NewTopic, Producer, RecordMetadata, TopicPartition
from kafkakit.protocol import ApiKey, encode_request
from kafkakit.protocol.build import make_request

from tests.kafka_cluster import KafkaCluster, cluster_fixture, wait_for

kafka_cluster = cluster_fixture()

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(autouse=True)
def healed(kafka_cluster: KafkaCluster) -> Iterator[None]:
    """Leave the cluster healthy for the next test, even when this one failed."""
    yield
    kafka_cluster.heal()


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def _read_back(
    bootstrap: str, topic: str, count: int, *, partition: int = 0, timeout: float = 30.0
) -> list[bytes | None]:
    values: list[bytes | None] = []
    async with Consumer(
        bootstrap_servers=bootstrap,
        client_id="reader",
        auto_offset_reset="earliest",
        request_timeout_ms=10000,
    ) as consumer:
        consumer.assign([TopicPartition(topic, partition)])
        deadline = time.monotonic() + timeout
        while len(values) < count and time.monotonic() < deadline:
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                values.extend(r.value for r in batch)
    return values


def _producer(
    cluster: KafkaCluster,
    client_id: str,
    *,
    request_timeout_ms: int = 5000,
    delivery_timeout_ms: int = 60000,
    max_request_size: int = 1048576,
) -> Producer:
    """An idempotent acks=all producer with timeouts short enough for fault tests."""
    return Producer(
        bootstrap_servers=cluster.bootstrap_servers,
        client_id=client_id,
        acks="all",
        enable_idempotence=True,
        request_timeout_ms=request_timeout_ms,
        delivery_timeout_ms=delivery_timeout_ms,
        max_request_size=max_request_size,
        retry_backoff_ms=100,
    )


# --------------------------------------------------------------------------- the cluster


async def test_three_nodes_in_metadata_through_the_proxies(kafka_cluster: KafkaCluster) -> None:
    assert kafka_cluster.startup_seconds is not None
    async with Admin(bootstrap_servers=kafka_cluster.bootstrap_servers, client_id="describer") as admin:
        described = await admin.describe_cluster()
    assert [b.node_id for b in described.brokers] == [1, 2, 3]
    # Every broker advertises its proxy's port, so clients never bypass the proxies.
    assert {b.node_id: b.port for b in described.brokers} == {
        n: kafka_cluster.proxy(n).port for n in (1, 2, 3)
    }
    assert {kafka_cluster.bootstrap_of(n) for n in (1, 2, 3)} == set(
        kafka_cluster.bootstrap_servers.split(",")
    )
    assert (
        sum(kafka_cluster.proxy(n).counters().connections_by_client.get("describer", 0) for n in (1, 2, 3))
        >= 1
    )
    assert kafka_cluster.active_controller() in (1, 2, 3)
    assert kafka_cluster.registered_brokers() == [1, 2, 3]


async def test_idempotent_acks_all_round_trip_over_three_partitions(kafka_cluster: KafkaCluster) -> None:
    topic = _name("round-trip")
    async with Admin(bootstrap_servers=kafka_cluster.bootstrap_servers) as admin:
        await admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3)])
    await asyncio.to_thread(kafka_cluster.wait_healthy, [topic])
    assert {kafka_cluster.leader_of(topic, p) for p in range(3)} == {1, 2, 3}  # Kafka spreads leaders
    async with _producer(kafka_cluster, "round-trip") as producer:
        futures = [await producer.send(topic, f"v{i}".encode(), partition=i % 3) for i in range(300)]
        metadata: list[RecordMetadata] = list(await asyncio.gather(*futures))
    assert sorted((m.partition, m.offset) for m in metadata) == [(p, o) for p in range(3) for o in range(100)]
    for p in range(3):
        assert await _read_back(kafka_cluster.bootstrap_servers, topic, 100, partition=p) == [
            f"v{i}".encode() for i in range(p, 300, 3)
        ]
    # The producer reached every leader, each through that node's proxy.
    for n in (1, 2, 3):
        assert kafka_cluster.proxy(n).counters().bytes_to_broker > 0


# --------------------------------------------------------------------------- node failures


async def test_leader_killed_and_restarted_keeps_every_acknowledged_record(
    kafka_cluster: KafkaCluster,
) -> None:
    topic = _name("kill-leader")
    await asyncio.to_thread(kafka_cluster.create_topic, topic)
    victim = kafka_cluster.leader_of(topic)
    sent: list[bytes] = []
    acked: list[RecordMetadata] = []
    failures: list[BaseException] = []
    stop = asyncio.Event()

    async with _producer(kafka_cluster, "survivor") as producer:

        async def keep_sending() -> None:
            pending = []
            i = 0
            while not stop.is_set():
                value = f"r{i}".encode()
                sent.append(value)
                pending.append(await producer.send(topic, value, partition=0))
                i += 1
                await asyncio.sleep(0.005)
            for outcome in await asyncio.gather(*pending, return_exceptions=True):
                if isinstance(outcome, BaseException):
                    failures.append(outcome)
                else:
                    acked.append(outcome)

        sender = asyncio.create_task(keep_sending())
        await asyncio.sleep(1.0)
        sent_before_kill = len(sent)
        kafka_cluster.kill(victim)
        assert not kafka_cluster.is_running(victim)
        new_leader = await asyncio.to_thread(kafka_cluster.wait_leader, topic, exclude=[victim])
        assert new_leader != victim
        await asyncio.to_thread(kafka_cluster.start, victim)
        isr = await asyncio.to_thread(kafka_cluster.wait_isr, topic, 0, 3)
        assert sorted(isr) == [1, 2, 3]
        await asyncio.sleep(1.0)
        stop.set()
        await sender

    assert not failures, failures[:3]
    assert len(acked) == len(sent) > sent_before_kill + 100  # records kept flowing through the failover
    assert [m.offset for m in acked] == list(range(len(sent)))
    # Exactly once and in order: idempotence removed the duplicates of retried batches.
    assert await _read_back(kafka_cluster.bootstrap_servers, topic, len(sent)) == sent


def _partition_for(key: str, partitions: int = 3) -> int:
    """Kafka's ``Utils.abs(key.hashCode()) % partitions`` (Java's String.hashCode over UTF-16)."""
    h = 0
    for (unit,) in struct.iter_unpack(">H", key.encode("utf-16-be")):
        h = (31 * h + unit) & 0xFFFFFFFF
    h = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def test_active_controller_and_coordinators_move_off_a_killed_node(kafka_cluster: KafkaCluster) -> None:
    controller = kafka_cluster.active_controller()
    assert controller in (1, 2, 3)
    kafka_cluster.coordinator_of("any-group")  # the first FindCoordinators create the internal topics
    kafka_cluster.coordinator_of("any-txn", "transaction")
    kafka_cluster.wait_healthy(["__consumer_offsets", "__transaction_state"])
    # A group and a transactional id whose coordinators sit on the controller node: the leader of
    # the internal topic's partition that Kafka hashes the key to.
    keys: dict[Literal["group", "transaction"], str] = {}
    internal: tuple[tuple[Literal["group", "transaction"], str], ...] = (
        ("group", "__consumer_offsets"),
        ("transaction", "__transaction_state"),
    )
    for key_type, topic in internal:
        on_controller = {p for p in range(3) if kafka_cluster.leader_of(topic, p) == controller}
        assert on_controller, f"Kafka spreads the 3 leaders of {topic} over the 3 nodes"
        keys[key_type] = next(
            k for k in (f"{key_type}-{i}" for i in range(100)) if _partition_for(k) in on_controller
        )
        assert kafka_cluster.coordinator_of(keys[key_type], key_type) == controller
    kafka_cluster.kill(controller)
    new_controller = wait_for(
        lambda: (c := kafka_cluster.active_controller()) != controller and c,
        timeout=30,
        what="a new controller",
    )
    assert new_controller in set(kafka_cluster.node_ids) - {controller}
    for key_type, key in keys.items():
        moved = wait_for(
            lambda: (c := kafka_cluster.coordinator_of(key, key_type)) != controller and c,  # noqa: B023
            timeout=30,
            what=f"the coordinator of {key} off node {controller}",
        )
        assert moved in kafka_cluster.live_nodes()


async def test_paused_leader_loses_leadership_and_catches_up_after_resume(
    kafka_cluster: KafkaCluster,
) -> None:
    topic = _name("pause")
    await asyncio.to_thread(kafka_cluster.create_topic, topic)
    victim = kafka_cluster.leader_of(topic)
    async with _producer(kafka_cluster, "pause-writer") as producer:
        first = await (await producer.send(topic, b"before", partition=0))
        kafka_cluster.pause(victim)
        assert kafka_cluster.is_paused(victim) and kafka_cluster.is_running(victim)
        # The hung leader is fenced once its heartbeats stop; the client must move on.
        during = await (await producer.send(topic, b"during", partition=0))
        new_leader = await asyncio.to_thread(kafka_cluster.wait_leader, topic, exclude=[victim])
        kafka_cluster.resume(victim)
        assert not kafka_cluster.is_paused(victim)
        await asyncio.to_thread(kafka_cluster.wait_isr, topic, 0, 3)
        after = await (await producer.send(topic, b"after", partition=0))
    assert new_leader != victim
    assert (first.offset, during.offset, after.offset) == (0, 1, 2)
    assert await _read_back(kafka_cluster.bootstrap_servers, topic, 3) == [b"before", b"during", b"after"]


async def test_node_restarted_on_a_new_port_is_reached_through_metadata(kafka_cluster: KafkaCluster) -> None:
    node = 2
    old_address = kafka_cluster.bootstrap_of(node)
    async with _producer(kafka_cluster, "mover") as producer:
        warmup = _name("warm-up")
        await asyncio.to_thread(kafka_cluster.create_topic, warmup, assignments={0: [node, 1, 3]})
        await (await producer.send(warmup, b"old port", partition=0))
        await asyncio.to_thread(kafka_cluster.restart, node, new_port=True)
        assert kafka_cluster.bootstrap_of(node) != old_address
        with pytest.raises(ConnectionRefusedError):  # nothing listens on the old address any more
            socket.create_connection(("127.0.0.1", int(old_address.rpartition(":")[2])), timeout=2).close()
        # A topic led by the moved node: the producer only knew its old address.
        topic = _name("new-port")
        await asyncio.to_thread(kafka_cluster.create_topic, topic, assignments={0: [node, 1, 3]})
        assert kafka_cluster.leader_of(topic) == node
        before = kafka_cluster.proxy(node).counters().connections_by_client.get("mover", 0)
        metadata = await (await producer.send(topic, b"new port", partition=0))
    assert metadata.offset == 0
    assert kafka_cluster.proxy(node).counters().connections_by_client.get("mover", 0) > before
    async with Admin(bootstrap_servers=kafka_cluster.bootstrap_of(1)) as admin:
        described = await admin.describe_cluster()
    assert f"127.0.0.1:{described.brokers[node - 1].port}" == kafka_cluster.bootstrap_of(node)
    assert await _read_back(kafka_cluster.bootstrap_of(node), topic, 1) == [b"new port"]


# --------------------------------------------------------------------------- proxy faults


async def _leader_topic(cluster: KafkaCluster, prefix: str) -> tuple[str, int]:
    topic = _name(prefix)
    await asyncio.to_thread(cluster.create_topic, topic)
    return topic, cluster.leader_of(topic)


async def test_blackhole_of_one_client_times_it_out_while_another_works(kafka_cluster: KafkaCluster) -> None:
    topic, leader = await _leader_topic(kafka_cluster, "blackhole")
    proxy = kafka_cluster.proxy(leader)
    async with (
        _producer(kafka_cluster, "cut-off", request_timeout_ms=1000, delivery_timeout_ms=3000) as cut_off,
        _producer(kafka_cluster, "bystander", request_timeout_ms=1000, delivery_timeout_ms=3000) as bystander,
    ):
        await (await cut_off.send(topic, b"x0", partition=0))
        proxy.blackhole("cut-off")
        started = time.monotonic()
        doomed = await cut_off.send(topic, b"x1", partition=0)
        fine = await (await bystander.send(topic, b"y0", partition=0))
        with pytest.raises(KafkaError):
            await doomed
        assert time.monotonic() - started >= 0.9  # it waited for a reply that never came
        assert proxy.counters().blackholed_bytes > 0
        proxy.clear()
        await (await cut_off.send(topic, b"x2", partition=0))  # a new connection once the cut heals
    assert fine.offset == 1
    assert await _read_back(kafka_cluster.bootstrap_servers, topic, 3) == [b"x0", b"y0", b"x2"]


@pytest.mark.parametrize("fault", ["drop", "reset"])
async def test_dropped_or_reset_client_recovers_once_the_fault_clears(
    kafka_cluster: KafkaCluster, fault: str
) -> None:
    topic, leader = await _leader_topic(kafka_cluster, fault)
    proxy = kafka_cluster.proxy(leader)
    async with (
        _producer(kafka_cluster, "victim", request_timeout_ms=2000) as victim,
        _producer(kafka_cluster, "bystander", request_timeout_ms=2000) as bystander,
    ):
        await (await victim.send(topic, b"v0", partition=0))
        refused = proxy.counters().refused
        proxy.drop("victim") if fault == "drop" else proxy.reset("victim")
        assert proxy.counters().refused > refused  # its open connection was closed
        retried = await victim.send(topic, b"v1", partition=0)
        await (await bystander.send(topic, b"b0", partition=0))
        await asyncio.sleep(1.5)
        assert not retried.done()  # every reconnection is refused while the fault lasts
        proxy.clear("victim")
        await asyncio.wait_for(retried, 20)
    assert await _read_back(kafka_cluster.bootstrap_servers, topic, 3) == [b"v0", b"b0", b"v1"]


async def test_delay_adds_latency_in_each_direction(kafka_cluster: KafkaCluster) -> None:
    topic, leader = await _leader_topic(kafka_cluster, "delay")
    proxy = kafka_cluster.proxy(leader)
    async with _producer(kafka_cluster, "slowpoke") as producer:
        await (await producer.send(topic, b"warm", partition=0))
        proxy.delay(0.4, "slowpoke")
        started = time.monotonic()
        await (await producer.send(topic, b"late", partition=0))
        delayed = time.monotonic() - started
        proxy.clear()
        started = time.monotonic()
        await (await producer.send(topic, b"quick", partition=0))
        quick = time.monotonic() - started
    assert delayed >= 0.8  # 0.4 s on the way to the broker and 0.4 s back
    assert quick < delayed


async def test_throttle_caps_bytes_per_second(kafka_cluster: KafkaCluster) -> None:
    topic, leader = await _leader_topic(kafka_cluster, "throttle")
    proxy = kafka_cluster.proxy(leader)
    async with _producer(kafka_cluster, "narrow", max_request_size=1 << 20) as producer:
        await (await producer.send(topic, b"warm", partition=0))
        proxy.throttle(100_000, "narrow")
        before = proxy.counters().bytes_to_broker
        started = time.monotonic()
        futures = [await producer.send(topic, bytes(10_000), partition=0) for _ in range(20)]
        await asyncio.gather(*futures)
        elapsed = time.monotonic() - started
    assert proxy.counters().bytes_to_broker - before >= 200_000
    assert elapsed >= 1.5  # 200 KB at 100 KB/s, with slack for the first piece


def _api_versions_frame(client_id: str) -> bytes:
    request = make_request(ApiKey.API_VERSIONS, 3, client_software_name="raw", client_software_version="1")
    return encode_request(7, client_id, request)


@pytest.mark.parametrize("fault", ["drop", "reset"])
def test_drop_closes_with_fin_and_reset_with_rst(kafka_cluster: KafkaCluster, fault: str) -> None:
    proxy = kafka_cluster.proxy(1)
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as sock:
        sock.sendall(_api_versions_frame(f"raw-{fault}"))
        assert len(sock.recv(65536)) > 4  # an answer from the broker, through the proxy
        proxy.drop(f"raw-{fault}") if fault == "drop" else proxy.reset(f"raw-{fault}")
        if fault == "drop":
            assert sock.recv(1) == b""  # an orderly close
        else:
            with pytest.raises(ConnectionResetError):
                sock.recv(1)
    assert proxy.counters().connections_by_client[f"raw-{fault}"] == 1
