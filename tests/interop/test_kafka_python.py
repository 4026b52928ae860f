"""kafka-python (3.x) against broker_min: producer codecs/acks, assign-consumer, ListOffsets, admin."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition  # type: ignore[attr-defined]
from kafka.admin import KafkaAdminClient
from kafka.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError

from .checks import (
    CODEC_IDS,
    CODECS,
    assert_same,
    batch_codecs,
    binary_records,
    fetch_raw_records,
    text_records,
)
from .clients import consume_kafka_python, now_ms, produce_kafka_python
from .conftest import TopicFactory

pytestmark = pytest.mark.interop


def _codec_available(codec: str) -> None:
    import kafka.codec

    if codec == "snappy" and not kafka.codec.has_snappy():
        pytest.skip("kafka-python's snappy codec needs the python-snappy package, which is not installed")


@pytest.mark.parametrize("codec", CODECS)
def test_each_codec_round_trips_and_is_stored_as_sent(
    bootstrap: str, new_topic: TopicFactory, codec: str
) -> None:
    _codec_available(codec)
    topic = new_topic(partitions=3)
    records = text_records(200, 3, timestamps=now_ms() - 10_000)
    produce_kafka_python(bootstrap, topic, records, codec=codec)
    assert_same(records, consume_kafka_python(bootstrap, topic, range(3), len(records)), label=codec)
    codecs = batch_codecs(fetch_raw_records(bootstrap, topic, 0))
    assert codecs and set(codecs) == {CODEC_IDS[codec]}, f"stored batches carry codecs {codecs}"


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_each_acks_level_delivers_everything(bootstrap: str, new_topic: TopicFactory, acks: object) -> None:
    topic = new_topic(partitions=2)
    records = text_records(200, 2, timestamps=now_ms() - 10_000)
    produce_kafka_python(bootstrap, topic, records, acks=acks)
    assert_same(records, consume_kafka_python(bootstrap, topic, range(2), len(records)), label=f"acks={acks}")


def test_non_idempotent_producer_round_trips(bootstrap: str, new_topic: TopicFactory) -> None:
    """The same data path without InitProducerId (kafka-python's default producer is idempotent)."""
    topic = new_topic(partitions=2)
    records = text_records(200, 2, timestamps=now_ms() - 10_000)
    produce_kafka_python(bootstrap, topic, records, codec="snappy", extra={"enable_idempotence": False})
    assert_same(
        records, consume_kafka_python(bootstrap, topic, range(2), len(records)), label="no idempotence"
    )


def test_binary_keys_values_and_headers_round_trip(bootstrap: str, new_topic: TopicFactory) -> None:
    topic = new_topic(partitions=2)
    records = binary_records(2, now_ms() - 10_000)
    produce_kafka_python(bootstrap, topic, records, codec="zstd")
    assert_same(records, consume_kafka_python(bootstrap, topic, range(2), len(records)), label="binary")


def test_offsets_and_seek(bootstrap: str, new_topic: TopicFactory) -> None:
    topic = new_topic(partitions=1)
    base = now_ms() - 100_000
    records = [r.__class__(0, r.key, r.value, r.headers, base + 1000 * i)
               for i, r in enumerate(text_records(20, 1, timestamps=None))]  # fmt: skip
    produce_kafka_python(bootstrap, topic, records, codec="gzip")
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: 20}
        found = consumer.offsets_for_times({tp: base + 4500})[tp]
        assert found is not None and (found.offset, found.timestamp) == (5, base + 5000)
        assert consumer.offsets_for_times({tp: base + 99_000})[tp] is None
        consumer.seek(tp, 13)
        got: list[Any] = []
        deadline = time.monotonic() + 20
        while len(got) < 7 and time.monotonic() < deadline:
            got += consumer.poll(timeout_ms=500).get(tp, [])
        assert [m.offset for m in got] == list(range(13, 20))
        assert [m.value for m in got] == [r.value for r in records[13:]]
    finally:
        consumer.close()


def test_admin_create_list_describe_delete(bootstrap: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    name = f"interop-kpadmin-{now_ms() % 10**8}"
    try:
        admin.create_topics({name: {"num_partitions": 3, "replication_factor": 1}}, wait_for_metadata=True)
        assert name in admin.list_topics()
        (described,) = admin.describe_topics([name])
        assert described["error_code"] == 0
        assert sorted(p["partition_index"] for p in described["partitions"]) == [0, 1, 2]

        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics({name: {"num_partitions": 3, "replication_factor": 1}})

        admin.delete_topics([name])
        deadline = time.monotonic() + 15
        while name in admin.list_topics() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert name not in admin.list_topics()
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.delete_topics([name])
    finally:
        admin.close()
