"""``kafkakit perf produce|consume``: throughput and latency (like kafka-producer-perf-test / consumer-perf-test).

Producer latency is measured per record from the ``send()`` call to its
acknowledgement (the delivery future completing), so it includes time queued
in the producer's buffer; with ``--acks 0`` there is no acknowledgement and
the figure is only the time until the record was written to the socket.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import string
import sys
import time
from functools import partial
from typing import Any

from kafkakit.cli.config import UsageError, connection_settings, ensure_topic_for_producing, open_admin
from kafkakit.cli.output import emit_json, error
from kafkakit.cli.produce import _ACKS, _PRODUCER_PROPERTIES, _producer_settings


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``perf produce`` and ``perf consume``."""
    parser = commands.add_parser("perf", help="measure produce and consume throughput and latency")
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    p = sub.add_parser(
        "produce", parents=[common], help="send records as fast as asked; report latency percentiles"
    )
    p.add_argument("--topic", required=True)
    p.add_argument("--num-records", type=int, required=True)
    p.add_argument("--record-size", type=int, default=100, help="value bytes per record (default 100)")
    p.add_argument("--throughput", type=float, default=-1, help="records/s cap; -1 for none (the default)")
    p.add_argument("--acks", choices=sorted(_ACKS), default="all")
    p.add_argument(
        "--compression-type",
        choices=("none", "gzip", "snappy", "lz4", "zstd"),
        default="none",
        dest="compression_type",
    )
    p.add_argument(
        "--producer-property",
        action="append",
        metavar="KEY=VALUE",
        help="one of " + ", ".join(_PRODUCER_PROPERTIES),
    )
    p.add_argument("--output", choices=("text", "json"), default="text")
    p.set_defaults(func=perf_produce)

    p = sub.add_parser("consume", parents=[common], help="read records from the beginning; report throughput")
    p.add_argument("--topic", required=True)
    p.add_argument("--messages", type=int, required=True, help="records to read")
    p.add_argument("--group", help="read as a member of this group (default: assign every partition)")
    p.add_argument("--timeout-ms", type=int, default=10000, help="give up when no record arrives for MS")
    p.add_argument("--output", choices=("text", "json"), default="text")
    p.set_defaults(func=perf_consume)


def percentile(sorted_values: list[float], fraction: float) -> float:
    """The value at ``fraction`` of a sorted list (nearest rank, as Kafka's perf tool picks it)."""
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * fraction))]


async def perf_produce(args: argparse.Namespace) -> int:
    from kafkakit.producer import Producer

    if args.num_records < 1 or args.record_size < 0:
        raise UsageError("--num-records must be positive and --record-size non-negative")
    settings = {**connection_settings(args), **_producer_settings(args)}
    rng = random.Random(0)
    payload = "".join(rng.choice(string.ascii_uppercase) for _ in range(args.record_size)).encode()
    latencies: list[float] = []
    failures: list[BaseException] = []

    def done(sent_at: float, future: Any) -> None:
        exc = None if future.cancelled() else future.exception()
        if exc is not None:
            failures.append(exc)
        else:
            latencies.append((time.perf_counter() - sent_at) * 1000)

    async with Producer(**settings) as producer:
        await ensure_topic_for_producing(args, producer)
        started = time.perf_counter()
        for index in range(args.num_records):
            if args.throughput > 0:
                ahead = started + index / args.throughput - time.perf_counter()
                if ahead > 0:
                    await asyncio.sleep(ahead)
            sent_at = time.perf_counter()
            future = await producer.send(args.topic, payload)
            future.add_done_callback(partial(done, sent_at))
        await producer.flush()
        elapsed = time.perf_counter() - started
    latencies.sort()
    count = len(latencies)
    result = {
        "records": count,
        "failed": len(failures),
        "seconds": round(elapsed, 3),
        "records_per_sec": round(count / elapsed, 1),
        "mb_per_sec": round(count * args.record_size / elapsed / 1024 / 1024, 2),
        "avg_latency_ms": round(sum(latencies) / count, 2) if count else 0.0,
        "max_latency_ms": round(latencies[-1], 2) if count else 0.0,
        "p50_ms": round(percentile(latencies, 0.5), 2),
        "p95_ms": round(percentile(latencies, 0.95), 2),
        "p99_ms": round(percentile(latencies, 0.99), 2),
        "p99_9_ms": round(percentile(latencies, 0.999), 2),
    }
    if args.output == "json":
        emit_json(result)
    else:
        print(
            f"{count} records sent, {result['records_per_sec']} records/sec ({result['mb_per_sec']} MB/sec), "
            f"{result['avg_latency_ms']} ms avg latency, {result['max_latency_ms']} ms max latency, "
            f"{result['p50_ms']} ms 50th, {result['p95_ms']} ms 95th, {result['p99_ms']} ms 99th, "
            f"{result['p99_9_ms']} ms 99.9th."
        )
    if failures:
        error(f"{len(failures)} record(s) failed; the first: {failures[0]}")
        return 1
    return 0


async def perf_consume(args: argparse.Namespace) -> int:
    from kafkakit.consumer import Consumer
    from kafkakit.structs import TopicPartition

    if args.messages < 1:
        raise UsageError("--messages must be positive")
    settings = connection_settings(args)
    async with open_admin(args) as admin:
        (description,) = await admin.describe_topics([args.topic])
    consumer = Consumer(
        **settings,
        group_id=args.group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        allow_auto_create_topics=False,
    )
    count = size = 0
    await consumer.start()
    try:
        started = time.perf_counter()
        if args.group is None:
            tps = [TopicPartition(args.topic, p.partition) for p in description.partitions]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
        else:
            consumer.subscribe([args.topic])
        last_record = time.perf_counter()
        first_record: float | None = None
        while count < args.messages:
            batches = await consumer.getmany(timeout_ms=200, max_records=args.messages - count)
            now = time.perf_counter()
            if not batches:
                if (now - last_record) * 1000 >= args.timeout_ms:
                    break
                continue
            if first_record is None:
                first_record = now
            last_record = now
            for batch in batches.values():
                count += len(batch)
                size += sum(len(r.value or b"") + len(r.key or b"") for r in batch)
        finished = time.perf_counter()
    finally:
        await consumer.stop()
    elapsed = max(finished - started, 1e-9)
    result = {
        "records": count,
        "bytes": size,
        "seconds": round(elapsed, 3),
        "records_per_sec": round(count / elapsed, 1),
        "mb_per_sec": round(size / elapsed / 1024 / 1024, 2),
        "fetch_seconds": round(finished - (first_record or finished), 3),
    }
    if args.output == "json":
        emit_json(result)
    else:
        print(
            f"{count} records received ({size / 1024 / 1024:.2f} MB) in {result['seconds']} s: "
            f"{result['records_per_sec']} records/sec ({result['mb_per_sec']} MB/sec)"
        )
    if count < args.messages:
        print(f"only {count} of {args.messages} records arrived before --timeout-ms", file=sys.stderr)
        return 1
    return 0
