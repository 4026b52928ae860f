"""Log compaction end to end: the same keyed input, compacted by broker_min's cleaner and by
Apache Kafka's, reads back the same records (offsets, keys, values) over real sockets."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kafkakit import Admin, Consumer, NewTopic, Producer, TopicPartition
from kafkakit.errors import KafkaError
from kafkakit.records.header import iter_batch_headers

from tests.brokers import BrokerMinServer
from tests.conftest import BROKER_KINDS

KINDS = [kind for kind in BROKER_KINDS if kind in ("broker_min", "kafka")]
SEGMENT_MS = 1000
DELETE_RETENTION_MS = 1000
TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.ms": str(SEGMENT_MS),
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": str(DELETE_RETENTION_MS),
}
Record = tuple[int, bytes | None, bytes | None]
RESULTS: dict[str, dict[str, list[Record]]] = {}


@pytest.fixture(scope="module")
def fast_cleaner_broker_min(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerMinServer]:
    """broker_min whose cleaner looks for work every 100 ms (as tests/brokers.py's Kafka: 500 ms)."""
    server = BrokerMinServer(tmp_path_factory.mktemp("compaction"), log_cleaner_backoff_ms=100)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module", params=KINDS)
def compaction_broker(request: pytest.FixtureRequest) -> Any:
    if request.param == "broker_min":
        return request.getfixturevalue("fast_cleaner_broker_min")
    return request.getfixturevalue("kafka_broker")


async def _create(bootstrap: str, topic: str) -> None:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, num_partitions=1, configs=TOPIC_CONFIGS)])


async def _read_all(bootstrap: str, topic: str, end: int) -> list[Record]:
    tp = TopicPartition(topic, 0)
    out: list[Record] = []
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            for batch in (await consumer.getmany(timeout_ms=300)).values():
                out.extend((r.offset, r.key, r.value) for r in batch)
            if out and out[-1][0] >= end - 1:
                break
    return out


async def _wait_compacted(
    bootstrap: str, topic: str, end: int, done: Any, timeout: float = 60.0
) -> list[Record]:
    """Read until ``done(records)`` holds (the cleaner ran), or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    records: list[Record] = []
    while time.monotonic() < deadline:
        records = await _read_all(bootstrap, topic, end)
        if done(records):
            return records
        await asyncio.sleep(0.5)
    raise AssertionError(f"not compacted within {timeout}s: {records}")


def _model(written: list[Record], below: int, dead_tombstones: set[bytes]) -> list[Record]:
    """Kafka's rules: below ``below`` the latest record per key, minus expired tombstones."""
    latest: dict[bytes, Record] = {}
    for record in written:
        if record[0] < below and record[1] is not None:
            latest[record[1]] = record
    kept = [r for r in latest.values() if not (r[2] is None and r[1] in dead_tombstones)]
    return sorted(kept) + [r for r in written if r[0] >= below]


def _confluent_produce(bootstrap: str, topic: str, items: list[tuple[bytes, bytes | None]]) -> list[int]:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 0, "enable.idempotence": True}
    )
    offsets: list[int] = []
    errors: list[Any] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            offsets.append(msg.offset())

    for key, value in items:
        producer.produce(topic, key=key, value=value, partition=0, on_delivery=report)
        producer.flush(10)
    assert not errors, errors
    return offsets


async def test_compaction_matches_kafka(compaction_broker: Any) -> None:
    bootstrap = compaction_broker.bootstrap_servers
    kind = "broker_min" if isinstance(compaction_broker, BrokerMinServer) else "kafka"
    topic = f"compaction-{uuid.uuid4().hex[:8]}"
    await _create(bootstrap, topic)
    written: list[Record] = []
    # Phase 1 (kafkakit): 20 keys overwritten, a few deleted; then a record that rolls the segment.
    async with Producer(bootstrap_servers=bootstrap, linger_ms=0) as producer:
        for i in range(200):
            key = f"key-{i % 20}".encode()
            value = None if i in (185, 191, 197) else f"v1-{i}".encode()
            meta = await producer.send_and_wait(topic, value=value, key=key, partition=0)
            written.append((meta.offset, key, value))
        await asyncio.sleep(SEGMENT_MS / 1000 + 0.3)
        meta = await producer.send_and_wait(topic, value=b"1", key=b"__roll-1", partition=0)
        written.append((meta.offset, b"__roll-1", b"1"))
    roll1 = meta.offset
    expected1 = _model(written, roll1, set())
    phase1 = await _wait_compacted(bootstrap, topic, roll1 + 1, lambda rs: len(rs) == len(expected1))
    assert phase1 == expected1
    assert sum(r[2] is None for r in phase1) == 3  # the tombstones are kept for now

    # Phase 2 (confluent-kafka), after delete.retention.ms: phase 1's tombstones may now go.
    await asyncio.sleep(DELETE_RETENTION_MS / 1000 + 0.5)
    items = [(f"key-{i % 7}".encode(), None if i == 30 else f"v2-{i}".encode()) for i in range(40)]
    offsets = await asyncio.to_thread(_confluent_produce, bootstrap, topic, items)
    written.extend((o, k, v) for o, (k, v) in zip(offsets, items, strict=True))
    await asyncio.sleep(SEGMENT_MS / 1000 + 0.3)
    roll2 = (await asyncio.to_thread(_confluent_produce, bootstrap, topic, [(b"__roll-2", b"2")]))[0]
    written.append((roll2, b"__roll-2", b"2"))
    dead = {r[1] for r in written if r[2] is None and r[0] < roll1 and r[1] is not None}
    expected2 = _model(written, roll2, dead)
    phase2 = await _wait_compacted(bootstrap, topic, roll2 + 1, lambda rs: len(rs) == len(expected2), 90)
    assert phase2 == expected2
    offsets2 = [r[0] for r in phase2]
    assert offsets2 == sorted(offsets2) and set(offsets2) <= {r[0] for r in written}
    RESULTS[kind] = {"phase1": phase1, "phase2": phase2}
    # The second broker of the run compares its records with the first one's, offsets included.
    other = RESULTS.get("kafka" if kind == "broker_min" else "broker_min")
    if other is not None:
        assert other == RESULTS[kind]


async def test_record_without_key_refused(compaction_broker: Any) -> None:
    bootstrap = compaction_broker.bootstrap_servers
    topic = f"compaction-nokey-{uuid.uuid4().hex[:8]}"
    await _create(bootstrap, topic)
    async with Producer(bootstrap_servers=bootstrap, linger_ms=0) as producer:
        with pytest.raises(KafkaError) as info:
            await producer.send_and_wait(topic, value=b"no key", partition=0)
        assert getattr(info.value, "code", None) == 87  # INVALID_RECORD
        ok = await producer.send_and_wait(topic, value=b"keyed", key=b"k", partition=0)
        assert ok.offset == 0


async def test_aborted_transactions_compacted_like_kafka(compaction_broker: Any) -> None:
    """Aborted transactional records are removed by the first pass; committed ones follow
    the latest-per-key rule, on both brokers alike (read_uncommitted sees the log itself)."""
    bootstrap = compaction_broker.bootstrap_servers
    kind = "broker_min" if isinstance(compaction_broker, BrokerMinServer) else "kafka"
    topic = f"compaction-txn-{uuid.uuid4().hex[:8]}"
    await _create(bootstrap, topic)
    written: list[Record] = []
    aborted: list[Record] = []
    txn_id = f"compaction-{uuid.uuid4().hex[:8]}"
    async with Producer(bootstrap_servers=bootstrap, transactional_id=txn_id, linger_ms=0) as producer:
        await producer.init_transactions()
        for name, keys, commit in (("a", range(5), True), ("b", range(10), False), ("c", range(5, 8), True)):
            producer.begin_transaction()
            sent = []
            for i in keys:
                key, value = f"t{i}".encode(), f"{name}-{i}".encode()
                meta = await producer.send_and_wait(topic, value=value, key=key, partition=0)
                sent.append((meta.offset, key, value))
            if commit:
                await producer.commit_transaction()
                written.extend(sent)
            else:
                await producer.abort_transaction()
                aborted.extend(sent)
    async with Producer(bootstrap_servers=bootstrap, linger_ms=0) as plain:
        for i in range(6):
            meta = await plain.send_and_wait(
                topic, value=f"p-{i}".encode(), key=f"p{i % 3}".encode(), partition=0
            )
            written.append((meta.offset, f"p{i % 3}".encode(), f"p-{i}".encode()))
        await asyncio.sleep(SEGMENT_MS / 1000 + 0.3)
        meta = await plain.send_and_wait(topic, value=b"1", key=b"__roll", partition=0)
        written.append((meta.offset, b"__roll", b"1"))
    roll = meta.offset
    expected = _model(written, roll, set())
    assert len(aborted) == 10
    records = await _wait_compacted(bootstrap, topic, roll + 1, lambda rs: len(rs) == len(expected))
    assert records == expected
    assert not any(r[2] is not None and r[2].startswith(b"b-") for r in records)  # aborted data gone
    RESULTS[f"txn-{kind}"] = {"records": records}
    other = RESULTS.get("txn-kafka" if kind == "broker_min" else "txn-broker_min")
    if other is not None:
        assert [r[1:] for r in other["records"]] == [r[1:] for r in records]


def _confluent_consume(bootstrap: str, topic: str, end: int) -> list[Record]:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False}
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    out: list[Record] = []
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline and not (out and out[-1][0] >= end - 1):
            msg = consumer.poll(0.3)
            if msg is not None and msg.error() is None:
                out.append((msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    return out


async def test_empty_batch_kept_for_a_producer_reads_back_on_both_clients(compaction_broker: Any) -> None:
    """An idempotent producer whose only record was superseded keeps an empty batch in the
    log (its sequence state); consumers step over it."""
    bootstrap = compaction_broker.bootstrap_servers
    topic = f"compaction-empty-{uuid.uuid4().hex[:8]}"
    await _create(bootstrap, topic)
    written: list[Record] = []
    for i in range(3):  # three idempotent producers, each writing key "a" once
        async with Producer(bootstrap_servers=bootstrap, linger_ms=0, enable_idempotence=True) as producer:
            meta = await producer.send_and_wait(topic, value=b"a-%d" % i, key=b"a", partition=0)
            written.append((meta.offset, b"a", b"a-%d" % i))
    async with Producer(bootstrap_servers=bootstrap, linger_ms=0) as producer:
        await asyncio.sleep(SEGMENT_MS / 1000 + 0.3)
        meta = await producer.send_and_wait(topic, value=b"r", key=b"__roll", partition=0)
        written.append((meta.offset, b"__roll", b"r"))
    expected = _model(written, meta.offset, set())
    records = await _wait_compacted(bootstrap, topic, meta.offset + 1, lambda rs: len(rs) == len(expected))
    assert records == expected  # [(2, a, a-2), roll]: offsets 0 and 1 are empty batches now
    assert await asyncio.to_thread(_confluent_consume, bootstrap, topic, meta.offset + 1) == expected
    if isinstance(compaction_broker, BrokerMinServer):
        stored = []
        for path in sorted((compaction_broker.data_dir / f"{topic}-0").glob("*.log")):
            stored += [(h.base_offset, h.record_count) for _, h in iter_batch_headers(path.read_bytes())]
        assert stored[:3] == [(0, 0), (1, 0), (2, 1)]  # the empty batches are really there
