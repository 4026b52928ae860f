"""Child-process workers for tests/test_memory_limits.py and benchmarks/rss.py: each prints one JSON line.

Run in a fresh interpreter so that RSS (``/proc/self/status``) measures the
client alone. ``python tests/memory_workers.py stalled-producer BOOTSTRAP BROKER_PID SIZE BUFFER SECONDS``
and ``python tests/memory_workers.py idle-consumer BOOTSTRAP TOPIC PARTITIONS PARTITION_MAX FETCH_MAX SECONDS``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time


def rss() -> int:
    with open(f"/proc/{os.getpid()}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


async def _watch(seconds: float, base: int) -> int:
    peak = base
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        await asyncio.sleep(0.02)
        peak = max(peak, rss())
    return peak


async def stalled_producer(
    bootstrap: str, broker_pid: int, size: int, buffer: int, seconds: float, keyed: bool = False
) -> dict[str, float]:
    """Send distinct records as fast as send() accepts them while the broker is SIGSTOPped
    (``keyed``: each with a new 16-byte key, over 4 partitions; else to partition 0)."""
    from kafkakit import Admin, NewTopic, Producer

    pad = os.urandom(max(size - 8, 0))
    topic = f"stalled-{time.time_ns()}"
    if keyed:
        async with Admin(bootstrap_servers=bootstrap) as admin:
            await admin.create_topics([NewTopic(topic, 4, 1)])
    async with Producer(
        bootstrap_servers=bootstrap, acks=1, buffer_memory=buffer, delivery_timeout_ms=600000, request_timeout_ms=300000
    ) as producer:
        await producer.partitions_for(topic)
        for i in range(100):
            await producer.send(topic, i.to_bytes(8, "big") + pad, partition=0)
        await producer.flush()
        accepted = 100
        base = rss()
        os.kill(broker_pid, signal.SIGSTOP)

        async def send_forever() -> None:
            nonlocal accepted
            while True:
                if keyed:
                    await producer.send(topic, accepted.to_bytes(8, "big") + pad, key=b"key-%012d" % accepted)
                else:
                    await producer.send(topic, accepted.to_bytes(8, "big") + pad, partition=0)
                accepted += 1

        task = asyncio.create_task(send_forever())
        try:
            peak = await _watch(seconds, base)
        finally:
            task.cancel()
            os.kill(broker_pid, signal.SIGCONT)
        await producer.flush()  # everything accepted is delivered once the broker runs again
    return {"topic": topic, "accepted": accepted, "growth": peak - base}  # type: ignore[dict-item]


async def idle_consumer(
    bootstrap: str, topic: str, partitions: int, partition_max: int, fetch_max: int, seconds: float
) -> dict[str, float]:
    """Assign every partition of a full topic, then leave the consumer alone (no getmany) for a while."""
    from kafkakit import Consumer, TopicPartition

    async with Consumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest",
        max_partition_fetch_bytes=partition_max, fetch_max_bytes=fetch_max,
    ) as consumer:  # fmt: skip
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        base = rss()
        peak = await _watch(seconds, base)
        read = 0
        while read < 1000:  # the prefetched data is usable
            for records in (await consumer.getmany(timeout_ms=2000)).values():
                read += len(records)
    return {"growth": peak - base}


def main() -> None:
    kind, args = sys.argv[1], sys.argv[2:]
    if kind == "stalled-producer":
        keyed = len(args) > 5 and args[5] == "keyed"
        result = asyncio.run(stalled_producer(args[0], int(args[1]), int(args[2]), int(args[3]), float(args[4]), keyed))
    else:
        result = asyncio.run(idle_consumer(args[0], args[1], int(args[2]), int(args[3]), int(args[4]), float(args[5])))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
