"""Consume-transform-produce with exactly-once results, on an embedded broker.

    python examples/exactly_once_pipeline.py

Starts broker_min in a temporary directory, writes numbered orders to a
3-partition input topic, then runs the classic exactly-once loop: a group
consumer reading with ``isolation_level="read_committed"`` and a transactional
producer that, for each batch, writes the transformed records and commits the
consumer's offsets in the same transaction. One transaction is deliberately
aborted halfway (as a crash would) and its batch processed again. A
read_committed consumer then checks that the output holds every input exactly once.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections import Counter

from kafkakit import Admin, Consumer, NewTopic, Producer, TopicPartition
from kafkakit.broker import Broker

INPUT = "orders"
OUTPUT = "orders-enriched"
GROUP = "enricher"
PARTITIONS = 3
RECORDS = 1000
ABORT_BATCH = 3  # this batch's transaction fails once, to show the retry path


class SimulatedFailure(Exception):
    """Raised inside one transaction so that it aborts."""


def transform(value: bytes) -> bytes:
    return value.upper() + b" (enriched)"


async def produce_input(bootstrap: str) -> None:
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
        for i in range(RECORDS):
            await producer.send(INPUT, value=b"order %d" % i, key=b"%d" % i, partition=i % PARTITIONS)


async def rewind_to_committed(consumer: Consumer) -> None:
    """After an abort the batch must be processed again: back to the committed offsets."""
    for tp in consumer.assignment():
        committed = await consumer.committed(tp)
        if committed is not None:
            consumer.seek(tp, committed)
        else:
            await consumer.seek_to_beginning(tp)


async def run_pipeline(bootstrap: str) -> tuple[int, int]:
    """The loop; returns (committed transactions, aborted transactions)."""
    consumer = Consumer(
        bootstrap_servers=bootstrap,
        group_id=GROUP,
        isolation_level="read_committed",  # never process another pipeline's aborted output
        enable_auto_commit=False,  # offsets are committed by the producer's transaction
        auto_offset_reset="earliest",
        max_poll_records=100,
        fetch_max_wait_ms=100,
    )
    consumer.subscribe([INPUT])
    producer = Producer(bootstrap_servers=bootstrap, transactional_id="enricher-0")
    committed = aborted = 0
    failed_once = False
    async with producer, consumer:
        await producer.init_transactions()  # fences older instances, aborts what they left open
        input_end = await consumer.end_offsets([TopicPartition(INPUT, p) for p in range(PARTITIONS)])
        while True:
            batches = await consumer.getmany(timeout_ms=500)
            if not batches:
                positions = {tp: await consumer.position(tp) for tp in input_end}
                if consumer.assignment() and positions == input_end:
                    return committed, aborted
                continue
            # Taken with the batch: if the group rebalances before the commit, TxnOffsetCommit
            # then fails (KIP-447) instead of committing offsets the new generation may re-read.
            group_metadata = consumer.group_metadata()
            try:
                async with producer.transaction():
                    for records in batches.values():
                        for record in records:
                            await producer.send(OUTPUT, value=transform(record.value or b""), key=record.key)
                    if committed == ABORT_BATCH and not failed_once:
                        failed_once = True
                        raise SimulatedFailure
                    offsets = {tp: records[-1].offset + 1 for tp, records in batches.items()}
                    await producer.send_offsets_to_transaction(offsets, group_metadata)
                committed += 1
            except SimulatedFailure:
                aborted += 1
                await rewind_to_committed(consumer)


async def caught_up(consumer: Consumer, end: dict[TopicPartition, int]) -> bool:
    return all([await consumer.position(tp) >= offset for tp, offset in end.items()])


async def read_output(bootstrap: str) -> Counter[bytes]:
    """Every committed output value, counted (read_committed: aborted output is invisible)."""
    counts: Counter[bytes] = Counter()
    async with Consumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", auto_offset_reset="earliest"
    ) as consumer:
        tps = [TopicPartition(OUTPUT, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        end = await consumer.end_offsets(tps)
        while not await caught_up(consumer, end):
            for records in (await consumer.getmany(timeout_ms=500)).values():
                counts.update(r.value or b"" for r in records)
    return counts


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="kafkakit-eos-") as data_dir:
        async with Broker(data_dir) as broker:
            bootstrap = broker.bootstrap_servers
            print(f"broker_min on {bootstrap}")
            async with Admin(bootstrap_servers=bootstrap) as admin:
                await admin.create_topics(
                    [NewTopic(INPUT, num_partitions=PARTITIONS), NewTopic(OUTPUT, num_partitions=PARTITIONS)]
                )
            await produce_input(bootstrap)
            print(f"wrote {RECORDS} records to {INPUT!r} ({PARTITIONS} partitions)")
            committed, aborted = await asyncio.wait_for(run_pipeline(bootstrap), timeout=60)
            print(f"pipeline: {committed} transactions committed, {aborted} aborted and retried")
            counts = await read_output(bootstrap)
            expected = Counter(transform(b"order %d" % i) for i in range(RECORDS))
            missing = expected - counts
            duplicated = counts - expected
            print(
                f"{OUTPUT!r} (read_committed): {sum(counts.values())} records, "
                f"{len(missing)} missing, {len(duplicated)} duplicated"
            )
            if missing or duplicated:
                sys.exit(1)
            print("every input record appears exactly once in the output")


if __name__ == "__main__":
    asyncio.run(main())
