"""Consumer groups at scale: join and rebalance time of 1, 10 and 50 members over 1,000 partitions.

For each broker (broker_min as a child process, Apache Kafka from the cached
jars), assignor (``range``: the eager protocol, every member gives up every
partition; ``cooperative-sticky``: incremental), group size and client, one
process runs the members of a new group on the same topic:

- ``kafkakit``: each member a kafkakit ``Consumer`` polling with ``getmany``
  (one event loop for all);
- ``confluent``: each member a ``confluent_kafka.Consumer`` polled by its own
  thread; its partitions are followed through the on_assign / on_revoke
  callbacks (incremental with cooperative-sticky) and read back with
  ``assignment()`` after each rebalance.

Every member: session timeout 30 s, heartbeat 1 s, rebalance timeout (confluent:
``max.poll.interval.ms``) 60 s, no auto-commit. The clients alternate within
each (size, assignor) cell, so kafkakit / confluent ratios come from the same
minute of a shared machine. One unrecorded 1-member group goes first on each
broker (Kafka creates its offsets topic for the first group). Measured:

- **join**: from starting every member of a new group to every one of the
  1,000 partitions being assigned to exactly one member;
- **rebalance**: one more member joins; from its start to the group being
  settled again (every partition owned once, the newcomer owning some).

    python benchmarks/group_scale.py                              # both brokers and clients, 1/10/50 members
    python benchmarks/group_scale.py --clients confluent --brokers kafka --members 1,10
    python benchmarks/group_scale.py --smoke                      # seconds: broker_min, 2 members, 20 partitions
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from throughput import start_broker  # noqa: E402

ASSIGNORS = ("range", "cooperative-sticky")
CLIENTS = ("kafkakit", "confluent")
SESSION_MS, HEARTBEAT_MS, REBALANCE_MS = 30000, 1000, 60000


def _settled(members: list[Any], partitions: int) -> bool:
    owned = [tp for m in members for tp in m.assignment()]
    return len(owned) == partitions and len(set(owned)) == partitions


async def _poll(member: Any, stop: asyncio.Event) -> None:
    while not stop.is_set():
        await member.getmany(timeout_ms=100)


async def _until(condition: Any, timeout: float) -> float:
    start = time.perf_counter()
    while not condition():
        if time.perf_counter() - start > timeout:
            raise TimeoutError("the group did not settle")
        await asyncio.sleep(0.01)
    return time.perf_counter() - start


async def measure_group(
    bootstrap: str, topic: str, partitions: int, size: int, assignor: str
) -> dict[str, float]:
    from kafkakit import Consumer

    group = f"scale-{uuid.uuid4().hex[:8]}"

    def member() -> Consumer:
        return Consumer(
            topic, bootstrap_servers=bootstrap, group_id=group, partition_assignment_strategy=assignor,
            session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS, rebalance_timeout_ms=REBALANCE_MS,
            enable_auto_commit=False, auto_offset_reset="latest",
        )  # fmt: skip

    members = [member() for _ in range(size)]
    stop = asyncio.Event()
    pollers: list[asyncio.Task[None]] = []
    try:
        start = time.perf_counter()
        await asyncio.gather(*(m.start() for m in members))
        pollers = [asyncio.create_task(_poll(m, stop)) for m in members]
        await _until(lambda: _settled(members, partitions), 300)
        join = time.perf_counter() - start
        newcomer = member()
        start = time.perf_counter()
        await newcomer.start()
        members.append(newcomer)
        pollers.append(asyncio.create_task(_poll(newcomer, stop)))
        await _until(lambda: bool(newcomer.assignment()) and _settled(members, partitions), 300)
        rebalance = time.perf_counter() - start
    finally:
        stop.set()
        for task in pollers:
            task.cancel()
        await asyncio.gather(*pollers, return_exceptions=True)
        await asyncio.gather(*(m.stop() for m in members), return_exceptions=True)
    return {"join_s": join, "rebalance_s": rebalance}


class ConfluentMember:
    """A ``confluent_kafka.Consumer`` in a group, polled by its own thread.

    ``assignment()`` is what the member owns: kept up to date by the rebalance
    callbacks (which librdkafka runs inside ``poll``) and checked against the
    consumer's own ``assignment()`` once ``poll`` returns after a rebalance.
    Reading the consumer's assignment only then, not after every poll, keeps
    51 members x 1,000 partitions from spending the machine on building lists.
    """

    def __init__(self, bootstrap: str, group: str, topic: str, assignor: str) -> None:
        self.config = {
            "bootstrap.servers": bootstrap, "group.id": group, "partition.assignment.strategy": assignor,
            "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS,
            "max.poll.interval.ms": REBALANCE_MS, "enable.auto.commit": False, "auto.offset.reset": "latest",
        }  # fmt: skip
        self.topic = topic
        self.incremental = assignor == "cooperative-sticky"
        self._owned: frozenset[int] = frozenset()
        self._changed = False
        self.error: BaseException | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def assignment(self) -> frozenset[int]:
        """Partitions this member owns now (read from other threads: a frozenset is swapped whole)."""
        return self._owned

    def start(self) -> None:
        self._thread.start()

    def _on_assign(self, _consumer: Any, partitions: list[Any]) -> None:
        got = frozenset(tp.partition for tp in partitions)
        self._owned = self._owned | got if self.incremental else got
        self._changed = True

    def _on_revoke(self, _consumer: Any, partitions: list[Any]) -> None:
        lost = frozenset(tp.partition for tp in partitions)
        self._owned = self._owned - lost if self.incremental else frozenset()
        self._changed = True

    def _run(self) -> None:
        from confluent_kafka import Consumer

        try:
            consumer = Consumer(self.config)
        except BaseException as exc:  # seen by the waiting thread, which reports it
            self.error = exc
            return
        consumer.subscribe(
            [self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_revoke
        )
        try:
            while not self._stopping.is_set():
                consumer.poll(0.1)
                if self._changed:
                    # After the callback librdkafka has applied the (incremental) assignment itself.
                    self._changed = False
                    actual = frozenset(tp.partition for tp in consumer.assignment())
                    if actual != self._owned:
                        raise RuntimeError(
                            f"callbacks say {sorted(self._owned)}, assignment() {sorted(actual)}"
                        )
        except BaseException as exc:
            self.error = exc
        finally:
            consumer.close()

    def stop(self) -> None:
        self._stopping.set()

    def join(self) -> None:
        self._thread.join(60)


def _wait(condition: Any, members: list[ConfluentMember], timeout: float) -> float:
    start = time.perf_counter()
    while not condition():
        failed = [m.error for m in members if m.error is not None]
        if failed:
            raise RuntimeError(f"a confluent member failed: {failed[0]!r}")
        if time.perf_counter() - start > timeout:
            raise TimeoutError("the group did not settle")
        time.sleep(0.01)
    return time.perf_counter() - start


def measure_group_confluent(
    bootstrap: str, topic: str, partitions: int, size: int, assignor: str
) -> dict[str, float]:
    """Join and +1 rebalance time of ``size`` confluent-kafka members (see the module docstring)."""
    group = f"scale-{uuid.uuid4().hex[:8]}"
    members = [ConfluentMember(bootstrap, group, topic, assignor) for _ in range(size)]
    try:
        start = time.perf_counter()
        for m in members:
            m.start()
        _wait(lambda: _settled(members, partitions), members, 300)
        join = time.perf_counter() - start
        newcomer = ConfluentMember(bootstrap, group, topic, assignor)
        start = time.perf_counter()
        newcomer.start()
        members.append(newcomer)
        _wait(lambda: bool(newcomer.assignment()) and _settled(members, partitions), members, 300)
        rebalance = time.perf_counter() - start
    finally:
        for m in members:  # every thread closes its own consumer: the closes run side by side
            m.stop()
        for m in members:
            m.join()
    return {"join_s": join, "rebalance_s": rebalance}


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(600)
    while len(admin.list_topics(topic, timeout=30).topics[topic].partitions) != partitions:
        time.sleep(0.2)


def _measure_kafkakit(
    bootstrap: str, topic: str, partitions: int, size: int, assignor: str
) -> dict[str, float]:
    return asyncio.run(measure_group(bootstrap, topic, partitions, size, assignor))


def report(results: list[dict[str, Any]]) -> str:
    """Markdown table: one row per (broker, members, assignor), medians over runs, kafkakit / confluent ratios."""
    lines = ["\n| broker | members | assignor | kafkakit join s | confluent join s | kafkakit / confluent |"
             " kafkakit rebalance s | confluent rebalance s | kafkakit / confluent |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for broker, members, assignor in sorted({(r["broker"], r["members"], r["assignor"]) for r in results}):
        cells: list[str] = []
        for metric in ("join_s", "rebalance_s"):
            value: dict[str, float] = {}
            for client in CLIENTS:
                chosen = [r[metric] for r in results
                          if (r["broker"], r["members"], r["assignor"], r["client"]) == (broker, members, assignor, client)]  # fmt: skip
                if chosen:
                    value[client] = statistics.median(chosen)
            k, c = value.get("kafkakit"), value.get("confluent")
            ratio = f"{k / c:.2f}x" if k is not None and c else "-"
            cells += [f"{k:.2f}" if k is not None else "-", f"{c:.2f}" if c is not None else "-", ratio]
        lines.append(f"| {broker} | {members} | {assignor} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--brokers", default="broker_min,kafka")
    parser.add_argument("--clients", default=",".join(CLIENTS), help="comma list of kafkakit, confluent")
    parser.add_argument("--members", default="1,10,50")
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--json")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.brokers, args.members, args.partitions = "broker_min", "2", 20
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kafkakit-groups-") as tmp:
        for broker_kind in args.brokers.split(","):
            server = start_broker(broker_kind, Path(tmp))
            try:
                topic = f"groups-{uuid.uuid4().hex[:8]}"
                _create(server.bootstrap_servers, topic, args.partitions)
                # Unrecorded: the first group on a fresh Kafka waits for __consumer_offsets to be created
                # (1.6-2.6 s), which would be charged to whichever client happens to go first.
                _measure_kafkakit(server.bootstrap_servers, topic, args.partitions, 1, ASSIGNORS[0])
                for _ in range(args.runs):
                    for size in (int(m) for m in args.members.split(",")):
                        for assignor in ASSIGNORS:
                            for client in args.clients.split(","):
                                measure = (
                                    measure_group_confluent if client == "confluent" else _measure_kafkakit
                                )
                                point = measure(
                                    server.bootstrap_servers, topic, args.partitions, size, assignor
                                )
                                results.append({"broker": broker_kind, "client": client, "members": size,
                                                "assignor": assignor, **point})  # fmt: skip
                                print(f"{broker_kind:10s} {client:9s} {size:3d} members {assignor:18s} "
                                      f"join {point['join_s']:6.2f} s  rebalance (+1 member) {point['rebalance_s']:6.2f} s",
                                      flush=True)  # fmt: skip
            finally:
                server.stop()
    print(report(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
