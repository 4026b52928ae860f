"""Memory bounds (issue 10, item 8), measured as RSS of a client in its own interpreter.

- A producer whose broker stalls holds at most ``buffer_memory`` plus a constant
  (the requests in flight, at most max_in_flight x max_request_size, and
  allocator slack), however small the records; once the broker runs again,
  every record send() accepted is delivered.
- A consumer whose application stops reading prefetches at most about twice
  ``fetch_max_bytes`` (buffered plus in-flight data within fetch_max_bytes, and
  the receive buffer holding one response), however many partitions it has.

These are bounds, not timings; benchmarks/rss.py measures the same against the peers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kafkakit import Admin, Consumer, NewTopic, Producer, TopicPartition

from tests.brokers import BrokerMinProcess

ROOT = Path(__file__).resolve().parent.parent
MiB = 1 << 20
#: What a client may hold beyond its budget: five 1 MiB requests in flight plus allocator slack.
SLACK = 8 * MiB


def _worker(*args: object) -> dict[str, int]:
    result = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "memory_workers.py"), *map(str, args)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    parsed: dict[str, int] = json.loads(result.stdout.strip().splitlines()[-1])
    return parsed


@pytest.mark.parametrize(("size", "shape"), [(100, "partition"), (10_000, "partition"), (100, "keyed")])
async def test_a_stalled_broker_holds_the_producer_to_buffer_memory(
    broker_min_process: BrokerMinProcess, size: int, shape: str
) -> None:
    """``keyed``: a new 16-byte key per record over 4 partitions (keys parked, then placed),
    which held 1.6x the buffer before keys were charged their Python overhead."""
    buffer = 16 * MiB
    assert broker_min_process.pid is not None
    result = _worker("stalled-producer", broker_min_process.bootstrap_servers, broker_min_process.pid, size, buffer, 3, shape)
    assert result["growth"] <= buffer + SLACK, f"RSS grew {result['growth'] / MiB:.1f} MiB for a {buffer // MiB} MiB buffer"
    assert result["growth"] >= buffer // 2  # the buffer really filled up (the check above can fail)
    tps = [TopicPartition(str(result["topic"]), p) for p in range(4 if shape == "keyed" else 1)]
    async with Consumer(bootstrap_servers=broker_min_process.bootstrap_servers) as consumer:
        ends = await consumer.end_offsets(tps)
    assert sum(ends.values()) == result["accepted"]  # nothing accepted was lost


async def _fill(bootstrap: str, topic: str, partitions: int, megabytes_each: int) -> None:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    values = [os.urandom(100) for _ in range(10_000)]
    async with Producer(bootstrap_servers=bootstrap, acks=1) as producer:
        for partition in range(partitions):
            for _ in range(megabytes_each):
                await producer.send_batch(topic, values, partition=partition)
        await producer.flush()


@pytest.mark.parametrize(("partitions", "partition_max", "fetch_max"), [(40, 1 * MiB, 4 * MiB), (4, 8 * MiB, 16 * MiB)])
async def test_an_idle_consumer_prefetches_within_its_fetch_limits(
    broker_min_process: BrokerMinProcess, topic: str, partitions: int, partition_max: int, fetch_max: int
) -> None:
    await _fill(broker_min_process.bootstrap_servers, topic, partitions, 40 // partitions + 2)
    result = _worker("idle-consumer", broker_min_process.bootstrap_servers, topic, partitions, partition_max, fetch_max, 3)
    bound = 2 * fetch_max + SLACK
    assert result["growth"] <= bound, f"RSS grew {result['growth'] / MiB:.1f} MiB, bound {bound / MiB:.0f} MiB"
    assert result["growth"] >= fetch_max // 2  # it did prefetch (the bound can be hit)

