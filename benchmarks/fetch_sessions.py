"""KIP-227 fetch sessions: what they save a consumer of many quiet partitions.

One kafkakit consumer owns every partition of a 1,000-partition topic (read
from the end) while a producer trickles 100 records/s into random partitions,
the common shape of a consumer group member on a big, mostly idle topic. The
same run is made against broker_min with sessions (its default, 1,000 slots)
and with ``max.incremental.fetch.session.cache.slots=0``, under which every
Fetch is full; rounds alternate. Reported per run: the consumer's CPU seconds
per wall second, Fetch requests, partitions sent per request, request bytes
per Fetch (estimated from the partitions sent: 28 bytes each in Fetch v12 plus
the topic entry), and the broker's CPU seconds.

    python benchmarks/fetch_sessions.py                      # 1,000 partitions, 10 s, 3 rounds
    python benchmarks/fetch_sessions.py --smoke              # seconds
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: Fetch v12 bytes per partition entry: partition, leader epoch, offset, last fetched epoch,
#: log start offset, max bytes, tagged fields.
PARTITION_ENTRY_BYTES = 4 + 4 + 8 + 4 + 8 + 4 + 1


async def consume(bootstrap: str, topic: str, partitions: int, seconds: float) -> dict[str, Any]:
    from kafkakit import Consumer, TopicPartition

    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="latest", fetch_max_wait_ms=500) as consumer:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        for tp in tps[:1]:
            await consumer.position(tp)
        start_cpu = resource.getrusage(resource.RUSAGE_SELF)
        before = consumer.fetch_session_stats()
        start = time.monotonic()
        records = 0
        while time.monotonic() - start < seconds:
            for batch in (await consumer.getmany(timeout_ms=200)).values():
                records += len(batch)
        end_cpu = resource.getrusage(resource.RUSAGE_SELF)
        after = consumer.fetch_session_stats()
    cpu = (end_cpu.ru_utime - start_cpu.ru_utime) + (end_cpu.ru_stime - start_cpu.ru_stime)
    requests = after["requests"] - before["requests"]
    sent = after["partitions_sent"] - before["partitions_sent"]
    return {
        "cpu_per_s": cpu / seconds,
        "requests": requests,
        "partitions_per_request": sent / max(requests, 1),
        "request_bytes": PARTITION_ENTRY_BYTES * sent / max(requests, 1),
        "records": records,
        "incremental": after["incremental_requests"] - before["incremental_requests"],
    }


def broker_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime in clock ticks (USER_HZ = 100)


def run_round(sessions: bool, partitions: int, seconds: float, workdir: Path) -> dict[str, Any]:
    from tests.brokers import BrokerMinProcess

    slots = [] if sessions else ["--config", "max.incremental.fetch.session.cache.slots=0"]
    broker = BrokerMinProcess(workdir / f"broker-{sessions}-{time.time_ns()}", extra_args=slots)
    broker.start()
    try:
        topic = "quiet"
        asyncio.run(_create(broker.bootstrap_servers, topic, partitions))
        consumer = subprocess.Popen(
            [sys.executable, __file__, "--worker", json.dumps([broker.bootstrap_servers, topic, partitions, seconds])],
            stdout=subprocess.PIPE, text=True, cwd=ROOT,
        )  # fmt: skip
        assert broker.pid is not None
        cpu_before = broker_cpu(broker.pid)
        asyncio.run(_trickle(broker.bootstrap_servers, topic, partitions, seconds + 2))
        out, _ = consumer.communicate(timeout=seconds + 60)
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        result["broker_cpu_per_s"] = (broker_cpu(broker.pid) - cpu_before) / (seconds + 2)
        return result
    finally:
        broker.stop()


async def _create(bootstrap: str, topic: str, partitions: int) -> None:
    from kafkakit import Admin, NewTopic

    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, partitions, 1)])


async def _trickle(bootstrap: str, topic: str, partitions: int, seconds: float) -> None:
    from kafkakit import Producer

    async with Producer(bootstrap_servers=bootstrap) as producer:
        await producer.partitions_for(topic)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            await producer.send(topic, b"x" * 100, partition=random.randrange(partitions))
            await asyncio.sleep(0.01)  # about 100 records/s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        bootstrap, topic, partitions, seconds = json.loads(args.worker)
        print(json.dumps(asyncio.run(consume(bootstrap, topic, partitions, seconds))))
        return
    if args.smoke:
        args.partitions, args.seconds, args.runs = 50, 2.0, 1
    results: dict[str, list[dict[str, Any]]] = {"sessions": [], "full fetches": []}
    with tempfile.TemporaryDirectory(prefix="kafkakit-sessions-") as tmp:
        for _ in range(args.runs):
            for label, sessions in (("sessions", True), ("full fetches", False)):
                point = run_round(sessions, args.partitions, args.seconds, Path(tmp))
                results[label].append(point)
                print(f"{label:13s} consumer CPU {point['cpu_per_s']:.3f} s/s, broker CPU {point['broker_cpu_per_s']:.3f} s/s, "
                      f"{point['requests']} fetches, {point['partitions_per_request']:.1f} partitions/fetch, "
                      f"{point['records']} records", flush=True)  # fmt: skip
    print(f"\n{args.partitions} partitions, about 100 records/s, {args.seconds:.0f} s per run, median of {args.runs}:\n")
    print("| fetches | consumer CPU s/s | broker CPU s/s | partitions per Fetch | request bytes per Fetch (partitions) |")
    print("|---|---:|---:|---:|---:|")
    medians = {}
    for label, points in results.items():
        m = {k: statistics.median(p[k] for p in points) for k in ("cpu_per_s", "broker_cpu_per_s", "partitions_per_request", "request_bytes")}
        medians[label] = m
        print(f"| {label} | {m['cpu_per_s']:.3f} | {m['broker_cpu_per_s']:.3f} | {m['partitions_per_request']:.1f} | {m['request_bytes']:,.0f} |")
    s, f = medians["sessions"], medians["full fetches"]
    print(f"\nsessions / full fetches: consumer CPU {s['cpu_per_s'] / f['cpu_per_s']:.2f}x, broker CPU {s['broker_cpu_per_s'] / f['broker_cpu_per_s']:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
