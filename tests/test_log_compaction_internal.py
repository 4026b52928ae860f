"""Internal topics stay small: broker_min's cleaner compacts __consumer_offsets and
__transaction_state, and the coordinators still find their latest state after a restart."""

from __future__ import annotations

import time
from pathlib import Path

from kafkakit import Admin, Consumer, NewTopic, Producer, TopicPartition
from kafkakit.records.header import iter_batch_headers

from tests.brokers import BrokerMinServer

OFFSETS_DIR = "__consumer_offsets-0"


def _stored_records(directory: Path) -> int:
    count = 0
    for path in sorted(directory.glob("*.log")):
        data = path.read_bytes()
        count += sum(header.record_count for _, header in iter_batch_headers(data))
    return count


async def _commit_many(bootstrap: str, tp: TopicPartition, count: int) -> None:
    async with Consumer(
        bootstrap_servers=bootstrap, group_id="compacted-group", enable_auto_commit=False
    ) as consumer:
        for offset in range(1, count + 1):
            await consumer.commit({tp: offset})


async def _committed(bootstrap: str, tp: TopicPartition) -> int | None:
    async with Consumer(
        bootstrap_servers=bootstrap, group_id="compacted-group", enable_auto_commit=False
    ) as consumer:
        return await consumer.committed(tp)


async def test_consumer_offsets_compacted_and_replayed(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    server = BrokerMinServer(data_dir, log_cleaner_backoff_ms=100)
    server.start()
    tp = TopicPartition("compacted-offsets-data", 0)
    try:
        async with Admin(bootstrap_servers=server.bootstrap_servers) as admin:
            await admin.create_topics([NewTopic(tp.topic, num_partitions=1)])
            await _commit_many(server.bootstrap_servers, tp, 1)
            # Small segments so that this test's commits fill closed, cleanable segments.
            await admin.incremental_alter_configs(
                "__consumer_offsets",
                {"segment.bytes": ("set", "4096"), "min.cleanable.dirty.ratio": ("set", "0.01")},
            )
        await _commit_many(server.bootstrap_servers, tp, 600)
        directory = data_dir / OFFSETS_DIR
        deadline = time.monotonic() + 30
        stored = _stored_records(directory)
        while stored > 150 and time.monotonic() < deadline:
            time.sleep(0.2)
            stored = _stored_records(directory)
        assert stored <= 150, f"{stored} records still stored for 601 commits"
        assert (data_dir / "cleaner-offset-checkpoint").read_text().count("__consumer_offsets 0 ") == 1
    finally:
        server.stop()
    restarted = BrokerMinServer(data_dir, log_cleaner_backoff_ms=100)
    restarted.start()
    try:
        assert await _committed(restarted.bootstrap_servers, tp) == 600
    finally:
        restarted.stop()


async def _transactions(bootstrap: str, topic: str, count: int) -> None:
    async with Producer(
        bootstrap_servers=bootstrap, transactional_id="compacted-txn", linger_ms=0
    ) as producer:
        await producer.init_transactions()
        for i in range(count):
            producer.begin_transaction()
            await producer.send_and_wait(topic, value=b"%d" % i, key=b"k", partition=0)
            await producer.commit_transaction()


async def test_transaction_state_compacted_and_replayed(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    topic = "compacted-txn-data"
    server = BrokerMinServer(data_dir, log_cleaner_backoff_ms=100)
    server.start()
    try:
        async with Admin(bootstrap_servers=server.bootstrap_servers) as admin:
            await admin.create_topics([NewTopic(topic, num_partitions=1)])
            await _transactions(server.bootstrap_servers, topic, 1)
            await admin.incremental_alter_configs(
                "__transaction_state",
                {"segment.bytes": ("set", "4096"), "min.cleanable.dirty.ratio": ("set", "0.01")},
            )
        await _transactions(server.bootstrap_servers, topic, 150)
        directory = data_dir / "__transaction_state-0"
        deadline = time.monotonic() + 30
        stored = _stored_records(directory)
        while stored > 100 and time.monotonic() < deadline:
            time.sleep(0.2)
            stored = _stored_records(directory)
        assert stored <= 100, f"{stored} transaction state records still stored for 151 transactions"
    finally:
        server.stop()
    restarted = BrokerMinServer(data_dir, log_cleaner_backoff_ms=100)
    restarted.start()
    try:
        await _transactions(restarted.bootstrap_servers, topic, 2)  # the id's state was replayed
        tp = TopicPartition(topic, 0)
        async with Consumer(
            bootstrap_servers=restarted.bootstrap_servers,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
        ) as consumer:
            consumer.assign([tp])
            values: list[bytes] = []
            deadline = time.monotonic() + 10
            while len(values) < 153 and time.monotonic() < deadline:
                for batch in (await consumer.getmany(timeout_ms=300)).values():
                    values.extend(r.value for r in batch)
        assert len(values) == 153 and values[-1] == b"1"
    finally:
        restarted.stop()
