"""Consumer group latencies: kafkakit and confluent-kafka on broker_min and Apache Kafka.

    python benchmarks/groups.py                       # both brokers (Kafka needs java and mvn)
    python benchmarks/groups.py --brokers broker_min --runs 1
    python benchmarks/groups.py --protocols eager,consumer --clients kafkakit

Two figures per client and broker:

- **first records**: from creating a consumer in a new group (subscribe +
  start) to the first record of a 6-partition topic that already has data.
  Dominated by the coordinator's initial rebalance delay: broker_min's
  ``group_initial_rebalance_delay_ms`` default (100 ms) and the test Kafka's
  ``group.initial.rebalance.delay.ms=0`` (Kafka's own default is 3000 ms).
- **rebalance pause**: members A and C read 3 partitions each of a topic
  written to every 10 ms; member B joins. The figure is the longest gap
  between records of the partitions A and C keep, from B's start until all
  three have settled plus a second: eager (range) stops every partition until
  the slowest member has rejoined, cooperative-sticky should not stop the kept
  ones at all. The baseline is the longest gap in the same partitions over an
  equally long window before B joins (the normal fetch cadence). Each
  member's revocation callback takes ``--revoke-ms`` (200 ms: flushing state
  for the partitions given up); with 0, a local 3-member rebalance is so fast
  that eager and cooperative look alike (members heartbeat in phase, so they
  all rejoin within milliseconds).

Three protocols: classic eager (range), classic cooperative (cooperative-sticky) and
the KIP-848 consumer protocol (``group_protocol="consumer"`` / ``group.protocol=consumer``),
where the broker assigns (its default assignor, uniform) and members reconcile
revoke-first: the kept partitions should never stop, and the new member's share
moves as soon as its previous owners acknowledge the revocation on their next
heartbeat (Kafka's ``group.consumer.heartbeat.interval.ms``, 5 s by default).

Classic members: session timeout 10 s, heartbeat 1 s for every client; KIP-848
members take both from the broker. Each cell is the median of ``--runs``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PARTITIONS = 6
SESSION_MS = 10000
HEARTBEAT_MS = 1000
#: The "strategy" that selects the KIP-848 consumer group protocol instead of a classic assignor.
KIP848 = "consumer"
#: (strategy, label) of each protocol measured.
PROTOCOLS = {
    "eager": ("range", "classic eager"),
    "cooperative": ("cooperative-sticky", "classic cooperative"),
    "consumer": (KIP848, "consumer (KIP-848)"),
}


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    deadline = time.time() + 30
    while time.time() < deadline:
        meta = admin.list_topics(topic, timeout=10).topics.get(topic)
        if meta is not None and meta.error is None and len(meta.partitions) == PARTITIONS:
            return
        time.sleep(0.05)


def fill(bootstrap: str, topic: str, per_partition: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(per_partition * PARTITIONS):
        producer.produce(topic, value=b"%d" % i, partition=i % PARTITIONS)
    producer.flush(30)


def produce_until(bootstrap: str, topic: str, stop: threading.Event) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    while not stop.is_set():
        for p in range(PARTITIONS):
            producer.produce(topic, value=b"x", partition=p)
        producer.poll(0)
        time.sleep(0.01)
    producer.flush(10)


# -- members: one interface over kafkakit (async) and confluent-kafka (a thread) --------------


class Member:
    """A group member reading in the background; ``arrivals[partition]`` are monotonic times."""

    def __init__(self) -> None:
        self.arrivals: dict[int, list[float]] = defaultdict(list)
        self.owned: set[int] = set()

    async def start(self) -> None: ...
    async def stop(self) -> None: ...


class KafkakitMember(Member):
    def __init__(self, bootstrap: str, group: str, topic: str, strategy: str, revoke_seconds: float) -> None:
        super().__init__()
        from kafkakit import Consumer
        from kafkakit.consumer import ConsumerRebalanceListener

        class Flush(ConsumerRebalanceListener):
            async def on_partitions_revoked(self, revoked: set[Any]) -> None:
                if revoked:
                    await asyncio.sleep(revoke_seconds)  # e.g. flush state for the partitions given up

        # KIP-848: the broker owns the assignor, session and heartbeat settings (classic-only here).
        group_settings: dict[str, Any] = (
            {"group_protocol": "consumer"}
            if strategy == KIP848
            else {
                "partition_assignment_strategy": [strategy],
                "session_timeout_ms": SESSION_MS,
                "heartbeat_interval_ms": HEARTBEAT_MS,
            }
        )
        self.consumer = Consumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=100,
            **group_settings,
        )
        self.consumer.subscribe([topic], listener=Flush())
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.consumer.start()
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            batches = await self.consumer.getmany(timeout_ms=50)
            now = time.monotonic()
            for tp in batches:
                self.arrivals[tp.partition].append(now)
            self.owned = {tp.partition for tp in self.consumer.assignment()}

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        await self.consumer.stop()


class ConfluentMember(Member):
    def __init__(self, bootstrap: str, group: str, topic: str, strategy: str, revoke_seconds: float) -> None:
        super().__init__()
        self.revoke_seconds = revoke_seconds
        group_settings: dict[str, Any] = (
            {"group.protocol": "consumer"}
            if strategy == KIP848
            else {
                "partition.assignment.strategy": strategy,
                "session.timeout.ms": SESSION_MS,
                "heartbeat.interval.ms": HEARTBEAT_MS,
            }
        )
        self.config = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
            **group_settings,
        }
        self.topic = topic
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    async def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer(self.config)

        def on_revoke(_consumer: Any, partitions: list[Any]) -> None:
            if partitions:
                time.sleep(self.revoke_seconds)  # runs inside poll(), like any librdkafka callback

        consumer.subscribe([self.topic], on_revoke=on_revoke)
        try:
            while not self.stopping.is_set():
                message = consumer.poll(0.05)
                now = time.monotonic()
                partition = None if message is None or message.error() else message.partition()
                if partition is not None:
                    self.arrivals[partition].append(now)
                self.owned = {tp.partition for tp in consumer.assignment()}
        finally:
            consumer.close()

    async def stop(self) -> None:
        self.stopping.set()
        if self.thread.ident is not None:
            await asyncio.to_thread(self.thread.join, 30)


MEMBERS: dict[str, Callable[[str, str, str, str, float], Member]] = {
    "kafkakit": KafkakitMember,
    "confluent": ConfluentMember,
}


async def wait_for(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        await asyncio.sleep(0.01)


async def first_records(client: str, bootstrap: str, topic: str, strategy: str) -> float:
    """Seconds from creating a member of a new group to its first record."""
    started = time.monotonic()
    member = MEMBERS[client](bootstrap, f"bench-{uuid.uuid4().hex[:8]}", topic, strategy, 0.0)
    await member.start()
    try:
        await wait_for(lambda: bool(member.arrivals), 60)
        return min(t for times in member.arrivals.values() for t in times) - started
    finally:
        await member.stop()


def longest_gap(member: Member, partitions: set[int], start: float, end: float) -> float:
    """The longest stretch in [start, end] without a record of one of ``partitions``."""
    worst = 0.0
    for p in partitions:
        times = [start, *(t for t in member.arrivals[p] if start <= t <= end), end]
        worst = max([worst, *(y - x for x, y in zip(times, times[1:], strict=False))])
    return worst


async def rebalance_pause(
    client: str, strategy: str, bootstrap: str, revoke_seconds: float
) -> tuple[float, float]:
    """(baseline, pause): the longest gap in the partitions A and C keep while B joins them,
    and the longest gap in the same partitions over as long a quiet window before."""
    topic = f"bench-groups-{uuid.uuid4().hex[:8]}"
    await asyncio.to_thread(create_topic, bootstrap, topic)
    stop = threading.Event()
    producing = asyncio.create_task(asyncio.to_thread(produce_until, bootstrap, topic, stop))
    group = f"bench-{uuid.uuid4().hex[:8]}"
    a, b, c = (MEMBERS[client](bootstrap, group, topic, strategy, revoke_seconds) for _ in range(3))
    try:
        await a.start()
        await c.start()
        await wait_for(
            lambda: all(len(m.owned) == 3 and all(p in m.arrivals for p in m.owned) for m in (a, c)), 60
        )
        before = {id(a): set(a.owned), id(c): set(c.owned)}
        quiet = time.monotonic()
        await asyncio.sleep(2.0)
        joined = time.monotonic()
        await b.start()
        await wait_for(lambda: all(len(m.owned) == 2 for m in (a, b, c)) and len(b.arrivals) == 2, 60)
        await asyncio.sleep(1.0)
        settled = time.monotonic()
        window = settled - joined
        pause = baseline = 0.0
        for m in (a, c):
            kept = before[id(m)] & m.owned
            pause = max(pause, longest_gap(m, kept, joined, settled))
            baseline = max(baseline, longest_gap(m, kept, quiet, min(joined, quiet + window)))
        return baseline, pause
    finally:
        stop.set()
        await producing
        for m in (a, b, c):
            await m.stop()


def start_broker(kind: str, workdir: Path) -> Any:
    import tests.brokers as brokers

    server: Any = (
        brokers.BrokerMinProcess(workdir / "broker_min")
        if kind == "broker_min"
        else brokers.KafkaServer(workdir / "kafka")
    )
    server.start()
    return server


async def measure(args: argparse.Namespace) -> list[tuple[str, str, str, float]]:
    rows: list[tuple[str, str, str, float]] = []
    with tempfile.TemporaryDirectory(prefix="kafkakit-groups-bench-") as tmp:
        for kind in args.brokers.split(","):
            server = start_broker(kind, Path(tmp))
            try:
                bootstrap = server.bootstrap_servers
                topic = f"bench-first-{uuid.uuid4().hex[:8]}"
                await asyncio.to_thread(create_topic, bootstrap, topic)
                await asyncio.to_thread(fill, bootstrap, topic, 100)
                protocols = [PROTOCOLS[name] for name in args.protocols.split(",")]
                # Unrecorded: the broker's first group creates the offsets topic.
                await first_records(args.clients.split(",")[0], bootstrap, topic, "range")
                for client in args.clients.split(","):
                    for strategy, label in protocols:
                        runs = [
                            await first_records(client, bootstrap, topic, strategy) for _ in range(args.runs)
                        ]
                        rows.append(
                            (kind, client, f"first records after subscribe, {label}", statistics.median(runs))
                        )
                        print(
                            f"{kind:10s} {client:9s} first records, {label:20s} {statistics.median(runs) * 1000:8.0f} ms",
                            flush=True,
                        )
                    for strategy, label in protocols:
                        pairs = [
                            await rebalance_pause(client, strategy, bootstrap, args.revoke_ms / 1000)
                            for _ in range(args.runs)
                        ]
                        baseline = statistics.median(p[0] for p in pairs)
                        pause = statistics.median(p[1] for p in pairs)
                        rows.append(
                            (kind, client, f"longest gap without a rebalance ({label} run)", baseline)
                        )
                        rows.append((kind, client, f"longest gap of kept partitions, {label}", pause))
                        print(
                            f"{kind:10s} {client:9s} {label:20s} pause {pause * 1000:6.0f} ms (baseline {baseline * 1000:.0f} ms)",
                            flush=True,
                        )
            finally:
                server.stop()
    return rows


def print_table(rows: list[tuple[str, str, str, float]]) -> None:
    print()
    print("| broker | client | measure | ms |")
    print("|---|---|---|---:|")
    for kind, client, what, seconds in rows:
        print(f"| {kind} | {client} | {what} | {seconds * 1000:.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--brokers", default="broker_min,kafka")
    parser.add_argument("--clients", default="kafkakit,confluent")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--protocols", default="eager,cooperative,consumer", help="of eager, cooperative, consumer (KIP-848)"
    )
    parser.add_argument(
        "--revoke-ms",
        type=int,
        default=200,
        help="time each member's revocation callback takes (default 200)",
    )
    args = parser.parse_args()
    print_table(asyncio.run(measure(args)))


if __name__ == "__main__":
    main()
