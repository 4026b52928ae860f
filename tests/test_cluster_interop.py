"""Third-party clients against a 3-node broker_min cluster, unchanged (issue 13).

confluent-kafka (librdkafka), aiokafka and kafka-python produce with acks=all to a
replicated topic, consume it back in a consumer group that commits, and keep working
when the leader of their partition is killed; kcat lists the three brokers.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from kafkakit import Admin, NewTopic
from kafkakit.broker import LocalCluster

from tests.brokers import new_topic_name

pytestmark = [pytest.mark.timeout(240), pytest.mark.asyncio(loop_scope="module")]

RECORDS = 200


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalCluster]:
    async with LocalCluster(3, tmp_path_factory.mktemp("interop-cluster"), config={"min.insync.replicas": "2"}) as c:
        yield c


async def _topic(cluster: LocalCluster, prefix: str, partitions: int = 3) -> str:
    topic = new_topic_name(prefix)
    async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        await admin.create_topics([NewTopic(topic, partitions, 3)])
    return topic


def _confluent_round_trip(bootstrap: str, topic: str, group: str) -> tuple[int, list[bytes], dict[int, int]]:
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    errors: list[Any] = []
    for i in range(RECORDS):
        producer.produce(topic, f"c{i}".encode(), key=str(i % 7).encode(),
                         on_delivery=lambda err, _msg: errors.append(err) if err else None)  # fmt: skip
    remaining = producer.flush(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})  # fmt: skip
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(values) < RECORDS and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.commit(asynchronous=False)
    committed = consumer.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
    consumer.close()
    assert not errors, errors
    return remaining, values, {tp.partition: tp.offset for tp in committed}


async def test_confluent_kafka_produces_and_consumes_in_a_group(cluster: LocalCluster) -> None:
    topic = await _topic(cluster, "confluent")
    remaining, values, committed = await asyncio.to_thread(
        _confluent_round_trip, cluster.bootstrap_servers, topic, new_topic_name("cg")
    )
    assert remaining == 0
    assert sorted(values) == sorted(f"c{i}".encode() for i in range(RECORDS))
    # Partitions the keys never hashed to have nothing to commit (OFFSET_INVALID, -1001).
    assert sum(offset for offset in committed.values() if offset >= 0) == RECORDS


async def test_aiokafka_produces_and_consumes_in_a_group(cluster: LocalCluster) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic = await _topic(cluster, "aiokafka")
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        await asyncio.gather(*[await producer.send(topic, f"a{i}".encode()) for i in range(RECORDS)])
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=cluster.bootstrap_servers, group_id=new_topic_name("ag"),
        auto_offset_reset="earliest", enable_auto_commit=False,
    )  # fmt: skip
    await consumer.start()
    values: list[bytes] = []
    try:
        deadline = time.monotonic() + 60
        while len(values) < RECORDS and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                values.extend(r.value for r in records)
        await consumer.commit()
    finally:
        await consumer.stop()
    assert sorted(values) == sorted(f"a{i}".encode() for i in range(RECORDS))


def _kafka_python_round_trip(bootstrap: str, topic: str) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(RECORDS):
        producer.send(topic, f"k{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=new_topic_name("kg"),
                             auto_offset_reset="earliest", consumer_timeout_ms=15000)  # fmt: skip
    values = [m.value for _, m in zip(range(RECORDS), consumer, strict=False)]
    consumer.close()
    return values


async def test_kafka_python_produces_and_consumes_in_a_group(cluster: LocalCluster) -> None:
    topic = await _topic(cluster, "kafka-python")
    values = await asyncio.to_thread(_kafka_python_round_trip, cluster.bootstrap_servers, topic)
    assert sorted(values) == sorted(f"k{i}".encode() for i in range(RECORDS))


async def test_kcat_lists_three_brokers_and_the_replicas(cluster: LocalCluster) -> None:
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    assert kcat is not None, "kcat is installed by .ci/run (apt)"
    topic = await _topic(cluster, "kcat", partitions=2)
    result = subprocess.run([kcat, "-b", cluster.bootstrap_servers, "-L", "-t", topic],
                            capture_output=True, text=True, timeout=30)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "3 brokers:" in result.stdout
    assert result.stdout.count("replicas: ") == 2 and "isrs: " in result.stdout


async def test_confluent_kafka_keeps_producing_when_the_leader_is_killed(tmp_path: Any) -> None:
    from confluent_kafka import Producer

    async with LocalCluster(3, tmp_path, config={"min.insync.replicas": "2"}) as cluster:
        topic = await _topic(cluster, "confluent-failover", partitions=1)
        leader = (await cluster.partition_state(topic, 0, 1) or await cluster.partition_state(topic, 0, 2))
        assert leader is not None

        def produce(kill_after: int) -> tuple[list[bytes], list[Any]]:
            producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                                 "enable.idempotence": True, "message.timeout.ms": 60000})  # fmt: skip
            acked: list[bytes] = []
            errors: list[Any] = []

            def done(err: Any, msg: Any) -> None:
                (errors.append(err) if err else acked.append(msg.value()))

            for i in range(RECORDS):
                producer.produce(topic, f"f{i}".encode(), on_delivery=done)
                if i == kill_after:
                    producer.flush(30)
                    asyncio.run_coroutine_threadsafe(cluster.kill(leader.leader), loop).result(30)
                producer.poll(0)
            producer.flush(60)
            return acked, errors

        loop = asyncio.get_running_loop()
        acked, errors = await asyncio.to_thread(produce, RECORDS // 2)
        assert not errors, errors
        assert acked == [f"f{i}".encode() for i in range(RECORDS)]  # in order, all acknowledged
        survivor = next(n for n in cluster.node_ids if n != leader.leader)
        state = await cluster.partition_state(topic, 0, survivor)
        assert state is not None and state.leader != leader.leader
