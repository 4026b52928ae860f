"""Producer and consumer throughput: kafkakit against aiokafka, kafka-python and confluent-kafka.

Every client runs in its own subprocess against the same broker (broker_min as a
subprocess, and Apache Kafka when java and mvn are available), so no client shares
an interpreter or a GIL with the broker or with another client.

    python benchmarks/throughput.py                      # the full run (1,000,000 x 100 B, 3 runs)
    python benchmarks/throughput.py --smoke              # a few seconds, for CI
    python benchmarks/throughput.py --brokers broker_min --codecs none --records 200000

Prints a table per broker and codec with records/s, MB/s and the ratio of each
client to each peer, plus broker_min against Apache Kafka with confluent-kafka.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: Producer batching: "tuned" gives every client linger 5 ms and 1 MiB batches;
#: "defaults" leaves each client's own defaults (KAFKAKIT_BENCH_BATCHING env, set by --batching).
def _tuned() -> bool:
    return os.environ.get("KAFKAKIT_BENCH_BATCHING", "tuned") == "tuned"


def _batching(linger: str, size: str) -> dict[str, int]:
    return {linger: 5, size: 1 << 20} if _tuned() else {}


PRODUCERS = [
    "kafkakit", "kafkakit-bulk", "aiokafka", "kafka-python", "confluent",
    "kafkakit-gather", "aiokafka-gather", "kafka-python-gather", "confluent-gather",
    "kafkakit-keyed", "confluent-keyed", "kafkakit-sticky", "confluent-sticky",
]  # fmt: skip
#: "-sticky" producers name no partition (``send(topic, value)``, the everyday default), so the
#: client's partitioner picks one for keyless records (the topics have one partition).
#: "-keyed" producers send every record with its own key (``b"key-0000042"``, made before the
#: clock starts) and let the client's partitioner place it: Java's murmur2 placement for both
#: (librdkafka's default, consistent_random, hashes with CRC32 and would put keys elsewhere).
#: "-gather" producers wait for every GATHER_CHUNK records' acknowledgements, as applications
#: that keep the futures of send() and gather them do (asyncio.gather; .get() or flush() for the
#: synchronous clients).
GATHER_CHUNK = 10_000
CONSUMERS = ["kafkakit", "aiokafka", "kafka-python", "confluent"]
#: "-iter" consumers read with ``async for record in consumer``, the loop most applications write.
ITER_CONSUMERS = ["kafkakit-iter", "aiokafka-iter"]


# --------------------------------------------------------------------------- workers
# Each worker runs in a fresh interpreter: `throughput.py --worker JSON`.


def _payload(size: int) -> bytes:
    return (b"0123456789abcdef" * (size // 16 + 1))[:size]


def _values(n: int, size: int) -> list[bytes]:
    """The ``n`` values every producer sends: ``size`` bytes each, or with --size-spread S
    (KAFKAKIT_BENCH_SIZE_SPREAD) lengths from size - S to size + S, as JSON documents vary
    (the same lengths, in the same order, for every client; distinct objects)."""
    spread = int(os.environ.get("KAFKAKIT_BENCH_SIZE_SPREAD", "0"))
    if not spread:
        return [_payload(size)] * n
    rng = random.Random(n)
    longest = _payload(size + spread)
    return [longest[: rng.randint(size - spread, size + spread)] for _ in range(n)]


async def _produce_kafkakit(bootstrap: str, topic: str, n: int, size: int, codec: str | None, shape: str) -> float:
    """kafkakit's producer; ``shape``: "partition" (``partition=0``), "sticky" (none named),
    "keyed" (a key per record) or "bulk" (``send_batch``)."""
    from kafkakit import Producer

    values = _values(n, size)
    keys = _keys(n) if shape == "keyed" else []
    async with Producer(bootstrap_servers=bootstrap, acks=1, compression_type=codec, **_batching("linger_ms", "max_batch_size")) as producer:
        await producer.partitions_for(topic)
        start = time.perf_counter()
        if shape == "bulk":
            chunk = 10000
            futures = []
            for i in range(0, n, chunk):
                futures.append(await producer.send_batch(topic, values[i : i + chunk], partition=0))
            await asyncio.gather(*futures)
        else:
            send = producer.send
            last = None
            if shape == "keyed":
                for key, value in zip(keys, values, strict=True):
                    last = await send(topic, value, key=key)
            elif shape == "sticky":
                for value in values:
                    last = await send(topic, value)
            else:
                for value in values:
                    last = await send(topic, value, partition=0)
            await producer.flush()
            assert last is not None
            await last
        return time.perf_counter() - start


def _keys(n: int) -> list[bytes]:
    return [b"key-%07d" % i for i in range(n)]


async def _produce_gathering(producer: Any, topic: str, n: int, values: list[bytes]) -> float:
    """``await send()`` per record, keeping the futures and gathering every GATHER_CHUNK (kafkakit, aiokafka)."""
    start = time.perf_counter()
    send = producer.send
    futures = []
    for i, value in enumerate(values, 1):
        futures.append(await send(topic, value, partition=0))
        if i % GATHER_CHUNK == 0 or i == n:
            await asyncio.gather(*futures)
            futures = []
    return time.perf_counter() - start


async def _produce_kafkakit_gather(bootstrap: str, topic: str, n: int, size: int, codec: str | None) -> float:
    from kafkakit import Producer

    async with Producer(bootstrap_servers=bootstrap, acks=1, compression_type=codec, **_batching("linger_ms", "max_batch_size")) as producer:
        await producer.partitions_for(topic)
        return await _produce_gathering(producer, topic, n, _values(n, size))


async def _produce_aiokafka_gather(bootstrap: str, topic: str, n: int, size: int, codec: str | None) -> float:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, compression_type=codec, **_batching("linger_ms", "max_batch_size"))
    await producer.start()
    try:
        await producer.partitions_for(topic)
        return await _produce_gathering(producer, topic, n, _values(n, size))
    finally:
        await producer.stop()


def _produce_kafka_python_gather(bootstrap: str, topic: str, n: int, size: int, codec: str | None) -> float:
    from kafka import KafkaProducer

    values = _values(n, size)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, compression_type=codec, **_batching("linger_ms", "batch_size"))
    producer.partitions_for(topic)
    start = time.perf_counter()
    futures = []
    for i, value in enumerate(values, 1):
        futures.append(producer.send(topic, value, partition=0))
        if i % GATHER_CHUNK == 0 or i == n:
            for future in futures:
                future.get(timeout=60)
            futures = []
    elapsed = time.perf_counter() - start
    producer.close()
    return elapsed


async def _produce_aiokafka(bootstrap: str, topic: str, n: int, size: int, codec: str | None) -> float:
    from aiokafka import AIOKafkaProducer

    values = _values(n, size)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, compression_type=codec, **_batching("linger_ms", "max_batch_size"))
    await producer.start()
    try:
        await producer.partitions_for(topic)
        start = time.perf_counter()
        send = producer.send
        last = None
        for value in values:
            last = await send(topic, value, partition=0)
        await producer.flush()
        assert last is not None
        await last
        return time.perf_counter() - start
    finally:
        await producer.stop()


def _produce_kafka_python(bootstrap: str, topic: str, n: int, size: int, codec: str | None) -> float:
    from kafka import KafkaProducer

    values = _values(n, size)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, compression_type=codec, **_batching("linger_ms", "batch_size"))
    producer.partitions_for(topic)
    start = time.perf_counter()
    send = producer.send
    for value in values:
        send(topic, value, partition=0)
    producer.flush()
    elapsed = time.perf_counter() - start
    producer.close()
    return elapsed


def _confluent_producer(bootstrap: str, codec: str | None, **settings: str) -> Any:
    from confluent_kafka import Producer

    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "compression.type": codec or "none",
            **_batching("linger.ms", "batch.size"),
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
            "enable.idempotence": False,
            **settings,
        }
    )


def _produce_confluent(
    bootstrap: str, topic: str, n: int, size: int, codec: str | None, flush_every: int = 0, sticky: bool = False
) -> float:
    values = _values(n, size)
    producer = _confluent_producer(bootstrap, codec)

    # topic and values are bound as defaults: locals in the loop, as before (not closure cells).
    def to_partition_0(produce: Any, poll: Any, topic: str = topic, values: list[bytes] = values) -> None:
        for i, value in enumerate(values):
            try:
                produce(topic, value, partition=0)
            except BufferError:
                poll(0.01)
                produce(topic, value, partition=0)
            if i & 0xFFFF == 0:
                poll(0)
            if flush_every and (i + 1) % flush_every == 0:
                producer.flush(60)  # wait for this chunk's delivery reports, as gathering futures does

    def unplaced(produce: Any, poll: Any, topic: str = topic, values: list[bytes] = values) -> None:  # the partitioner chooses
        for i, value in enumerate(values):
            try:
                produce(topic, value)
            except BufferError:
                poll(0.01)
                produce(topic, value)
            if i & 0xFFFF == 0:
                poll(0)

    return _timed_confluent(producer, topic, unplaced if sticky else to_partition_0)


def _produce_confluent_keyed(bootstrap: str, topic: str, n: int, size: int, codec: str | None) -> float:
    values, keys = _values(n, size), _keys(n)
    producer = _confluent_producer(bootstrap, codec, partitioner="murmur2_random")  # Java's placement

    def keyed(produce: Any, poll: Any, topic: str = topic, values: list[bytes] = values) -> None:
        for i, (key, value) in enumerate(zip(keys, values, strict=True)):
            try:
                produce(topic, value, key=key)
            except BufferError:
                poll(0.01)
                produce(topic, value, key=key)
            if i & 0xFFFF == 0:
                poll(0)

    return _timed_confluent(producer, topic, keyed)


def _timed_confluent(producer: Any, topic: str, loop: Any) -> float:
    """Seconds for ``loop(produce, poll)`` and the flush after it. Each loop calls ``produce()``
    with its own arguments written out: a shared loop would add a call to each record."""
    producer.list_topics(topic, timeout=10)
    start = time.perf_counter()
    loop(producer.produce, producer.poll)
    remaining = producer.flush(60)
    elapsed = time.perf_counter() - start
    assert remaining == 0, f"{remaining} messages not delivered"
    return elapsed


async def _consume_kafkakit(bootstrap: str, topic: str, n: int) -> float:
    from kafkakit import Consumer, TopicPartition

    tp = TopicPartition(topic, 0)
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", max_partition_fetch_bytes=8 << 20, fetch_max_bytes=64 << 20) as consumer:
        consumer.assign([tp])
        start = time.perf_counter()
        seen = 0
        total = 0
        while seen < n:
            batches = await consumer.getmany(timeout_ms=1000)
            for records in batches.values():
                seen += len(records)
                total += sum([len(r.value) for r in records])  # touch every record, as an application would
        return time.perf_counter() - start


async def _consume_aiokafka(bootstrap: str, topic: str, n: int) -> float:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    tp = TopicPartition(topic, 0)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False, max_partition_fetch_bytes=8 << 20, fetch_max_bytes=64 << 20)
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        start = time.perf_counter()
        seen = 0
        total = 0
        while seen < n:
            batches = await consumer.getmany(timeout_ms=1000)
            for records in batches.values():
                seen += len(records)
                total += sum([len(r.value) for r in records])
        return time.perf_counter() - start
    finally:
        await consumer.stop()


async def _consume_kafkakit_iter(bootstrap: str, topic: str, n: int) -> float:
    """``async for record in consumer`` (kafkakit)."""
    from kafkakit import Consumer, TopicPartition

    tp = TopicPartition(topic, 0)
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", max_partition_fetch_bytes=8 << 20, fetch_max_bytes=64 << 20) as consumer:
        consumer.assign([tp])
        return await _iterate(consumer, n)


async def _consume_aiokafka_iter(bootstrap: str, topic: str, n: int) -> float:
    """``async for record in consumer`` (aiokafka)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    tp = TopicPartition(topic, 0)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False, max_partition_fetch_bytes=8 << 20, fetch_max_bytes=64 << 20)
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        return await _iterate(consumer, n)
    finally:
        await consumer.stop()


async def _iterate(consumer: Any, n: int) -> float:
    start = time.perf_counter()
    seen = 0
    total = 0
    async for record in consumer:
        total += len(record.value)  # touch every record, as an application would
        seen += 1
        if seen == n:
            break
    return time.perf_counter() - start


def _consume_kafka_python(bootstrap: str, topic: str, n: int) -> float:
    from kafka import KafkaConsumer, TopicPartition

    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False, max_partition_fetch_bytes=8 << 20, fetch_max_bytes=64 << 20)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    start = time.perf_counter()
    seen = 0
    total = 0
    while seen < n:
        for records in consumer.poll(timeout_ms=1000, max_records=100000).values():
            seen += len(records)
            total += sum([len(r.value) for r in records])
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed


def _consume_confluent(bootstrap: str, topic: str, n: int) -> float:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-" + uuid.uuid4().hex,
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 << 20,
            "max.partition.fetch.bytes": 8 << 20,
        }
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    start = time.perf_counter()
    seen = 0
    total = 0
    while seen < n:
        for message in consumer.consume(num_messages=10000, timeout=1.0):
            if message.error() is None:
                seen += 1
                total += len(message.value())
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed


def run_worker(spec: dict[str, object]) -> float:
    role, client = spec["role"], spec["client"]
    bootstrap, topic, n = str(spec["bootstrap"]), str(spec["topic"]), int(spec["records"])  # type: ignore[call-overload]
    size = int(spec.get("size", 100))  # type: ignore[call-overload]
    codec = spec.get("codec")
    codec = None if codec in (None, "none") else str(codec)
    if role == "produce":
        if client in ("kafkakit", "kafkakit-bulk"):
            shape = "bulk" if client == "kafkakit-bulk" else "partition"
            return asyncio.run(_produce_kafkakit(bootstrap, topic, n, size, codec, shape))
        if client == "aiokafka":
            return asyncio.run(_produce_aiokafka(bootstrap, topic, n, size, codec))
        if client == "kafka-python":
            return _produce_kafka_python(bootstrap, topic, n, size, codec)
        if client == "confluent":
            return _produce_confluent(bootstrap, topic, n, size, codec)
        if client == "kafkakit-gather":
            return asyncio.run(_produce_kafkakit_gather(bootstrap, topic, n, size, codec))
        if client == "aiokafka-gather":
            return asyncio.run(_produce_aiokafka_gather(bootstrap, topic, n, size, codec))
        if client == "kafka-python-gather":
            return _produce_kafka_python_gather(bootstrap, topic, n, size, codec)
        if client == "confluent-gather":
            return _produce_confluent(bootstrap, topic, n, size, codec, flush_every=GATHER_CHUNK)
        if client == "kafkakit-sticky":
            return asyncio.run(_produce_kafkakit(bootstrap, topic, n, size, codec, "sticky"))
        if client == "confluent-sticky":
            return _produce_confluent(bootstrap, topic, n, size, codec, sticky=True)
        if client == "kafkakit-keyed":
            return asyncio.run(_produce_kafkakit(bootstrap, topic, n, size, codec, "keyed"))
        if client == "confluent-keyed":
            return _produce_confluent_keyed(bootstrap, topic, n, size, codec)
    else:
        if client == "kafkakit":
            return asyncio.run(_consume_kafkakit(bootstrap, topic, n))
        if client == "aiokafka":
            return asyncio.run(_consume_aiokafka(bootstrap, topic, n))
        if client == "kafka-python":
            return _consume_kafka_python(bootstrap, topic, n)
        if client == "confluent":
            return _consume_confluent(bootstrap, topic, n)
        if client == "kafkakit-iter":
            return asyncio.run(_consume_kafkakit_iter(bootstrap, topic, n))
        if client == "aiokafka-iter":
            return asyncio.run(_consume_aiokafka_iter(bootstrap, topic, n))
    raise SystemExit(f"unknown worker {role}/{client}")


def peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM), in MiB."""
    with open(f"/proc/{os.getpid()}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return -1.0


def spawn_worker_rss(spec: dict[str, object], timeout: float) -> tuple[float, float]:
    """Run one worker in a fresh interpreter: (seconds, peak RSS of that interpreter in MiB)."""
    out = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(spec)], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )
    if out.returncode != 0:
        raise RuntimeError(f"worker {spec['role']}/{spec['client']} failed:\n{out.stderr[-3000:]}")
    seconds, rss = out.stdout.strip().splitlines()[-1].split()
    return float(seconds), float(rss)


def spawn_worker(spec: dict[str, object], timeout: float) -> float:
    return spawn_worker_rss(spec, timeout)[0]


# --------------------------------------------------------------------------- driver


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    futures[name].result(30)
    deadline = time.time() + 30
    while name not in admin.list_topics(timeout=10).topics and time.time() < deadline:
        time.sleep(0.1)


def start_broker(kind: str, workdir: Path):  # type: ignore[no-untyped-def]
    import tests.brokers as brokers

    if kind == "broker_min":
        server = brokers.BrokerMinProcess(workdir / "broker_min")
    else:
        server = brokers.KafkaServer(workdir / "kafka")
    server.start()
    return server


def measure(args: argparse.Namespace) -> dict[str, object]:
    results: dict[str, object] = {"args": vars(args), "produce": {}, "consume": {}}
    timeout = max(120.0, args.records / 5000)
    with tempfile.TemporaryDirectory(prefix="kafkakit-bench-") as tmp:
        for broker_kind in args.brokers.split(","):
            server = start_broker(broker_kind, Path(tmp))
            try:
                bootstrap = server.bootstrap_servers
                for codec in args.codecs.split(","):
                    for role, clients in (("produce", args.producers.split(",")), ("consume", args.consumers.split(","))):
                        source_topic = None
                        if role == "consume":
                            source_topic = f"bench-src-{codec}-{uuid.uuid4().hex[:8]}"
                            create_topic(bootstrap, source_topic)
                            spawn_worker({"role": "produce", "client": "confluent", "bootstrap": bootstrap, "topic": source_topic, "records": args.records, "size": args.size, "codec": codec}, timeout)
                        # Rounds interleave the clients (A B C, A B C, ...), so a slow spell of a shared
                        # machine hits every client of a round rather than all runs of one client.
                        times: dict[str, list[float]] = {client: [] for client in clients}
                        rss: dict[str, list[float]] = {client: [] for client in clients}
                        for _ in range(args.runs):
                            for client in clients:
                                topic = source_topic or f"bench-{client}-{uuid.uuid4().hex[:8]}"
                                if role == "produce":
                                    create_topic(bootstrap, topic, args.partitions)
                                spec = {"role": role, "client": client, "bootstrap": bootstrap, "topic": topic, "records": args.records, "size": args.size, "codec": codec}
                                seconds, peak = spawn_worker_rss(spec, timeout)
                                times[client].append(seconds)
                                rss[client].append(peak)
                        for client in clients:
                            key = f"{broker_kind}/{codec}/{client}"
                            results[role][key] = {"seconds": times[client], "median": statistics.median(times[client]), "peak_rss_mb": rss[client]}  # type: ignore[index]
                            rate = args.records / statistics.median(times[client])
                            print(f"{role:8s} {key:40s} {rate:12,.0f} rec/s {rate * args.size / 1e6:8.1f} MB/s", flush=True)
            finally:
                server.stop()
    return results


#: (kafkakit variant, peer) pairs whose per-round ratios the report prints.
ROUND_PAIRS = [
    ("kafkakit", "aiokafka"), ("kafkakit", "confluent"), ("kafkakit-gather", "aiokafka-gather"),
    ("kafkakit-keyed", "confluent-keyed"), ("kafkakit-sticky", "confluent-sticky"),
]  # fmt: skip


def _by_round(table: dict[str, Any], group: str) -> list[str]:
    """Per-round ratios: rounds interleave the clients, so a round's ratio pairs runs made close together."""
    lines = []
    for mine, peer in ROUND_PAIRS:
        ours, theirs = table.get(f"{group}/{mine}"), table.get(f"{group}/{peer}")
        if ours and theirs:
            per_round = [b / a for a, b in zip(ours["seconds"], theirs["seconds"], strict=True)]
            lines.append(
                f"\n{mine} / {peer} by round: {', '.join(f'{r:.2f}x' for r in per_round)}"
                f" (median {statistics.median(per_round):.2f}x)"
            )
    return lines


def report(results: dict[str, object], records: int, size: int) -> str:
    lines = []
    for role in ("produce", "consume"):
        table: dict[str, dict[str, float]] = results[role]  # type: ignore[assignment]
        groups: dict[str, dict[str, float]] = {}
        for key, value in table.items():
            broker, codec, client = key.split("/")
            groups.setdefault(f"{broker}/{codec}", {})[client] = records / value["median"]
        for group, rates in groups.items():
            lines.append(f"\n### {role}, {group} ({records:,} records x {size} B, median)\n")
            peers = list(rates)
            lines.append("| client | records/s | MB/s | " + " | ".join(f"vs {p}" for p in peers) + " |")
            lines.append("|---|---:|---:|" + "---:|" * len(peers))
            for client, rate in rates.items():
                ratios = " | ".join(f"{rate / rates[p]:.2f}x" for p in peers)
                lines.append(f"| {client} | {rate:,.0f} | {rate * size / 1e6:.1f} | {ratios} |")
            peaks = {c: statistics.median(table[f"{group}/{c}"]["peak_rss_mb"]) for c in peers if table[f"{group}/{c}"].get("peak_rss_mb")}  # type: ignore[arg-type]
            if peaks:
                lines.append("\npeak RSS (MiB, median): " + ", ".join(f"{c} {mb:.0f}" for c, mb in peaks.items()))
            lines += _by_round(table, group)
    # broker_min against Apache Kafka with the same client (confluent-kafka).
    for role in ("produce", "consume"):
        table = results[role]  # type: ignore[assignment]
        for codec in {k.split("/")[1] for k in table}:
            a, b = table.get(f"broker_min/{codec}/confluent"), table.get(f"kafka/{codec}/confluent")
            if a and b:
                lines.append(f"\nbroker_min vs Apache Kafka, {role}, {codec}, confluent-kafka client: {b['median'] / a['median']:.2f}x")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument(
        "--size-spread", type=int, default=0,
        help="value lengths from size - S to size + S (JSON-like records) instead of all size bytes",
    )
    parser.add_argument(
        "--partitions", type=int, default=1,
        help="partitions of each producer's topic (partition=0 producers still use one; sticky and keyed spread)",
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--codecs", default="none,lz4")
    parser.add_argument("--brokers", default="broker_min,kafka")
    parser.add_argument("--producers", default=",".join(PRODUCERS))
    parser.add_argument("--consumers", default=",".join(CONSUMERS))
    parser.add_argument("--batching", choices=("tuned", "defaults"), default="tuned", help="producer batching: the same tuned settings for every client, or each client's defaults")
    parser.add_argument("--json", help="write the raw results to this file")
    parser.add_argument("--smoke", action="store_true", help="tiny run for CI: 20,000 records, one run, broker_min only")
    args = parser.parse_args()
    if args.worker:
        print(run_worker(json.loads(args.worker)), peak_rss_mb())
        return
    if args.smoke:
        records_given = "--records" in sys.argv
        args.records = args.records if records_given else 20_000
        args.runs, args.brokers = 1, "broker_min"
    os.environ["KAFKAKIT_BENCH_BATCHING"] = args.batching
    os.environ["KAFKAKIT_BENCH_SIZE_SPREAD"] = str(args.size_spread)
    results = measure(args)
    text = report(results, args.records, args.size)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
