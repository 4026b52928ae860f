"""Consumer throughput: kafkakit ``getmany`` vs aiokafka ``getmany`` vs confluent-kafka ``consume``.

Usage::

    python benchmarks/consumer_bench.py --bootstrap 127.0.0.1:9092 [--records 1000000] [--size 100]

Fills a one-partition topic once (with confluent-kafka, so the numbers do not
depend on kafkakit's producer), then reads it from the beginning with each
client in the same run. Every client touches every record (sums the value
sizes) so lazy tricks cannot win; the figures are records per second.
Without ``--bootstrap`` a kafkakit broker (``python -m kafkakit.broker``) is
started in a child process on a temporary directory.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

TOPIC_PREFIX = "kafkakit-consumer-bench"


def fill_topic(bootstrap: str, topic: str, records: int, size: int) -> None:
    """Create ``topic`` with one partition and write ``records`` values of ``size`` bytes, unless done before."""
    from confluent_kafka import Consumer as CKConsumer
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=10).topics:
        probe = CKConsumer({"bootstrap.servers": bootstrap, "group.id": "kafkakit-bench-probe"})
        _low, high = probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        probe.close()
        if high >= records:
            return
        raise SystemExit(f"topic {topic} exists with {high} records; delete it or pick another --topic")
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result()
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 1000000,
            "compression.type": "none",
        }
    )
    value = b"x" * size
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush()


async def bench_kafkakit(bootstrap: str, topic: str, records: int) -> float:
    from kafkakit.consumer import Consumer
    from kafkakit.structs import TopicPartition

    tp = TopicPartition(topic, 0)
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        await consumer.getmany(timeout_ms=10000, max_records=1)  # warm up: connection and first fetch
        count, total = 1, 0
        start = time.perf_counter()
        while count < records:
            batches = await consumer.getmany(timeout_ms=1000)
            for batch in batches.values():
                count += len(batch)
                for record in batch:
                    total += len(record.value)
        return (count - 1) / (time.perf_counter() - start)


async def bench_aiokafka(bootstrap: str, topic: str, records: int) -> float:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    tp = TopicPartition(topic, 0)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        await consumer.getmany(timeout_ms=10000, max_records=1)
        count, total = 1, 0
        start = time.perf_counter()
        while count < records:
            batches = await consumer.getmany(timeout_ms=1000)
            for batch in batches.values():
                count += len(batch)
                for record in batch:
                    total += len(record.value)
        return (count - 1) / (time.perf_counter() - start)
    finally:
        await consumer.stop()


def bench_confluent(bootstrap: str, topic: str, records: int) -> float:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "kafkakit-bench", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        count, total = 0, 0
        first = consumer.consume(num_messages=1, timeout=10)
        count += len(first)
        start = time.perf_counter()
        while count < records:
            for message in consumer.consume(num_messages=10000, timeout=1):
                if message.error() is None:
                    count += 1
                    total += len(message.value() or b"")
        return (count - 1) / (time.perf_counter() - start)
    finally:
        consumer.close()


@contextlib.asynccontextmanager
async def kafkakit_broker() -> AsyncIterator[str]:
    """kafkakit's broker in a child process, so it does not share the consumer's CPU and GIL."""
    with tempfile.TemporaryDirectory() as tmp:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kafkakit.broker",
                "--data-dir",
                tmp,
                "--port",
                str(port),
                "--log-level",
                "WARNING",
            ]
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit("the kafkakit broker did not start") from None
                    await asyncio.sleep(0.1)
            yield f"127.0.0.1:{port}"
        finally:
            proc.terminate()
            proc.wait(10)


async def run(args: argparse.Namespace) -> None:
    async def measure(bootstrap: str) -> None:
        topic = args.topic or f"{TOPIC_PREFIX}-{args.records}-{args.size}"
        await asyncio.to_thread(fill_topic, bootstrap, topic, args.records, args.size)
        runs: list[tuple[str, Callable[[], Coroutine[Any, Any, float]]]] = [
            ("kafkakit getmany", lambda: bench_kafkakit(bootstrap, topic, args.records)),
            ("aiokafka getmany", lambda: bench_aiokafka(bootstrap, topic, args.records)),
            (
                "confluent-kafka consume",
                lambda: asyncio.to_thread(bench_confluent, bootstrap, topic, args.records),
            ),
        ]
        results: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            for name, bench in runs:
                if args.only and args.only not in name:
                    continue
                results.setdefault(name, []).append(await bench())
        for name, rates in results.items():
            print(
                f"{name:26s} best {max(rates):>12,.0f} rec/s   runs {', '.join(f'{r:,.0f}' for r in rates)}"
            )
        kk, aio = results.get("kafkakit getmany"), results.get("aiokafka getmany")
        if kk and aio:
            # Per-round ratios pair runs made close together: less exposed to a noisy machine.
            ratios = sorted(k / a for k, a in zip(kk, aio, strict=True))
            print(
                f"kafkakit / aiokafka: best {max(kk) / max(aio):.2f}x   median of rounds "
                f"{statistics.median(ratios):.2f}x   rounds {', '.join(f'{r:.2f}x' for r in ratios)}"
            )

    if args.bootstrap:
        await measure(args.bootstrap)
    else:
        async with kafkakit_broker() as bootstrap:
            await measure(bootstrap)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap", help="broker address; default: start a kafkakit broker")
    parser.add_argument("--topic", help="topic to read (created and filled when missing)")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100, help="value size in bytes")
    parser.add_argument("--rounds", type=int, default=3, help="runs per client (best and median ratio are reported)")
    parser.add_argument("--only", help="run only the clients whose name contains this")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
