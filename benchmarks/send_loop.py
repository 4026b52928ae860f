"""The per-record cost of the send loop alone: ``await producer.send(...)`` against ``produce()``.

Times only the loop that queues records, not their delivery: kafkakit's producer gets
a long linger and a large buffer, so its sender never runs inside the timed loop (it
cannot: ``await send()`` does not yield), and confluent-kafka's ``produce()`` only
enqueues (its encoding runs on librdkafka's threads). Each figure is the best of
``--passes`` passes of ``--records`` records, flushed between passes, against
broker_min as a child process. The whole-run figures, where encoding and the sender
count too, come from ``benchmarks/throughput.py``.

    python benchmarks/send_loop.py                   # 200,000 records x 100 B, 5 passes
    python benchmarks/send_loop.py --smoke

Shapes: ``partition`` (``partition=0``), ``sticky`` (no key, no partition), ``keyed``
(1,000 keys sent in turn: each topic remembers recent keys' partitions) and
``unique-keys`` (every record its own key: each one is hashed). Keyed records whose
key the topic does not remember are placed after the loop, in one pass: that pass is
timed with the loop. ``--partitions`` sets the topics' partition count (on one
partition no key is hashed).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from itertools import cycle, islice
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SHAPES = ["partition", "sticky", "keyed", "unique-keys"]


def _keys(shape: str, n: int) -> Iterator[bytes | None]:
    if shape == "keyed":
        return islice(cycle([b"key-%07d" % i for i in range(1000)]), n)
    if shape == "unique-keys":
        return iter([b"key-%07d" % i for i in range(n)])
    return iter([None] * n)


async def kafkakit_loop(bootstrap: str, shape: str, records: int, passes: int, value: bytes) -> float:
    """Best seconds per record of ``passes`` timed loops of ``records`` sends."""
    from kafkakit import Producer

    topic = f"send-loop-kafkakit-{shape}"
    async with Producer(bootstrap_servers=bootstrap, linger_ms=60_000, buffer_memory=1 << 30) as producer:
        await producer.partitions_for(topic)
        send = producer.send
        best = float("inf")
        for _ in range(passes):
            keys = list(_keys(shape, records))
            start = time.perf_counter()
            if shape == "partition":
                for _ in range(records):
                    await send(topic, value, partition=0)
            elif shape == "sticky":
                for _ in range(records):
                    await send(topic, value)
            else:
                for key in keys:
                    await send(topic, value, key=key)
                # Records of keys not seen lately wait to be placed together (hashed in one
                # numpy pass); the sender would do it on its next cycle. That work is part of
                # the cost of these sends, so it is timed.
                producer._acc.place_unplaced()
            best = min(best, time.perf_counter() - start)
            await producer.flush()
        return best / records


def confluent_loop(bootstrap: str, shape: str, records: int, passes: int, value: bytes) -> float:
    from confluent_kafka import Producer

    topic = f"send-loop-confluent-{shape}"
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 60_000,
            "queue.buffering.max.messages": 10_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
            "partitioner": "murmur2_random",  # Java's placement, as kafkakit's
        }
    )
    producer.list_topics(topic, timeout=10)
    produce = producer.produce
    best = float("inf")
    for _ in range(passes):
        keys = list(_keys(shape, records))
        start = time.perf_counter()
        if shape == "partition":
            for _ in range(records):
                produce(topic, value, partition=0)
        elif shape == "sticky":
            for _ in range(records):
                produce(topic, value)
        else:
            for key in keys:
                produce(topic, value, key=key)
        best = min(best, time.perf_counter() - start)
        producer.flush(60)
    return best / records


def measure(records: int, passes: int, size: int, rounds: int, partitions: int = 1) -> dict[str, dict[str, list[float]]]:
    import tests.brokers as brokers

    value = (b"0123456789abcdef" * (size // 16 + 1))[:size]
    results: dict[str, dict[str, list[float]]] = {shape: {"kafkakit": [], "confluent": []} for shape in SHAPES}
    with tempfile.TemporaryDirectory(prefix="kafkakit-send-loop-") as tmp:
        broker = brokers.BrokerMinProcess(
            Path(tmp) / "broker_min", extra_args=["--config", f"num.partitions={partitions}"]
        )
        broker.start()
        try:
            for _ in range(rounds):  # interleaved: each round runs every shape for both clients
                for shape in SHAPES:
                    results[shape]["kafkakit"].append(
                        asyncio.run(kafkakit_loop(broker.bootstrap_servers, shape, records, passes, value))
                    )
                    results[shape]["confluent"].append(
                        confluent_loop(broker.bootstrap_servers, shape, records, passes, value)
                    )
        finally:
            broker.stop()
    return results


def report(results: dict[str, dict[str, list[float]]], records: int, size: int) -> str:
    lines = [
        f"### The send loop alone ({records:,} records x {size} B, best pass, median of rounds)\n",
        "| shape | kafkakit `await send()` | confluent `produce()` | kafkakit / confluent |",
        "|---|---:|---:|---:|",
    ]
    for shape, by_client in results.items():
        ours: Any = statistics.median(by_client["kafkakit"])
        theirs: Any = statistics.median(by_client["confluent"])
        lines.append(f"| {shape} | {ours * 1e6:.2f} us | {theirs * 1e6:.2f} us | {theirs / ours:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=1, help="partitions of each topic (default 1)")
    parser.add_argument("--smoke", action="store_true", help="a few seconds, for the suite: 2,000 records, 1 pass, 1 round")
    args = parser.parse_args()
    if args.smoke:
        args.records, args.passes, args.rounds = 2_000, 1, 1
    results = measure(args.records, args.passes, args.size, args.rounds, args.partitions)
    print(report(results, args.records, args.size))


if __name__ == "__main__":
    main()
