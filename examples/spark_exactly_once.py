"""Exactly-once Spark Structured Streaming from topic to topic, on an embedded broker.

    python examples/spark_exactly_once.py

Starts broker_min in a temporary directory, writes numbered orders to a
2-partition topic, then runs a streaming query that reads them with the
``kafkakit`` source, transforms them and writes them to a second topic with
``exactlyOnce=true``: each Spark task writes in a Kafka transaction that the
driver commits through a control topic (see docs/spark.md).  The query is
stopped halfway and restarted from its checkpoint, as after a crash; a
read_committed consumer then checks that every order arrived exactly once.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

from kafkakit import Admin, Consumer, NewTopic, Producer, TopicPartition
from kafkakit.broker import Broker

INPUT = "orders"
OUTPUT = "orders-enriched"
PARTITIONS = 2
RECORDS = 2000
PER_BATCH = 500


class EmbeddedBroker:
    """broker_min on a background thread with its own event loop (Spark's calls are blocking)."""

    def __init__(self, data_dir: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.broker = Broker(data_dir=data_dir, port=0)
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        asyncio.run_coroutine_threadsafe(self.broker.start(), self.loop).result(30)

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap_servers

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.broker.stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)


async def prepare_input(bootstrap: str) -> None:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(INPUT, PARTITIONS, 1), NewTopic(OUTPUT, PARTITIONS, 1)])
    async with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
        values = [b"order %d" % i for i in range(RECORDS)]
        for p in range(PARTITIONS):
            await (await producer.send_batch(INPUT, values[p::PARTITIONS], partition=p))


async def read_output(bootstrap: str) -> list[bytes]:
    tps = [TopicPartition(OUTPUT, p) for p in range(PARTITIONS)]
    values: list[bytes] = []
    async with Consumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", auto_offset_reset="earliest"
    ) as consumer:
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)
        while [tp for tp in tps if await consumer.position(tp) < end[tp]]:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                values.extend(r.value for r in records)
    return values


def run_query(bootstrap: str, checkpoint: str, *, max_batches: int | None) -> int:
    """Run the pipeline until the input is consumed, or stop it after ``max_batches`` micro-batches."""
    from kafkakit.spark import local_session

    spark = local_session("kafkakit-exactly-once-example")
    orders = (
        spark.readStream.format("kafkakit")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", INPUT)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(PER_BATCH))
        .load()
    )
    enriched = orders.selectExpr("key", "concat(upper(cast(value as string)), ' (enriched)') as value")
    writer = (
        enriched.writeStream.format("kafkakit")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", OUTPUT)
        .option("exactlyOnce", "true")
        .option("transactionalIdPrefix", "orders-enricher")
        .option("checkpointLocation", checkpoint)
    )
    if max_batches is None:
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
    else:
        query = writer.start()
        while len([p for p in query.recentProgress if p["numInputRows"]]) < max_batches:
            query.awaitTermination(0.5)
        query.stop()
    return len(query.recentProgress)


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        broker = EmbeddedBroker(str(Path(tmp, "broker")))
        try:
            asyncio.run(prepare_input(broker.bootstrap))
            checkpoint = str(Path(tmp, "checkpoint"))
            first = run_query(broker.bootstrap, checkpoint, max_batches=2)
            print(f"first run stopped after {first} micro-batches; restarting from the checkpoint")
            second = run_query(broker.bootstrap, checkpoint, max_batches=None)
            print(f"second run finished after {second} micro-batches")
            values = asyncio.run(read_output(broker.bootstrap))
        finally:
            broker.stop()
    counts = Counter(values)
    expected = {b"ORDER %d (enriched)" % i for i in range(RECORDS)}
    duplicates = sum(1 for n in counts.values() if n > 1)
    missing = len(expected - set(counts))
    print(
        f"{len(values)} records in {OUTPUT}: {len(counts)} distinct, {duplicates} duplicated, {missing} missing"
    )
    if duplicates or missing or set(counts) != expected:
        print("NOT exactly once")
        return 1
    print("exactly once: every order appears once in the output")
    return 0


if __name__ == "__main__":
    sys.exit(main())
