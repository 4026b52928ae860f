"""Every client's records, read back byte for byte by every other client (producer x consumer)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from .checks import CODEC_IDS, assert_same, batch_codecs, fetch_raw_records, text_records
from .clients import CONSUMERS, PRODUCERS, Rec, kcat_binary, now_ms
from .conftest import create_topic_confluent

pytestmark = pytest.mark.interop

RECORDS = 200
PARTITIONS = 3
# A different codec per producer, so every consumer also decodes every codec some other client wrote.
PRODUCER_CODEC = {"confluent": "lz4", "aiokafka": "zstd", "kafka-python": "gzip", "kcat": "snappy"}


@dataclass(frozen=True)
class Produced:
    topic: str
    records: list[Rec]
    ts_window: tuple[int, int]


def _produce_once(bootstrap: str, producer: str) -> Produced:
    topic = f"cross-{producer}-{now_ms() % 10**8}"
    create_topic_confluent(bootstrap, topic, PARTITIONS)
    # kcat cannot set record timestamps: its records get CreateTime from librdkafka.
    base_ts = None if producer == "kcat" else now_ms() - 60_000
    records = text_records(RECORDS, PARTITIONS, timestamps=base_ts)
    before = now_ms()
    PRODUCERS[producer](bootstrap, topic, records, codec=PRODUCER_CODEC[producer])  # type: ignore[call-arg]
    return Produced(topic, records, (before, now_ms()))


@pytest.fixture(scope="module")
def produced(bootstrap: str) -> Callable[[str], Produced]:
    """``produced(name)``: one topic written by that producer, produced once per module."""
    cache: dict[str, Produced] = {}

    def get(producer: str) -> Produced:
        if producer not in cache:
            cache[producer] = _produce_once(bootstrap, producer)
        return cache[producer]

    return get


def _needs_kcat(*names: str) -> None:
    if "kcat" in names and kcat_binary() is None:
        pytest.skip("neither kcat nor kafkacat is on PATH (apt-get install kcat; .ci/run installs it)")


@pytest.mark.parametrize(("producer", "consumer"), list(itertools.product(PRODUCERS, CONSUMERS)))
def test_consumer_reads_what_producer_wrote(
    bootstrap: str, produced: Callable[[str], Produced], producer: str, consumer: str
) -> None:
    _needs_kcat(producer, consumer)
    batch = produced(producer)
    got = CONSUMERS[consumer](bootstrap, batch.topic, range(PARTITIONS), len(batch.records))
    assert_same(batch.records, got, ts_window=batch.ts_window, label=f"{producer} -> {consumer}")


@pytest.mark.parametrize("producer", ["confluent", "aiokafka", "kafka-python", "kcat"])
def test_broker_keeps_the_producers_codec(
    bootstrap: str, produced: Callable[[str], Produced], producer: str
) -> None:
    """The stored batches carry the codec the producer chose (topic compression.type=producer)."""
    _needs_kcat(producer)
    batch = produced(producer)
    for partition in range(PARTITIONS):
        codecs = batch_codecs(fetch_raw_records(bootstrap, batch.topic, partition))
        assert codecs, f"{producer}: no batches in partition {partition}"
        assert set(codecs) == {CODEC_IDS[PRODUCER_CODEC[producer]]}, (
            f"{producer}: partition {partition}: {codecs}"
        )
