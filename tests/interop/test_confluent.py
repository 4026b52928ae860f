"""confluent-kafka (librdkafka) against broker_min: producer codecs/acks, assign-consumer, admin, ListOffsets."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from .checks import (
    CODEC_IDS,
    CODECS,
    assert_same,
    batch_codecs,
    binary_records,
    fetch_raw_records,
    text_records,
)
from .clients import consume_confluent, now_ms, produce_confluent
from .conftest import TopicFactory

pytestmark = pytest.mark.interop


@pytest.mark.parametrize("codec", CODECS)
def test_each_codec_round_trips_and_is_stored_as_sent(
    bootstrap: str, new_topic: TopicFactory, codec: str
) -> None:
    topic = new_topic(partitions=3)
    records = text_records(200, 3, timestamps=now_ms() - 10_000)
    produce_confluent(bootstrap, topic, records, codec=codec)
    assert_same(records, consume_confluent(bootstrap, topic, range(3), len(records)), label=codec)
    codecs = batch_codecs(fetch_raw_records(bootstrap, topic, 0))
    assert codecs and set(codecs) == {CODEC_IDS[codec]}, f"stored batches carry codecs {codecs}"


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_each_acks_level_delivers_everything(bootstrap: str, new_topic: TopicFactory, acks: str) -> None:
    topic = new_topic(partitions=2)
    records = text_records(200, 2, timestamps=now_ms() - 10_000)
    delivered = produce_confluent(bootstrap, topic, records, acks=acks)
    assert len(delivered) == len(records)
    if acks != "0":  # acks=0 has no response, so librdkafka reports offset -1 (OFFSET_INVALID)
        per_partition = {p: sorted(o for q, o in delivered if q == p) for p in (0, 1)}
        assert per_partition == {0: list(range(100)), 1: list(range(100))}
    assert_same(records, consume_confluent(bootstrap, topic, range(2), len(records)), label=f"acks={acks}")


def test_idempotent_producer_round_trips(bootstrap: str, new_topic: TopicFactory) -> None:
    """enable.idempotence needs InitProducerId and per-partition sequence numbers on Produce."""
    topic = new_topic(partitions=2)
    records = text_records(200, 2, timestamps=now_ms() - 10_000)
    produce_confluent(bootstrap, topic, records, codec="zstd", extra={"enable.idempotence": True})
    assert_same(records, consume_confluent(bootstrap, topic, range(2), len(records)), label="idempotent")


def test_binary_keys_values_and_headers_round_trip(bootstrap: str, new_topic: TopicFactory) -> None:
    topic = new_topic(partitions=2)
    records = binary_records(2, now_ms() - 10_000)
    produce_confluent(bootstrap, topic, records, codec="lz4")
    assert_same(records, consume_confluent(bootstrap, topic, range(2), len(records)), label="binary")


def test_consumer_starts_at_an_explicit_offset(bootstrap: str, new_topic: TopicFactory) -> None:
    from confluent_kafka import Consumer

    topic = new_topic(partitions=1)
    records = text_records(50, 1, timestamps=now_ms() - 10_000)
    produce_confluent(bootstrap, topic, records, codec="gzip")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "interop-explicit",
                         "enable.auto.commit": False})  # fmt: skip
    try:
        consumer.assign([TopicPartition(topic, 0, 37)])  # inside a compressed batch
        msgs: list[Any] = []
        deadline = time.monotonic() + 20
        while len(msgs) < 13 and time.monotonic() < deadline:
            msgs += [m for m in consumer.consume(100, timeout=0.5) if m.error() is None]
    finally:
        consumer.close()
    assert [m.offset() for m in msgs] == list(range(37, 50))
    assert [m.value() for m in msgs] == [r.value for r in records[37:]]


def test_get_watermark_offsets(bootstrap: str, new_topic: TopicFactory) -> None:
    from confluent_kafka import Consumer

    topic = new_topic(partitions=2)
    produce_confluent(bootstrap, topic, text_records(30, 1, timestamps=None))  # all into partition 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "interop-wm"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 30)
        assert consumer.get_watermark_offsets(TopicPartition(topic, 1), timeout=10) == (0, 0)
    finally:
        consumer.close()


def test_offsets_for_times(bootstrap: str, new_topic: TopicFactory) -> None:
    from confluent_kafka import Consumer

    topic = new_topic(partitions=1)
    base = now_ms() - 100_000
    records = [r.__class__(0, r.key, r.value, r.headers, base + 1000 * i)
               for i, r in enumerate(text_records(20, 1, timestamps=None))]  # fmt: skip
    produce_confluent(bootstrap, topic, records, codec="snappy")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "interop-oft"})
    try:

        def offset_for(ts: int) -> int:
            (tp,) = consumer.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=10)
            assert tp.error is None, tp.error
            return int(tp.offset)

        assert offset_for(base) == 0
        assert offset_for(base + 3000) == 3  # exact hit
        assert offset_for(base + 3500) == 4  # first record at or after the time
        assert offset_for(base - 5000) == 0
        assert offset_for(base + 1000 * 19) == 19
        assert offset_for(base + 1000 * 25) == -1  # none that late: Kafka answers offset -1 (OFFSET_END)
    finally:
        consumer.close()


def test_admin_create_list_delete(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    name = f"interop-admin-{now_ms() % 10**8}"
    admin.create_topics([NewTopic(name, 4, 1)], operation_timeout=10)[name].result(timeout=20)

    metadata = admin.list_topics(timeout=10)
    assert name in metadata.topics
    assert sorted(metadata.topics[name].partitions) == [0, 1, 2, 3]
    assert {p.leader for p in metadata.topics[name].partitions.values()} == {next(iter(metadata.brokers))}
    assert all(
        p.replicas == [p.leader] and p.isrs == [p.leader] for p in metadata.topics[name].partitions.values()
    )

    with pytest.raises(KafkaException) as again:
        admin.create_topics([NewTopic(name, 4, 1)], operation_timeout=10)[name].result(timeout=20)
    assert again.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS

    admin.delete_topics([name], operation_timeout=10)[name].result(timeout=20)
    deadline = time.monotonic() + 15
    while name in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.1)
    assert name not in admin.list_topics(timeout=10).topics

    with pytest.raises(KafkaException) as gone:
        admin.delete_topics([name], operation_timeout=10)[name].result(timeout=20)
    assert gone.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_admin_rejects_an_invalid_topic_name(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    name = "bad name!"  # only [a-zA-Z0-9._-] are legal
    with pytest.raises(KafkaException) as bad:
        admin.create_topics([NewTopic(name, 1, 1)], operation_timeout=10)[name].result(timeout=20)
    assert bad.value.args[0].code() == KafkaError.TOPIC_EXCEPTION  # INVALID_TOPIC_EXCEPTION (17)


def test_admin_creates_with_broker_default_partitions(bootstrap: str) -> None:
    """CreateTopics v4+ lets num_partitions / replication_factor be -1: the broker's defaults."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    name = f"interop-default-{now_ms() % 10**8}"
    admin.create_topics([NewTopic(name)], operation_timeout=10)[name].result(timeout=20)
    deadline = time.monotonic() + 10
    while name not in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(admin.list_topics(name, timeout=10).topics[name].partitions) >= 1
