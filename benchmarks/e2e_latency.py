"""Produce-to-consume latency at fixed rates: kafkakit against confluent-kafka and aiokafka.

Measured like Kafka's EndToEndLatency tool (a record's latency is the time from
just before the producer's send call to the moment the consumer hands it to the
application), but at fixed rates instead of one record in flight, because
latency under load is what applications see:

- a consumer process (manual assignment at the end of a fresh one-partition
  topic) starts first and says when it is ready;
- a producer process of the same library then sends ``--seconds`` of records at
  the rate, paced every millisecond (the value carries ``time.time_ns()`` of the
  send; both processes read the same clock);
- the first second is warm-up and not counted; the consumer reports p50, p99,
  p99.9 and max of the rest, and the rate the producer really achieved.

Every client gets linger 0 (librdkafka's default is 5 ms, which would add 5 ms
to its figures), acks=1, and the consumer defaults otherwise (fetch.min.bytes 1,
so the broker answers as soon as a record arrives). Rounds are interleaved
(every client at every rate, then again), and each figure is the median of the
rounds. Ratios are kafkakit / peer: below 1.00x kafkakit is faster.

    python benchmarks/e2e_latency.py                                   # both brokers, 3 clients, 1k/10k/100k per s
    python benchmarks/e2e_latency.py --smoke                           # seconds: broker_min, 1k/s, kafkakit + confluent
    python benchmarks/e2e_latency.py --brokers kafka --rates 10000 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
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
sys.path.insert(0, str(ROOT / "benchmarks"))

from throughput import create_topic, start_broker  # noqa: E402  (broker start-up and topics are shared)

CLIENTS = ("kafkakit", "confluent", "aiokafka")
RATES = (1000, 10000, 100000)
VALUE_SIZE = 100
WARMUP_S = 1.0
TICK_S = 0.001


def _value(now_ns: int) -> bytes:
    return now_ns.to_bytes(8, "big") + b"x" * (VALUE_SIZE - 8)


# -- producers: send `rate` records a second for `seconds`, paced every millisecond -------------


def _due(start: float, rate: int, sent: int, total: int) -> int:
    return min(total, int((time.perf_counter() - start) * rate) + 1) - sent


async def _produce_kafkakit(bootstrap: str, topic: str, rate: int, total: int) -> float:
    from kafkakit import Producer

    async with Producer(bootstrap_servers=bootstrap, acks=1, linger_ms=0) as producer:
        await producer.partitions_for(topic)
        start, sent = time.perf_counter(), 0
        while sent < total:
            for _ in range(_due(start, rate, sent, total)):
                await producer.send(topic, _value(time.time_ns()), partition=0)
                sent += 1
            await asyncio.sleep(TICK_S)
        await producer.flush()
        return sent / (time.perf_counter() - start)


async def _produce_aiokafka(bootstrap: str, topic: str, rate: int, total: int) -> float:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=0)
    await producer.start()
    try:
        await producer.partitions_for(topic)
        start, sent = time.perf_counter(), 0
        while sent < total:
            for _ in range(_due(start, rate, sent, total)):
                await producer.send(topic, _value(time.time_ns()), partition=0)
                sent += 1
            await asyncio.sleep(TICK_S)
        await producer.flush()
        return sent / (time.perf_counter() - start)
    finally:
        await producer.stop()


def _produce_confluent(bootstrap: str, topic: str, rate: int, total: int) -> float:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0, "enable.idempotence": False})
    producer.list_topics(topic, timeout=10)
    start, sent = time.perf_counter(), 0
    while sent < total:
        for _ in range(_due(start, rate, sent, total)):
            producer.produce(topic, _value(time.time_ns()), partition=0)
            sent += 1
        producer.poll(0)
        time.sleep(TICK_S)
    producer.flush(30)
    return sent / (time.perf_counter() - start)


# -- consumers: read from the end, record now - sent for each record --------------------------


def _ready() -> None:
    print("ready", flush=True)


async def _consume_kafkakit(bootstrap: str, topic: str, total: int, deadline: float) -> list[int]:
    from kafkakit import Consumer, TopicPartition

    tp = TopicPartition(topic, 0)
    async with Consumer(bootstrap_servers=bootstrap) as consumer:
        consumer.assign([tp])
        await consumer.seek_to_end(tp)
        await consumer.position(tp)
        _ready()
        received: list[int] = []
        while len(received) < total and time.time() < deadline:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                now = time.time_ns()
                received.extend(now - int.from_bytes(r.value[:8], "big") for r in records)
        return received


async def _consume_aiokafka(bootstrap: str, topic: str, total: int, deadline: float) -> list[int]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    tp = TopicPartition(topic, 0)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.seek_to_end(tp)
        await consumer.position(tp)
        _ready()
        received: list[int] = []
        while len(received) < total and time.time() < deadline:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                now = time.time_ns()
                received.extend(now - int.from_bytes(r.value[:8], "big") for r in records)
        return received
    finally:
        await consumer.stop()


def _consume_confluent(bootstrap: str, topic: str, total: int, deadline: float) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lat-" + uuid.uuid4().hex, "enable.auto.commit": False})
    _, end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    consumer.assign([TopicPartition(topic, 0, end)])  # an explicit offset: nothing sent later is skipped
    consumer.consume(num_messages=1, timeout=0.2)  # connected and fetching
    _ready()
    received: list[int] = []
    while len(received) < total and time.time() < deadline:
        # poll() returns as soon as a message is there; consume(n, timeout) would wait for n or the timeout.
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            received.append(time.time_ns() - int.from_bytes(message.value()[:8], "big"))
    consumer.close()
    return received


# -- workers and the driver ------------------------------------------------------------------


def run_worker(spec: dict[str, Any]) -> dict[str, Any]:
    client, role = spec["client"], spec["role"]
    bootstrap, topic, rate, total = spec["bootstrap"], spec["topic"], int(spec["rate"]), int(spec["total"])
    if role == "produce":  # the rate achieved from the first send to the last acknowledgement
        if client == "kafkakit":
            achieved = asyncio.run(_produce_kafkakit(bootstrap, topic, rate, total))
        elif client == "aiokafka":
            achieved = asyncio.run(_produce_aiokafka(bootstrap, topic, rate, total))
        else:
            achieved = _produce_confluent(bootstrap, topic, rate, total)
        return {"achieved_rate": achieved}
    deadline = time.time() + float(spec["timeout"])
    if client == "kafkakit":
        latencies = asyncio.run(_consume_kafkakit(bootstrap, topic, total, deadline))
    elif client == "aiokafka":
        latencies = asyncio.run(_consume_aiokafka(bootstrap, topic, total, deadline))
    else:
        latencies = _consume_confluent(bootstrap, topic, total, deadline)
    counted = latencies[int(WARMUP_S * rate) :]
    return {"received": len(latencies), **_percentiles(counted)}


def _percentiles(latencies_ns: list[int]) -> dict[str, float]:
    if not latencies_ns:
        return {"p50": -1.0, "p99": -1.0, "p99.9": -1.0, "max": -1.0}
    ordered = sorted(latencies_ns)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1e6  # ms

    return {"p50": at(0.50), "p99": at(0.99), "p99.9": at(0.999), "max": ordered[-1] / 1e6}


def measure_point(bootstrap: str, client: str, rate: int, seconds: float) -> dict[str, Any]:
    """One client at one rate: consumer first (ready), then the producer; both in fresh interpreters."""
    topic = f"lat-{client}-{rate}-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    total = int(rate * (seconds + WARMUP_S))
    spec = {"client": client, "bootstrap": bootstrap, "topic": topic, "rate": rate, "total": total}
    timeout = seconds + WARMUP_S + 60
    consumer = subprocess.Popen(
        [sys.executable, __file__, "--worker", json.dumps({**spec, "role": "consume", "timeout": timeout})],
        stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    try:
        assert consumer.stdout is not None
        if consumer.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{client} consumer did not start")
        produced = subprocess.run(
            [sys.executable, __file__, "--worker", json.dumps({**spec, "role": "produce"})],
            capture_output=True, text=True, cwd=ROOT, timeout=timeout, check=True,
        )  # fmt: skip
        out, _ = consumer.communicate(timeout=timeout)
    finally:
        if consumer.poll() is None:
            consumer.kill()
    producer_result = json.loads(produced.stdout.strip().splitlines()[-1])
    result = json.loads(out.strip().splitlines()[-1])
    result["achieved_rate"] = producer_result["achieved_rate"]
    result["lost"] = total - result["received"]
    return result


def measure(args: argparse.Namespace) -> dict[str, Any]:
    clients = args.clients.split(",")
    rates = [int(r) for r in args.rates.split(",")]
    results: dict[str, Any] = {"args": vars(args), "points": {}}
    with tempfile.TemporaryDirectory(prefix="kafkakit-latency-") as tmp:
        for broker_kind in args.brokers.split(","):
            server = start_broker(broker_kind, Path(tmp))
            try:
                for round_ in range(args.runs):
                    for rate in rates:
                        for client in clients:
                            point = measure_point(server.bootstrap_servers, client, rate, args.seconds)
                            key = f"{broker_kind}/{rate}/{client}"
                            results["points"].setdefault(key, []).append(point)
                            print(
                                f"{broker_kind:<10} {rate:>7}/s {client:<10} round {round_ + 1}: "
                                f"p50 {point['p50']:7.2f} ms  p99 {point['p99']:7.2f} ms  p99.9 {point['p99.9']:7.2f} ms  "
                                f"(sent {point['achieved_rate']:,.0f}/s, lost {point['lost']})",
                                flush=True,
                            )
            finally:
                server.stop()
    return results


def report(results: dict[str, Any]) -> str:
    args = results["args"]
    lines: list[str] = []
    clients = args["clients"].split(",")
    for broker_kind in args["brokers"].split(","):
        for rate in (int(r) for r in args["rates"].split(",")):
            lines.append(f"\n### {broker_kind}, {rate:,} records/s ({args['seconds']:.0f} s measured, median of {args['runs']})\n")
            lines.append("| client | p50 ms | p99 ms | p99.9 ms | max ms | achieved rate | kafkakit / client (p50, p99, p99.9) |")
            lines.append("|---|---:|---:|---:|---:|---:|---|")
            medians = {}
            for client in clients:
                points = results["points"].get(f"{broker_kind}/{rate}/{client}", [])
                if not points:
                    continue
                medians[client] = {q: statistics.median(p[q] for p in points) for q in ("p50", "p99", "p99.9", "max", "achieved_rate")}
            base = medians.get("kafkakit")
            for client, m in medians.items():
                ratio = ", ".join(f"{base[q] / m[q]:.2f}x" for q in ("p50", "p99", "p99.9")) if base and m["p50"] > 0 else "-"
                lines.append(
                    f"| {client} | {m['p50']:.2f} | {m['p99']:.2f} | {m['p99.9']:.2f} | {m['max']:.1f} | "
                    f"{m['achieved_rate']:,.0f}/s | {ratio} |"
                )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--brokers", default="broker_min,kafka")
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--rates", default=",".join(map(str, RATES)))
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds per point (after 1 s of warm-up)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", help="write the raw results to this file")
    parser.add_argument("--smoke", action="store_true", help="seconds: broker_min, 1k/s, kafkakit and confluent, one run")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(run_worker(json.loads(args.worker))))
        return
    if args.smoke:
        args.brokers, args.clients, args.rates, args.seconds, args.runs = "broker_min", "kafkakit,confluent", "1000", 1.0, 1
    results = measure(args)
    print(report(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
