"""A job queue on Kafka: share-group workers (KIP-932) on an embedded broker.

    python examples/share_group_worker.py

Starts broker_min in a temporary directory and puts 60 jobs on a one-partition
topic. Three ShareConsumer workers in one share group read that partition
together: the broker hands each job to one worker at a time. A worker ACCEPTs
the jobs it finishes and RELEASEs the ones it cannot take right now (here: each
job whose number ends in 7, on its first delivery), so the broker delivers them
again, to any worker, with ``delivery_count`` 2. One job is poison: it fails
every time and is RELEASEd until the group's delivery-count limit (3) archives
it. The script checks that every other job was done exactly once and prints who
did what.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections import Counter

from kafkakit import AcknowledgeType, Admin, NewTopic, Producer, ShareConsumer
from kafkakit.broker import Broker

TOPIC = "jobs"
GROUP = "workers"
JOBS = 60
POISON = b"job-13"


class Worker:
    """One member of the share group: processes jobs and acknowledges each one explicitly."""

    def __init__(self, name: str, bootstrap: str) -> None:
        self.name = name
        self.consumer = ShareConsumer(
            TOPIC,
            bootstrap_servers=bootstrap,
            group_id=GROUP,
            share_acknowledgement_mode="explicit",
            max_poll_records=5,
            fetch_max_wait_ms=100,
        )
        self.done: list[bytes] = []
        self.released = 0

    async def run(self, finished: asyncio.Event, deliveries: Counter[bytes]) -> None:
        async with self.consumer as consumer:
            while not finished.is_set():
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    for record in records:
                        deliveries[record.value] += 1
                        retry_later = record.value.endswith(b"7") and record.delivery_count == 1
                        if record.value == POISON or retry_later:
                            consumer.acknowledge(record, AcknowledgeType.RELEASE)
                            self.released += 1
                        else:
                            await asyncio.sleep(0.005)  # "process" the job
                            consumer.acknowledge(record, AcknowledgeType.ACCEPT)
                            self.done.append(record.value)


async def main() -> int:
    with tempfile.TemporaryDirectory(prefix="kafkakit-share-") as data_dir:
        # Heartbeats every 200 ms so that workers get the partition quickly (Kafka's default is 5 s).
        async with Broker(data_dir, group_share_heartbeat_interval_ms=200) as broker:
            bootstrap = broker.bootstrap_servers
            print(f"broker_min on {bootstrap}")
            async with Admin(bootstrap_servers=bootstrap) as admin:
                await admin.create_topics([NewTopic(TOPIC, 1, 1)])
                # Group configs, as with kafka-configs --entity-type groups: start from the first job,
                # and archive a job after its third delivery.
                await admin.incremental_alter_configs(
                    GROUP,
                    {"share.auto.offset.reset": ("set", "earliest"), "share.delivery.count.limit": ("set", "3")},
                    resource_type="group",
                )
            async with Producer(bootstrap_servers=bootstrap, linger_ms=0) as producer:
                for i in range(JOBS):
                    await producer.send(TOPIC, b"job-%d" % i)
                    if i % 5 == 4:
                        await producer.flush()  # small batches: the workers take turns

            workers = [Worker(f"worker-{i}", bootstrap) for i in (1, 2, 3)]
            finished = asyncio.Event()
            deliveries: Counter[bytes] = Counter()
            tasks = [asyncio.create_task(w.run(finished, deliveries)) for w in workers]
            expected = {b"job-%d" % i for i in range(JOBS)} - {POISON}
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                done = [job for w in workers for job in w.done]
                if set(done) >= expected and deliveries[POISON] >= 3:
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.5)  # a fourth delivery of the poison job would show up now
            finished.set()
            await asyncio.gather(*tasks)

            async with Admin(bootstrap_servers=bootstrap) as admin:
                (group,) = await admin.describe_share_groups([GROUP])

    done = [job for w in workers for job in w.done]
    for w in workers:
        print(f"{w.name}: did {len(w.done)} jobs, released {w.released}")
    retried = sorted((job.decode() for job in expected if deliveries[job] == 2), key=lambda j: int(j[4:]))
    print(f"retried once and then done: {', '.join(retried)}")
    print(f"poison job {POISON.decode()}: delivered {deliveries[POISON]} times, then archived")
    print(f"group {GROUP!r} after the workers left: {group.state}, {len(group.members)} members")
    ok = sorted(done) == sorted(expected) and deliveries[POISON] == 3 and POISON not in done
    ok = ok and all(deliveries[job] == (2 if job.endswith(b"7") else 1) for job in expected)
    print("every job done exactly once" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
