"""DescribeTopicPartitions (key 75): the same answers from broker_min and Apache Kafka."""

from __future__ import annotations

from typing import Any

from kafkakit import Admin, NewTopic
from kio.schema.errors import ErrorCode

from tests.brokers import new_topic_name
from tests.raw_protocol import RawClient, req, sub

KEY = 75


def _request(topics: list[str], limit: int = 2000, cursor: tuple[str, int] | None = None) -> Any:
    return req(
        KEY, 0,
        topics=tuple(sub(KEY, 0, "TopicRequest", name=t) for t in topics),
        response_partition_limit=limit,
        cursor=None if cursor is None else sub(KEY, 0, "Cursor", topic_name=cursor[0], partition_index=cursor[1]),
    )  # fmt: skip


def _pages(response: Any) -> list[tuple[str, list[int]]]:
    return [(t.name, [int(p.partition_index) for p in t.partitions]) for t in response.topics]


async def test_pages_follow_the_cursor_across_topics(broker: Any) -> None:
    a, b = sorted([new_topic_name("dtp-a"), new_topic_name("dtp-b")])
    async with Admin(bootstrap_servers=broker.bootstrap_servers) as admin:
        await admin.create_topics([NewTopic(a, 3, 1), NewTopic(b, 2, 1)])
    client = await RawClient.connect(broker)
    try:
        first = await client.call(_request([b, a], limit=2))
        assert _pages(first) == [(a, [0, 1])]
        assert (first.next_cursor.topic_name, first.next_cursor.partition_index) == (a, 2)
        second = await client.call(_request([a, b], limit=2, cursor=(a, 2)))
        assert _pages(second) == [(a, [2]), (b, [0])]
        assert (second.next_cursor.topic_name, second.next_cursor.partition_index) == (b, 1)
        last = await client.call(_request([a, b], limit=2, cursor=(b, 1)))
        assert _pages(last) == [(b, [1])] and last.next_cursor is None
        whole = await client.call(_request([a, b]))
        assert _pages(whole) == [(a, [0, 1, 2]), (b, [0, 1])] and whole.next_cursor is None
        for topic in whole.topics:
            assert topic.error_code == ErrorCode.none and not topic.is_internal
            for p in topic.partitions:
                assert p.leader_id >= 0 and list(p.isr_nodes) == list(p.replica_nodes) == [p.leader_id]
                assert p.leader_epoch >= 0 and list(p.offline_replicas) == []
    finally:
        client.close()


async def test_unknown_topics_and_a_stray_cursor_are_refused(broker: Any) -> None:
    known = new_topic_name("dtp-known")
    async with Admin(bootstrap_servers=broker.bootstrap_servers) as admin:
        await admin.create_topics([NewTopic(known, 1, 1)])
    missing = new_topic_name("dtp-missing")
    client = await RawClient.connect(broker)
    try:
        response = await client.call(_request([missing, known]))
        codes = {t.name: t.error_code for t in response.topics}
        assert codes == {missing: ErrorCode.unknown_topic_or_partition, known: ErrorCode.none}
        stray = await client.call(_request([known], cursor=(missing, 0)))
        assert [t.error_code for t in stray.topics] == [ErrorCode.invalid_request]
        listed = await client.call(_request([]))
        assert known in {t.name for t in listed.topics}
    finally:
        client.close()
