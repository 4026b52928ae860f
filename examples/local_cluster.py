"""A 3-node broker_min cluster survives losing a partition leader.

    python examples/local_cluster.py

Starts three broker_min nodes (combined KRaft broker+controller processes) with
LocalCluster, creates a topic with 3 partitions replicated to all three nodes,
produces keyed records with acks=all, kills the leader of partition 0 with
SIGKILL halfway through, keeps producing while the controller elects a new
leader, then reads the topic back once and checks that every acknowledged
record is there exactly once, in order per partition.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict

from kafkakit import Admin, Consumer, NewTopic, Producer, TopicPartition
from kafkakit.broker import LocalCluster

TOPIC = "orders"
PARTITIONS = 3
RECORDS = 3000  # half before the kill, half after


async def produce(producer: Producer, first: int, count: int) -> list[tuple[int, int]]:
    """Send records ``first .. first+count-1`` and wait for every acknowledgement; (partition, n) each."""
    futures = [
        await producer.send(TOPIC, value=str(n).encode(), key=f"customer-{n % 30}".encode())
        for n in range(first, first + count)
    ]
    metadata = await asyncio.gather(*futures)
    return [(md.partition, n) for md, n in zip(metadata, range(first, first + count), strict=True)]


async def read_all(bootstrap: str, expected: int) -> dict[int, list[int]]:
    """Every record of the topic from the start, per partition, without a consumer group."""
    seen: dict[int, list[int]] = defaultdict(list)
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
        count = 0
        deadline = time.monotonic() + 30
        while count < expected:
            if time.monotonic() > deadline:
                raise SystemExit(f"stalled after reading {count} of {expected} records")
            for tp, records in (await consumer.getmany(timeout_ms=1000)).items():
                seen[tp.partition] += [int(r.value) for r in records if r.value is not None]
                count += len(records)
    return seen


async def main() -> None:
    started = time.monotonic()
    # min.insync.replicas=2: an acks=all write needs two in-sync copies, so the two survivors suffice.
    async with LocalCluster(nodes=3, config={"min.insync.replicas": "2"}) as cluster:
        print(f"3-node cluster up in {time.monotonic() - started:.1f}s: {cluster.bootstrap_servers}")
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            await admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=3)])
        for p in range(PARTITIONS):
            state = await cluster.partition_state(TOPIC, p, node_id=1)
            assert state is not None
            print(f"  {TOPIC}-{p}: leader {state.leader}, replicas {list(state.replicas)}, ISR {list(state.isr)}")

        before = await cluster.partition_state(TOPIC, 0, node_id=1)
        assert before is not None
        victim = before.leader
        acknowledged: list[tuple[int, int]] = []
        async with Producer(bootstrap_servers=cluster.bootstrap_servers, acks="all") as producer:
            acknowledged += await produce(producer, 0, RECORDS // 2)
            print(f"produced {len(acknowledged)} records with acks=all")

            await cluster.kill(victim)
            killed = time.monotonic()
            print(f"killed node {victim} (SIGKILL), the leader of {TOPIC}-0")
            acknowledged += await produce(producer, RECORDS // 2, RECORDS - RECORDS // 2)
            print(f"produced {RECORDS - RECORDS // 2} more, all acknowledged {time.monotonic() - killed:.1f}s after the kill")

        survivor = next(n for n in cluster.node_ids if n != victim)
        after = await cluster.partition_state(TOPIC, 0, node_id=survivor)
        assert after is not None and after.leader not in (victim, -1), after
        print(f"  {TOPIC}-0 now: leader {after.leader} (epoch {before.leader_epoch} -> {after.leader_epoch}), ISR {list(after.isr)}")

        seen = await read_all(cluster.bootstrap_servers, len(acknowledged))
        expected: dict[int, list[int]] = defaultdict(list)
        for partition, n in acknowledged:
            expected[partition].append(n)
        for p in range(PARTITIONS):
            assert seen[p] == expected[p], f"partition {p}: read back differs from what was acknowledged"
        total = sum(len(v) for v in seen.values())
        print(f"read back {total} records: every acknowledged record once, in order per partition")
    print(f"done in {time.monotonic() - started:.1f}s")


if __name__ == "__main__":
    asyncio.run(main())
