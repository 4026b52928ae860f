"""Quick producer timing: kafkakit send()/send_batch() against aiokafka and confluent-kafka.

Produces N records of S bytes to a fresh one-partition topic per client (acks=1)
and prints records per second.  Runs against ``--bootstrap`` or, without it,
starts an Apache Kafka from ``tests/brokers.py`` (needs java and mvn).

    python benchmarks/producer_bench.py --records 1000000 --size 100
    python benchmarks/producer_bench.py --bootstrap 127.0.0.1:9092 --only kafkakit-send
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _topic(name: str) -> str:
    return f"bench-{name}-{uuid.uuid4().hex[:8]}"


async def kafkakit_send(bootstrap: str, n: int, value: bytes, acks: int) -> float:
    from kafkakit.producer import Producer

    async with Producer(bootstrap_servers=bootstrap, acks=acks) as producer:
        topic = _topic("kk-send")
        await producer.send_and_wait(topic, b"warm-up")
        send = producer.send
        start = time.perf_counter()
        for _ in range(n):
            await send(topic, value)
        await producer.flush()
        return time.perf_counter() - start


async def kafkakit_send_batch(bootstrap: str, n: int, value: bytes, acks: int) -> float:
    from kafkakit.producer import Producer

    async with Producer(bootstrap_servers=bootstrap, acks=acks) as producer:
        topic = _topic("kk-batch")
        await producer.send_and_wait(topic, b"warm-up")
        values = [value] * n
        start = time.perf_counter()
        await producer.send_batch(topic, values)
        await producer.flush()
        return time.perf_counter() - start


async def aiokafka_send(bootstrap: str, n: int, value: bytes, acks: int) -> float:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=acks)
    await producer.start()
    try:
        topic = _topic("aio")
        await producer.send_and_wait(topic, b"warm-up")
        start = time.perf_counter()
        for _ in range(n):
            await producer.send(topic, value)
        await producer.flush()
        return time.perf_counter() - start
    finally:
        await producer.stop()


async def confluent_produce(bootstrap: str, n: int, value: bytes, acks: int) -> float:
    from confluent_kafka import Producer as CProducer

    producer = CProducer({"bootstrap.servers": bootstrap, "acks": acks})
    topic = _topic("ck")
    producer.produce(topic, b"warm-up")
    producer.flush(30)
    produce, poll = producer.produce, producer.poll
    start = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                produce(topic, value)
                break
            except BufferError:  # local queue full: let librdkafka deliver some
                poll(0.005)
    producer.flush(120)
    return time.perf_counter() - start


BENCHES: dict[str, Callable[[str, int, bytes, int], Coroutine[Any, Any, float]]] = {
    "kafkakit-send": kafkakit_send,
    "aiokafka-send": aiokafka_send,
    "kafkakit-send_batch": kafkakit_send_batch,
    "confluent-produce": confluent_produce,
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap", help="host:port of a running broker (default: start Apache Kafka)")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--acks", type=int, default=1)
    parser.add_argument(
        "--only", action="append", choices=sorted(BENCHES), help="run only these (repeatable)"
    )
    args = parser.parse_args()
    server = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        from tests.brokers import KafkaServer

        server = KafkaServer()
        server.start()
        bootstrap = server.bootstrap_servers
    try:
        value = b"x" * args.size
        results = {}
        for name in args.only or list(BENCHES):
            seconds = asyncio.run(BENCHES[name](bootstrap, args.records, value, args.acks))
            results[name] = args.records / seconds
            print(f"{name:22s} {results[name]:>12,.0f} records/s  ({seconds:.2f}s)", flush=True)
        if "kafkakit-send" in results and "aiokafka-send" in results:
            print(f"send() vs aiokafka:          {results['kafkakit-send'] / results['aiokafka-send']:.2f}x")
        if "kafkakit-send_batch" in results and "confluent-produce" in results:
            print(
                f"send_batch() vs confluent:   {results['kafkakit-send_batch'] / results['confluent-produce']:.2f}x"
            )
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
