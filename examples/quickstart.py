"""kafkakit in one file: an embedded broker, a topic, a producer and a consumer.

    python examples/quickstart.py

Starts broker_min in a temporary directory, creates a 3-partition topic,
produces 5,000 keyed records with headers, reads them all back and checks
that every record arrived once, in order per partition.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections import defaultdict

from kafkakit import Admin, Consumer, NewTopic, Producer, TopicPartition
from kafkakit.broker import Broker

RECORDS = 5000
TOPIC = "quickstart"


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="kafkakit-quickstart-") as data_dir:
        async with Broker(data_dir) as broker:
            print(f"broker_min listening on {broker.bootstrap_servers} (data in {data_dir})")
            bootstrap = broker.bootstrap_servers

            async with Admin(bootstrap_servers=bootstrap) as admin:
                await admin.create_topics([NewTopic(TOPIC, num_partitions=3)])
            print(f"created topic {TOPIC!r} with 3 partitions")

            started = time.perf_counter()
            async with Producer(bootstrap_servers=bootstrap, acks="all", compression_type="lz4") as producer:
                futures = [
                    await producer.send(
                        TOPIC,
                        value=f"order {i}".encode(),
                        key=f"customer-{i % 50}".encode(),
                        headers=[("source", b"quickstart"), ("seq", str(i).encode())],
                    )
                    for i in range(RECORDS)
                ]
                metadata = await asyncio.gather(*futures)
            per_partition = defaultdict(int)
            for md in metadata:
                per_partition[md.partition] += 1
            print(f"produced {RECORDS} records in {time.perf_counter() - started:.2f}s: {dict(sorted(per_partition.items()))} per partition")

            partitions = [TopicPartition(TOPIC, p) for p in range(3)]
            seen: dict[int, list[int]] = defaultdict(list)
            keys_by_partition: dict[str, set[int]] = defaultdict(set)
            async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
                consumer.assign(partitions)
                count = 0
                while count < RECORDS:
                    batches = await consumer.getmany(timeout_ms=2000)
                    if not batches:
                        raise SystemExit(f"stalled after {count} records")
                    for tp, records in batches.items():
                        for record in records:
                            assert dict(record.headers)["source"] == b"quickstart"
                            seen[tp.partition].append(int(dict(record.headers)["seq"] or b"-1"))
                            keys_by_partition[record.key.decode()].add(tp.partition)
                        count += len(records)
            assert sorted(s for seqs in seen.values() for s in seqs) == list(range(RECORDS)), "every record exactly once"
            assert all(seqs == sorted(seqs) for seqs in seen.values()), "in order within each partition"
            assert all(len(parts) == 1 for parts in keys_by_partition.values()), "one partition per key"
            print(f"consumed {count} records: each exactly once, in order per partition, each key on one partition")


if __name__ == "__main__":
    asyncio.run(main())
