"""aiokafka against broker_min: producer codecs (send/send_and_wait, send_batch), assign-consumer, admin."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from .checks import (
    CODEC_IDS,
    CODECS,
    assert_same,
    batch_codecs,
    binary_records,
    fetch_raw_records,
    text_records,
)
from .clients import consume_aiokafka, now_ms, produce_aiokafka
from .conftest import TopicFactory

pytestmark = pytest.mark.interop

TOPIC_ALREADY_EXISTS = 36
UNKNOWN_TOPIC_OR_PARTITION = 3


@pytest.mark.parametrize("codec", CODECS)
def test_each_codec_round_trips_and_is_stored_as_sent(
    bootstrap: str, new_topic: TopicFactory, codec: str
) -> None:
    topic = new_topic(partitions=3)
    records = text_records(200, 3, timestamps=now_ms() - 10_000)
    produce_aiokafka(bootstrap, topic, records, codec=codec)
    assert_same(records, consume_aiokafka(bootstrap, topic, range(3), len(records)), label=codec)
    codecs = batch_codecs(fetch_raw_records(bootstrap, topic, 0))
    assert codecs and set(codecs) == {CODEC_IDS[codec]}, f"stored batches carry codecs {codecs}"


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_send_batch_round_trips(bootstrap: str, new_topic: TopicFactory, codec: str) -> None:
    topic = new_topic(partitions=2)
    records = text_records(200, 2, timestamps=now_ms() - 10_000)
    produce_aiokafka(bootstrap, topic, records, codec=codec, batch_api=True)
    assert_same(
        records, consume_aiokafka(bootstrap, topic, range(2), len(records)), label=f"send_batch {codec}"
    )


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_each_acks_level_delivers_everything(bootstrap: str, new_topic: TopicFactory, acks: object) -> None:
    topic = new_topic(partitions=2)
    records = text_records(200, 2, timestamps=now_ms() - 10_000)
    produce_aiokafka(bootstrap, topic, records, acks=acks)
    assert_same(records, consume_aiokafka(bootstrap, topic, range(2), len(records)), label=f"acks={acks}")


def test_binary_keys_values_and_headers_round_trip(bootstrap: str, new_topic: TopicFactory) -> None:
    topic = new_topic(partitions=2)
    records = binary_records(2, now_ms() - 10_000)
    produce_aiokafka(bootstrap, topic, records, codec="gzip")
    assert_same(records, consume_aiokafka(bootstrap, topic, range(2), len(records)), label="binary")


async def test_offsets_and_seek(bootstrap: str, new_topic: TopicFactory) -> None:
    """ListOffsets (beginning/end/times) and Fetch from an offset in the middle of a batch."""
    topic = new_topic(partitions=1)
    base = now_ms() - 100_000
    records = [r.__class__(0, r.key, r.value, r.headers, base + 1000 * i)
               for i, r in enumerate(text_records(20, 1, timestamps=None))]  # fmt: skip
    await asyncio.to_thread(produce_aiokafka, bootstrap, topic, records, codec="lz4")
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        assert await consumer.beginning_offsets([tp]) == {tp: 0}
        assert await consumer.end_offsets([tp]) == {tp: 20}
        found = await consumer.offsets_for_times({tp: base + 4500})
        assert found[tp] is not None and (found[tp].offset, found[tp].timestamp) == (5, base + 5000)
        assert (await consumer.offsets_for_times({tp: base + 99_000}))[tp] is None
        consumer.seek(tp, 13)
        got: list[Any] = []
        while len(got) < 7:
            got += (await consumer.getmany(tp, timeout_ms=5000)).get(tp, [])
        assert [m.offset for m in got] == list(range(13, 20))
        assert [m.value for m in got] == [r.value for r in records[13:]]
    finally:
        await consumer.stop()


async def test_admin_create_list_delete(bootstrap: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    name = f"interop-aioadmin-{now_ms() % 10**8}"
    try:
        created = await admin.create_topics([NewTopic(name, num_partitions=2, replication_factor=1)])
        assert [(t[0], t[1]) for t in created.topic_errors] == [(name, 0)]
        assert name in await _topics_when(admin, lambda names: name in names)
        (described,) = await admin.describe_topics([name])
        assert described["error_code"] == 0
        assert sorted(p["partition"] for p in described["partitions"]) == [0, 1]

        again = await admin.create_topics([NewTopic(name, num_partitions=2, replication_factor=1)])
        assert [(t[0], t[1]) for t in again.topic_errors] == [(name, TOPIC_ALREADY_EXISTS)]

        deleted = await admin.delete_topics([name])
        assert [tuple(t)[:2] for t in deleted.topic_error_codes] == [(name, 0)]
        assert name not in await _topics_when(admin, lambda names: name not in names)
        gone = await admin.delete_topics([name])
        assert [tuple(t)[:2] for t in gone.topic_error_codes] == [(name, UNKNOWN_TOPIC_OR_PARTITION)]
    finally:
        await admin.close()


async def _topics_when(admin: AIOKafkaAdminClient, done: object, timeout: float = 15.0) -> list[str]:
    """list_topics until ``done(names)`` holds (topic creation/deletion propagates asynchronously)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        names: list[str] = await admin.list_topics()
        if done(names) or loop.time() > deadline:  # type: ignore[operator]
            return names
        await asyncio.sleep(0.1)
