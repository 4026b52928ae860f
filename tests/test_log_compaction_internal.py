"""Internal topics stay small: broker_min's cleaner compacts __consumer_offsets, and the
group coordinator still finds the latest committed offsets after a restart."""

from __future__ import annotations

import time
from pathlib import Path

from kafkakit import Admin, Consumer, NewTopic, TopicPartition
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
