"""One produce/consume face over each third-party Kafka client the interop tests drive.

Each ``produce_*`` function writes a list of ``Rec`` to explicit partitions and
fails loudly on any delivery error; each ``consume_*`` function reads a topic's
partitions from offset 0 with manual assignment (no group coordination needed)
until it has the expected number of records, and returns them as ``Got``.
The tests compare what went in with what came out, field by field.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

CONSUME_TIMEOUT_S = 30.0
PRODUCE_TIMEOUT_S = 30.0

Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True)
class Rec:
    """A record to produce; ``timestamp`` None lets the producer stamp it (CreateTime now)."""

    partition: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    timestamp: int | None = None


@dataclass(frozen=True)
class Got:
    """A record as a consumer returned it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp: int


class InteropError(AssertionError):
    """A client reported an error or did not finish in time; the message says which and why."""


def now_ms() -> int:
    return int(time.time() * 1000)


def kcat_binary() -> str | None:
    """``kcat`` or its older Debian name ``kafkacat``, whichever is on PATH."""
    return shutil.which("kcat") or shutil.which("kafkacat")


def _sorted(got: list[Got]) -> list[Got]:
    return sorted(got, key=lambda g: (g.partition, g.offset))


def _headers(raw: Sequence[tuple[str, bytes | None]] | None) -> Headers:
    return tuple((str(k), None if v is None else bytes(v)) for k, v in (raw or ()))


# --------------------------------------------------------------------------- confluent-kafka


def produce_confluent(
    bootstrap: str,
    topic: str,
    recs: Sequence[Rec],
    *,
    codec: str = "none",
    acks: str = "all",
    extra: dict[str, Any] | None = None,
) -> list[tuple[int, int]]:
    """Produce with confluent-kafka; returns the (partition, offset) of each delivery report."""
    from confluent_kafka import Producer

    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap, "compression.type": codec, "acks": acks,
        "linger.ms": 20, "socket.timeout.ms": 10_000, "message.timeout.ms": int(PRODUCE_TIMEOUT_S * 1000),
    }  # fmt: skip
    config.update(extra or {})
    producer = Producer(config)
    errors: list[str] = []
    delivered: list[tuple[int, int]] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(f"{err} (partition {msg.partition()})")
        else:
            delivered.append((msg.partition(), msg.offset()))

    for rec in recs:
        kwargs: dict[str, Any] = {"partition": rec.partition, "on_delivery": on_delivery}
        if rec.timestamp is not None:
            kwargs["timestamp"] = rec.timestamp
        if rec.headers:
            kwargs["headers"] = list(rec.headers)
        producer.produce(topic, value=rec.value, key=rec.key, **kwargs)
        producer.poll(0)
    remaining = producer.flush(PRODUCE_TIMEOUT_S)
    if errors or remaining:
        raise InteropError(f"confluent producer: {remaining} undelivered, errors: {errors[:5]}")
    return delivered


def consume_confluent(bootstrap: str, topic: str, partitions: Sequence[int], count: int) -> list[Got]:
    """Consume with confluent-kafka: a group id (librdkafka needs one) but ``assign`` and no commits."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"interop-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False, "enable.partition.eof": False, "auto.offset.reset": "earliest",
    })  # fmt: skip
    got: list[Got] = []
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while len(got) < count and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=500, timeout=0.5):
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise InteropError(f"confluent consumer error: {error}")
                raw: Any = msg.headers()  # librdkafka hands out a list of (str, bytes | None)
                got.append(Got(int(msg.partition() or 0), int(msg.offset() or 0), msg.key(), msg.value(),
                               _headers(raw), msg.timestamp()[1]))  # fmt: skip
    finally:
        consumer.close()
    return _sorted(got)


# --------------------------------------------------------------------------- aiokafka


def produce_aiokafka(
    bootstrap: str,
    topic: str,
    recs: Sequence[Rec],
    *,
    codec: str = "none",
    acks: Any = "all",
    batch_api: bool = False,
) -> None:
    """Produce with aiokafka: ``send`` + ``send_and_wait`` or, with ``batch_api``, ``send_batch``."""
    asyncio.run(_produce_aiokafka(bootstrap, topic, recs, codec, acks, batch_api))


async def _produce_aiokafka(
    bootstrap: str, topic: str, recs: Sequence[Rec], codec: str, acks: Any, batch_api: bool
) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks=acks, linger_ms=20, request_timeout_ms=int(PRODUCE_TIMEOUT_S * 1000),
        compression_type=None if codec == "none" else codec,
    )  # fmt: skip
    await producer.start()
    try:
        if batch_api:
            await _send_batches_aiokafka(producer, topic, recs)
        else:
            futures = [
                await producer.send(
                    topic,
                    value=r.value,
                    key=r.key,
                    partition=r.partition,
                    timestamp_ms=r.timestamp,
                    headers=list(r.headers) or None,
                )  # fmt: skip
                for r in recs[:-1]
            ]
            last = recs[-1]
            await producer.send_and_wait(topic, value=last.value, key=last.key, partition=last.partition,
                                         timestamp_ms=last.timestamp, headers=list(last.headers) or None)  # fmt: skip
            await asyncio.wait_for(asyncio.gather(*futures), PRODUCE_TIMEOUT_S)
    finally:
        await producer.stop()


async def _send_batches_aiokafka(producer: Any, topic: str, recs: Sequence[Rec]) -> None:
    by_partition: dict[int, list[Rec]] = {}
    for rec in recs:
        by_partition.setdefault(rec.partition, []).append(rec)
    futures = []
    for partition, items in by_partition.items():
        batch = producer.create_batch()
        for rec in items:
            if batch.append(key=rec.key, value=rec.value, timestamp=rec.timestamp,
                            headers=list(rec.headers)) is None:  # fmt: skip
                futures.append(await producer.send_batch(batch, topic, partition=partition))
                batch = producer.create_batch()
                batch.append(key=rec.key, value=rec.value, timestamp=rec.timestamp, headers=list(rec.headers))
        futures.append(await producer.send_batch(batch, topic, partition=partition))
    await asyncio.wait_for(asyncio.gather(*futures), PRODUCE_TIMEOUT_S)


def consume_aiokafka(bootstrap: str, topic: str, partitions: Sequence[int], count: int) -> list[Got]:
    """Consume with aiokafka: ``assign`` + ``seek_to_beginning`` + ``getmany``, no group."""
    return asyncio.run(_consume_aiokafka(bootstrap, topic, partitions, count))


async def _consume_aiokafka(bootstrap: str, topic: str, partitions: Sequence[int], count: int) -> list[Got]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    await consumer.start()
    got: list[Got] = []
    try:
        consumer.assign([TopicPartition(topic, p) for p in partitions])
        await consumer.seek_to_beginning()
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while len(got) < count and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            for tp, msgs in batches.items():
                got.extend(Got(tp.partition, m.offset, m.key, m.value, _headers(m.headers), m.timestamp)
                           for m in msgs)  # fmt: skip
    finally:
        await consumer.stop()
    return _sorted(got)


# --------------------------------------------------------------------------- kafka-python


def produce_kafka_python(
    bootstrap: str,
    topic: str,
    recs: Sequence[Rec],
    *,
    codec: str = "none",
    acks: Any = "all",
    extra: dict[str, Any] | None = None,
) -> None:
    """Produce with kafka-python's KafkaProducer and wait for every future.

    kafka-python 3.x enables idempotence by default (with acks=all), as Java clients do,
    so its default producer needs InitProducerId from the broker.
    """
    from kafka import KafkaProducer  # type: ignore[attr-defined]

    producer = KafkaProducer(
        bootstrap_servers=bootstrap, acks=acks, linger_ms=20,
        compression_type=None if codec == "none" else codec, **(extra or {}),
    )  # fmt: skip
    try:
        futures = [
            producer.send(
                topic,
                value=r.value,
                key=r.key,
                partition=r.partition,
                timestamp_ms=r.timestamp,
                headers=list(r.headers),
            )  # fmt: skip
            for r in recs
        ]
        producer.flush(PRODUCE_TIMEOUT_S)
        for future in futures:
            future.get(timeout=PRODUCE_TIMEOUT_S)
    finally:
        producer.close(timeout=10)


def consume_kafka_python(bootstrap: str, topic: str, partitions: Sequence[int], count: int) -> list[Got]:
    """Consume with kafka-python: ``assign`` + ``seek_to_beginning`` + ``poll``, no group."""
    from kafka import KafkaConsumer, TopicPartition  # type: ignore[attr-defined]

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    got: list[Got] = []
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while len(got) < count and time.monotonic() < deadline:
            for tp, msgs in consumer.poll(timeout_ms=500).items():
                got.extend(Got(tp.partition, m.offset, m.key, m.value, _headers(m.headers), m.timestamp)
                           for m in msgs)  # fmt: skip
    finally:
        consumer.close()
    return _sorted(got)


# --------------------------------------------------------------------------- kcat


def run_kcat(args: Sequence[str], stdin: bytes = b"", timeout: float = CONSUME_TIMEOUT_S) -> bytes:
    """Run kcat with ``args``; raise ``InteropError`` with its stderr when it fails."""
    binary = kcat_binary()
    if binary is None:
        raise InteropError("neither kcat nor kafkacat is installed")
    result = subprocess.run([binary, *args], input=stdin, capture_output=True, timeout=timeout, check=False)
    if result.returncode != 0:
        raise InteropError(
            f"kcat {' '.join(args)} exited {result.returncode}: {result.stderr.decode()[-2000:]}"
        )
    return result.stdout


def produce_kcat(bootstrap: str, topic: str, recs: Sequence[Rec], *, codec: str = "none") -> None:
    """Produce with ``kcat -P -K: -H``, one run per partition (headers are per run in kcat).

    kcat reads one ``key:value`` record per line and cannot set timestamps, so
    the records must be printable, newline-free, have a key without ``:``, one
    header set per partition, and ``timestamp`` None.
    """
    by_partition: dict[int, list[Rec]] = {}
    for rec in recs:
        if rec.timestamp is not None or rec.key is None or rec.value is None:
            raise ValueError("kcat records need a key and value and no explicit timestamp")
        by_partition.setdefault(rec.partition, []).append(rec)
    for partition, items in by_partition.items():
        header_args: list[str] = []
        for name, value in items[0].headers:
            assert value is not None
            header_args += ["-H", f"{name}={value.decode()}"]
        if any(r.headers != items[0].headers for r in items):
            raise ValueError("kcat sets one header set per run: use the same headers within a partition")
        lines = b"".join(r.key + b":" + r.value + b"\n" for r in items)  # type: ignore[operator]
        run_kcat(["-b", bootstrap, "-P", "-t", topic, "-p", str(partition), "-K:", *header_args,
                  "-X", f"compression.codec={codec}", "-X", "linger.ms=20"], stdin=lines)  # fmt: skip


def consume_kcat(bootstrap: str, topic: str, partitions: Sequence[int], count: int) -> list[Got]:
    """Consume with ``kcat -C -o beginning -e -J`` (exits at the end of every partition)."""
    got: list[Got] = []
    for partition in partitions:
        out = run_kcat(["-b", bootstrap, "-C", "-t", topic, "-p", str(partition), "-o", "beginning",
                        "-e", "-J", "-q"])  # fmt: skip
        got.extend(_parse_kcat_json(line) for line in out.splitlines() if line.strip())
    return _sorted(got)


def _parse_kcat_json(line: bytes) -> Got:
    doc = json.loads(line)
    flat = doc.get("headers") or []
    headers = tuple((flat[i], None if flat[i + 1] is None else flat[i + 1].encode())
                    for i in range(0, len(flat), 2))  # fmt: skip
    key = None if doc.get("key") is None else doc["key"].encode()
    value = None if doc.get("payload") is None else doc["payload"].encode()
    return Got(doc["partition"], doc["offset"], key, value, headers, doc["ts"])


Producer = Callable[[str, str, Sequence[Rec]], Any]
Consumer = Callable[[str, str, Sequence[int], int], list[Got]]

PRODUCERS: dict[str, Producer] = {
    "confluent": produce_confluent,
    "aiokafka": produce_aiokafka,
    "kafka-python": produce_kafka_python,
    "kcat": produce_kcat,
}
CONSUMERS: dict[str, Consumer] = {
    "confluent": consume_confluent,
    "aiokafka": consume_aiokafka,
    "kafka-python": consume_kafka_python,
    "kcat": consume_kcat,
}
