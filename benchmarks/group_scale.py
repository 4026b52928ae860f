"""Consumer groups at scale: join and rebalance time of 1, 10 and 50 kafkakit members over 1,000 partitions.

For each broker (broker_min as a child process, Apache Kafka from the cached
jars), assignor (``range``: the eager protocol, every member gives up every
partition; ``cooperative-sticky``: incremental) and group size, one process runs
the members (each a kafkakit ``Consumer`` polling with ``getmany``):

- **join**: from starting every member of a new group to every one of the
  1,000 partitions being assigned to exactly one member;
- **rebalance**: one more member joins; from its start to the group being
  settled again (every partition owned once, the newcomer owning some).

    python benchmarks/group_scale.py                              # both brokers, 1/10/50 members
    python benchmarks/group_scale.py --smoke                      # seconds: broker_min, 2 members, 20 partitions
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from throughput import start_broker  # noqa: E402

ASSIGNORS = ("range", "cooperative-sticky")


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


async def measure_group(bootstrap: str, topic: str, partitions: int, size: int, assignor: str) -> dict[str, float]:
    from kafkakit import Consumer

    group = f"scale-{uuid.uuid4().hex[:8]}"

    def member() -> Consumer:
        return Consumer(
            topic, bootstrap_servers=bootstrap, group_id=group, partition_assignment_strategy=assignor,
            session_timeout_ms=30000, heartbeat_interval_ms=1000, rebalance_timeout_ms=60000,
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


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(600)
    while len(admin.list_topics(topic, timeout=30).topics[topic].partitions) != partitions:
        time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--brokers", default="broker_min,kafka")
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
                for _ in range(args.runs):
                    for size in (int(m) for m in args.members.split(",")):
                        for assignor in ASSIGNORS:
                            point = asyncio.run(measure_group(server.bootstrap_servers, topic, args.partitions, size, assignor))
                            results.append({"broker": broker_kind, "members": size, "assignor": assignor, **point})
                            print(f"{broker_kind:10s} {size:3d} members {assignor:18s} join {point['join_s']:6.2f} s  "
                                  f"rebalance (+1 member) {point['rebalance_s']:6.2f} s", flush=True)  # fmt: skip
            finally:
                server.stop()
    print("\n| broker | members | assignor | join s | rebalance (+1 member) s |\n|---|---:|---|---:|---:|")
    keys = sorted({(r["broker"], r["members"], r["assignor"]) for r in results})
    for broker, members, assignor in keys:
        chosen = [r for r in results if (r["broker"], r["members"], r["assignor"]) == (broker, members, assignor)]
        join = statistics.median(r["join_s"] for r in chosen)
        rebalance = statistics.median(r["rebalance_s"] for r in chosen)
        print(f"| {broker} | {members} | {assignor} | {join:.2f} | {rebalance:.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
