"""A consumer group on an embedded broker: members join and leave, partitions move, nothing is lost.

    python examples/consumer_group.py

Starts broker_min in a temporary directory, creates a 6-partition topic and
keeps producing to it while three consumers join one group and the first one
leaves. Each member commits what it processed after every batch, and in its
rebalance listener before giving partitions up, so every record is consumed
exactly once; the script checks that and prints who owned what at each step.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections import Counter

from kafkakit import Admin, Consumer, NewTopic, Producer, TopicPartition
from kafkakit.broker import Broker
from kafkakit.consumer import ConsumerRebalanceListener
from kafkakit.errors import CommitFailedError, RebalanceInProgressError

TOPIC = "orders"
GROUP = "billing"
PARTITIONS = 6
RECORDS = 3000


class Worker(ConsumerRebalanceListener):
    """One group member: processes records, commits after processing, commits again on revocation."""

    def __init__(self, name: str, bootstrap: str) -> None:
        self.name = name
        self.consumer = Consumer(
            bootstrap_servers=bootstrap,
            group_id=GROUP,
            enable_auto_commit=False,  # we commit what we processed, not what we fetched
            auto_offset_reset="earliest",
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
            fetch_max_wait_ms=100,
        )
        self.consumer.subscribe([TOPIC], listener=self)
        self.processed: list[tuple[int, int]] = []
        self.pending: dict[TopicPartition, int] = {}
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.consumer.start()
        self.task = asyncio.create_task(self.run())

    async def run(self) -> None:
        while True:
            for tp, records in (await self.consumer.getmany(timeout_ms=200)).items():
                self.processed.extend((tp.partition, r.offset) for r in records)  # "process" them
                self.pending[tp] = records[-1].offset + 1
            await self.commit(set(self.pending))

    async def commit(self, partitions: set[TopicPartition]) -> None:
        offsets = {tp: o for tp, o in self.pending.items() if tp in partitions}
        if not offsets:
            return
        try:
            await self.consumer.commit(offsets)
        except (RebalanceInProgressError, CommitFailedError):
            return  # still pending: committed after the rebalance or when revoked
        for tp, offset in offsets.items():
            if self.pending.get(tp) == offset:
                del self.pending[tp]

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.commit(revoked)
        print(f"  {self.name} gives up  {_names(revoked)}")

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        if assigned:
            print(f"  {self.name} receives {_names(assigned)}")

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        await self.consumer.stop()  # revokes (committing) and leaves the group


def _names(tps: set[TopicPartition]) -> str:
    return "[" + ", ".join(str(tp.partition) for tp in sorted(tps)) + "]"


async def settled(workers: list[Worker], timeout: float = 30) -> None:
    """Wait until the workers own every partition between them, evenly, and print the table."""
    deadline = time.monotonic() + timeout
    while True:
        owned = [w.consumer.assignment() for w in workers]
        sizes = [len(o) for o in owned]
        if sum(sizes) == PARTITIONS and len(set().union(*owned)) == PARTITIONS and max(sizes) - min(sizes) <= 1:
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"the group did not settle: {owned}")
        await asyncio.sleep(0.05)
    for w, o in zip(workers, owned, strict=True):
        print(f"    {w.name}: partitions {_names(o)}")


async def produce(bootstrap: str) -> None:
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
        for i in range(RECORDS):
            await producer.send(TOPIC, value=b"order %d" % i, partition=i % PARTITIONS)
            if i % 300 == 299:
                await producer.flush()
                await asyncio.sleep(0.3)  # spread the load over the membership changes


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="kafkakit-group-") as data_dir:
        async with Broker(data_dir) as broker:
            bootstrap = broker.bootstrap_servers
            print(f"broker_min on {bootstrap}")
            async with Admin(bootstrap_servers=bootstrap) as admin:
                await admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS)])
            producing = asyncio.create_task(produce(bootstrap))
            workers = [Worker(f"member-{i}", bootstrap) for i in (1, 2, 3)]
            started = time.monotonic()
            for count in (1, 2, 3):
                print(f"member-{count} joins")
                await workers[count - 1].start()
                await settled(workers[:count])
            print("member-1 leaves")
            await workers[0].stop()
            await settled(workers[1:])
            await producing
            while len({r for w in workers for r in w.processed}) < RECORDS:
                if time.monotonic() - started > 120:
                    raise SystemExit("not every record was consumed")
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.5)
            for w in workers[1:]:
                await w.stop()
            counts = Counter(r for w in workers for r in w.processed)
            duplicates = sum(1 for n in counts.values() if n > 1)
            per_member = {w.name: len(w.processed) for w in workers}
            print(f"consumed {len(counts)} of {RECORDS} records, {duplicates} twice: {per_member}")
            if len(counts) != RECORDS or duplicates:
                sys.exit(1)


if __name__ == "__main__":
    asyncio.run(main())
