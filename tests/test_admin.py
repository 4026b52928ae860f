"""The admin client against real brokers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from kafkakit.admin import Admin
from kafkakit.errors import (
    IllegalStateError,
    KafkaConfigError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from kafkakit.structs import NewTopic


@pytest.fixture
def bootstrap(broker: Any) -> str:
    return str(broker.bootstrap_servers)


async def test_create_list_describe_delete(bootstrap: str, topic_factory: Callable[[], str]) -> None:
    one, three = topic_factory(), topic_factory()
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(one), NewTopic(three, num_partitions=3)])
        topics = await admin.list_topics()
        assert {one, three} <= topics
        assert not any(t.startswith("__") for t in topics)

        described = await admin.describe_topics([three, one])
        assert [d.name for d in described] == sorted([one, three])
        by_name = {d.name: d for d in described}
        assert [p.partition for p in by_name[three].partitions] == [0, 1, 2]
        assert len(by_name[one].partitions) == 1
        cluster = await admin.describe_cluster()
        node_ids = {b.node_id for b in cluster.brokers}
        for desc in described:
            assert not desc.is_internal
            for p in desc.partitions:
                assert p.leader in node_ids
                assert p.replicas == (p.leader,)

        every = {d.name for d in await admin.describe_topics()}
        assert {one, three} <= every

        await admin.delete_topics([one, three])
        assert not {one, three} & await admin.list_topics()
        with pytest.raises(UnknownTopicOrPartitionError):
            await admin.describe_topics([one])


async def test_errors_are_typed(bootstrap: str, topic_factory: Callable[[], str]) -> None:
    name, missing = topic_factory(), topic_factory()
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(name)])
        with pytest.raises(TopicAlreadyExistsError, match=name):
            await admin.create_topics([NewTopic(name)])
        with pytest.raises(UnknownTopicOrPartitionError):
            await admin.delete_topics([missing])
        with pytest.raises(UnknownTopicOrPartitionError):
            await admin.describe_topics([missing])
        assert missing not in await admin.list_topics()  # describing did not auto-create it
        await admin.delete_topics([name])


async def test_one_failure_does_not_stop_the_others(bootstrap: str, topic_factory: Callable[[], str]) -> None:
    existing, fresh = topic_factory(), topic_factory()
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(existing)])
        with pytest.raises(TopicAlreadyExistsError):
            await admin.create_topics([NewTopic(existing), NewTopic(fresh, num_partitions=2)])
        described = await admin.describe_topics([fresh])
        assert len(described[0].partitions) == 2
        await admin.delete_topics([existing, fresh])


async def test_validate_only_creates_nothing(bootstrap: str, topic: str) -> None:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, num_partitions=2)], validate_only=True)
        assert topic not in await admin.list_topics()


async def test_bad_partition_count_is_rejected(bootstrap: str, topic: str) -> None:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        with pytest.raises(KafkaConfigError) as info:
            await admin.create_topics([NewTopic(topic, num_partitions=0)])
        assert info.value.setting == "num_partitions"
        with pytest.raises(TypeError):
            await admin.create_topics(["just-a-name"])  # type: ignore[list-item]
        with pytest.raises(TypeError):
            await admin.delete_topics(topic)


async def test_describe_cluster(bootstrap: str) -> None:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        cluster = await admin.describe_cluster()
        assert cluster.cluster_id
        assert len(cluster.brokers) >= 1
        host, _, port = bootstrap.split(",")[0].rpartition(":")
        assert any(b.port == int(port) for b in cluster.brokers)
        assert cluster.controller_id in {b.node_id for b in cluster.brokers} or cluster.controller_id == -1


async def test_describe_configs(bootstrap: str, topic: str) -> None:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics(
            [NewTopic(topic, configs={"retention.ms": "123456", "cleanup.policy": "compact"})]
        )
        configs = await admin.describe_configs(topic)
        assert configs["retention.ms"] == "123456"
        assert configs["cleanup.policy"] == "compact"
        await admin.delete_topics([topic])


def commit_with_confluent(bootstrap: str, topic: str) -> None:
    """A group offset commit makes Apache Kafka create the internal __consumer_offsets topic."""
    from confluent_kafka import Consumer as CKConsumer
    from confluent_kafka import TopicPartition as CKTopicPartition

    consumer = CKConsumer(
        {"bootstrap.servers": bootstrap, "group.id": f"{topic}-g", "enable.auto.commit": False}
    )
    try:
        consumer.commit(offsets=[CKTopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        consumer.close()


async def test_internal_topics_only_on_request(bootstrap: str, topic: str, broker: Any) -> None:
    from kafkakit.consumer import Consumer

    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(topic)])
        if broker.kind == "kafka":
            await asyncio.to_thread(commit_with_confluent, bootstrap, topic)
            assert "__consumer_offsets" in await admin.list_topics(include_internal=True)
        every = await admin.list_topics(include_internal=True)
        public = await admin.list_topics()
        assert topic in public and public <= every
        assert "__consumer_offsets" not in public
        async with Consumer(bootstrap_servers=bootstrap) as consumer:
            assert topic in await consumer.topics()
            assert "__consumer_offsets" not in await consumer.topics()
        await admin.delete_topics([topic])


async def test_lifecycle_errors() -> None:
    admin = Admin(bootstrap_servers="127.0.0.1:1")
    with pytest.raises(IllegalStateError):
        await admin.list_topics()
    with pytest.raises(KafkaConfigError) as info:
        Admin(bootstrap_servers="127.0.0.1:1", request_timeout_ms=0)
    assert info.value.setting == "request_timeout_ms"
