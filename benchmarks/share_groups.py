"""Share-group (KIP-932) throughput: kafkakit and confluent-kafka ShareConsumers on one partition.

    python benchmarks/share_groups.py                        # both brokers (Kafka needs java and mvn)
    python benchmarks/share_groups.py --brokers broker_min --records 20000 --rounds 1
    python benchmarks/share_groups.py --smoke                # seconds, for CI: broker_min, 1 and 2 consumers

A one-partition topic is filled with ``--records`` records of ``--size`` bytes. Each run starts a
new share group on it (``share.auto.offset.reset=earliest``, everything else default) with 1, 4 or
16 members in implicit acknowledgement mode (each ``getmany``/``poll`` accepts the records of the
previous one). The figure is records/s from the first member's start to every record received and
acknowledged: once all records arrived, each member sends its last acknowledgements
(``commit_sync``) and the clock stops when the last one is answered. Records received twice
(``duplicates``) and delivered with ``delivery_count > 1`` (``redelivered``) are counted apart; after
the clock, Admin.describe_share_group_offsets must show the group's lag at 0 (``acked``).
The time to the first record (joining: one heartbeat interval, 1 s in the test Kafka) is shown
apart, with the rate after it.

Clients, each run in a fresh interpreter (one at a time, so no client shares a GIL with the broker
or another client):

- ``kafkakit``: every ShareConsumer in one asyncio event loop (what an asyncio user writes);
- ``kafkakit-procs``: one process per ShareConsumer (started and imported before the clock runs);
- ``confluent``: confluent-kafka's ShareConsumer, one thread per consumer.

Plus a reference row, ``kafkakit-classic``: a classic kafkakit Consumer, alone in a consumer group,
reading the same partition and committing at the end: what a share group costs against it.

Rounds interleave the clients within each cell (A B C, A B C, ...), so a slow spell of a shared
machine hits every client of a round; the table gives the median and the kafkakit/confluent ratio
of the medians, and of each round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SHARE_CLIENTS = ["kafkakit", "confluent", "kafkakit-procs"]
CLASSIC = "kafkakit-classic"
#: How long a member waits in one getmany/poll: bounds how late a member notices that all is read.
POLL_S = 0.1


class Tally:
    """Records seen by the members of one run (thread-safe under the GIL: set.add and list.append)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.seen: set[int] = set()
        self.received = 0
        self.redelivered = 0
        self.first: float | None = None
        self.done = threading.Event()

    def add(self, offsets: list[int], redelivered: int) -> None:
        if offsets and self.first is None:
            self.first = time.monotonic()
        self.received += len(offsets)
        self.redelivered += redelivered
        self.seen.update(offsets)
        if len(self.seen) >= self.total:
            self.done.set()


def result(start: float, ends: list[float], tally: Tally, per_member: list[int]) -> dict[str, Any]:
    return {
        "seconds": max(ends) - start,
        "first_record": (tally.first or start) - start,
        "received": tally.received,
        "distinct": len(tally.seen),
        "redelivered": tally.redelivered,
        "per_member": per_member,
    }


# --------------------------------------------------------------------------- workers


async def _share_kafkakit(bootstrap: str, topic: str, group: str, members: int, n: int) -> dict[str, Any]:
    from kafkakit import ShareConsumer

    tally = Tally(n)
    ends: list[float] = []
    counts = [0] * members
    consumers = [ShareConsumer(topic, bootstrap_servers=bootstrap, group_id=group) for _ in range(members)]

    async def member(index: int, consumer: ShareConsumer) -> None:
        await consumer.start()
        while not tally.done.is_set():
            batches = await consumer.getmany(timeout_ms=int(POLL_S * 1000))
            for records in batches.values():
                total = sum([len(r.value) for r in records])  # touch every record, as an application would
                assert total >= 0
                counts[index] += len(records)
                tally.add([r.offset for r in records], sum(r.delivery_count > 1 for r in records))
        await consumer.commit_sync()  # the last records' acknowledgements
        ends.append(time.monotonic())

    start = time.monotonic()
    try:
        await asyncio.gather(*(member(i, c) for i, c in enumerate(consumers)))
    finally:
        await asyncio.gather(*(c.stop() for c in consumers), return_exceptions=True)
    return result(start, ends, tally, counts)


def _share_confluent(bootstrap: str, topic: str, group: str, members: int, n: int) -> dict[str, Any]:
    from confluent_kafka import ShareConsumer  # type: ignore[attr-defined]

    tally = Tally(n)
    ends: list[float] = []
    counts = [0] * members
    errors: list[BaseException] = []
    lock = threading.Lock()

    def member(index: int) -> None:
        try:
            consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
            consumer.subscribe([topic])
            try:
                while not tally.done.is_set():
                    messages = [m for m in consumer.poll(POLL_S) or [] if m.error() is None]
                    total = sum([len(m.value()) for m in messages])
                    assert total >= 0
                    counts[index] += len(messages)
                    with lock:
                        tally.add([m.offset() for m in messages], sum((m.delivery_count() or 1) > 1 for m in messages))
                consumer.commit_sync()
                ends.append(time.monotonic())
            finally:
                consumer.close()
        except BaseException as exc:
            errors.append(exc)
            tally.done.set()

    threads = [threading.Thread(target=member, args=(i,), daemon=True) for i in range(members)]
    start = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return result(start, ends, tally, counts)


def _procs_member(bootstrap: str, topic: str, group: str, flags: Any, counter: Any, stats: Any, index: int,
                  ready: Any, go: Any, done: Any, n: int) -> None:  # fmt: skip
    """One kafkakit ShareConsumer in its own process: offsets seen go to the shared ``flags``."""

    async def run() -> None:
        from kafkakit import ShareConsumer

        consumer = ShareConsumer(topic, bootstrap_servers=bootstrap, group_id=group)
        ready.release()
        await asyncio.to_thread(go.wait)
        first = 0.0
        received = redelivered = 0
        try:
            await consumer.start()
            while not done.is_set():
                batches = await consumer.getmany(timeout_ms=int(POLL_S * 1000))
                new = 0
                for records in batches.values():
                    if records and not first:
                        first = time.monotonic()
                    total = sum([len(r.value) for r in records])
                    assert total >= 0
                    received += len(records)
                    for r in records:
                        redelivered += r.delivery_count > 1
                        if not flags[r.offset]:
                            flags[r.offset] = 1
                            new += 1
                if new:
                    with counter.get_lock():
                        counter.value += new
                        if counter.value >= n:
                            done.set()
            await consumer.commit_sync()
            stats[index * 4 : index * 4 + 4] = [time.monotonic(), first, float(received), float(redelivered)]
        finally:
            await consumer.stop()

    asyncio.run(run())


def _share_kafkakit_procs(bootstrap: str, topic: str, group: str, members: int, n: int) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    flags = ctx.RawArray("b", n)  # one writer per offset in the normal case; the counter is locked
    counter = ctx.Value("q", 0)
    stats = ctx.Array("d", members * 4)
    ready, go, done = ctx.Semaphore(0), ctx.Event(), ctx.Event()
    procs = [
        ctx.Process(target=_procs_member, args=(bootstrap, topic, group, flags, counter, stats, i, ready, go, done, n))
        for i in range(members)
    ]
    for proc in procs:
        proc.start()
    for _ in procs:
        if not ready.acquire(timeout=120):
            raise RuntimeError("a member process did not start")
    start = time.monotonic()
    go.set()
    for proc in procs:
        proc.join(600)
        if proc.exitcode != 0:
            raise RuntimeError(f"member process exited with {proc.exitcode}")
    rows = [stats[i * 4 : i * 4 + 4] for i in range(members)]
    firsts = [r[1] for r in rows if r[1]]
    return {
        "seconds": max(r[0] for r in rows) - start,
        "first_record": (min(firsts) if firsts else start) - start,
        "received": int(sum(r[2] for r in rows)),
        "distinct": sum(1 for f in flags[:] if f),
        "redelivered": int(sum(r[3] for r in rows)),
        "per_member": [int(r[2]) for r in rows],
    }


async def _classic_kafkakit(bootstrap: str, topic: str, group: str, n: int) -> dict[str, Any]:
    from kafkakit import Consumer

    tally = Tally(n)
    start = time.monotonic()
    async with Consumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest") as consumer:
        while not tally.done.is_set():
            batches = await consumer.getmany(timeout_ms=int(POLL_S * 1000))
            for records in batches.values():
                total = sum([len(r.value) for r in records])
                assert total >= 0
                tally.add([r.offset for r in records], 0)
        await consumer.commit()
        end = time.monotonic()
    return result(start, [end], tally, [tally.received])


async def _acked(bootstrap: str, group: str, topic: str, n: int) -> bool:
    """Whether the share group's state says every record was acknowledged (lag 0), within 15 s."""
    from kafkakit import Admin, TopicPartition

    tp = TopicPartition(topic, 0)
    async with Admin(bootstrap_servers=bootstrap) as admin:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            offset = (await admin.describe_share_group_offsets(group, [tp])).get(tp)
            if offset is not None and (offset.start_offset == n or offset.lag == 0):
                return True
            await asyncio.sleep(0.2)
    return False


async def _configure(bootstrap: str, group: str) -> None:
    from kafkakit import Admin

    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.incremental_alter_configs(
            group, {"share.auto.offset.reset": ("set", "earliest")}, resource_type="group"
        )


def run_worker(spec: dict[str, Any]) -> dict[str, Any]:
    client, bootstrap, topic, n = spec["client"], spec["bootstrap"], spec["topic"], int(spec["records"])
    members = int(spec["members"])
    group = f"bench-share-{uuid.uuid4().hex[:8]}"
    if client == CLASSIC:
        out = asyncio.run(_classic_kafkakit(bootstrap, topic, group, n))
        out["acked"] = True
        return out
    asyncio.run(_configure(bootstrap, group))
    runners: dict[str, Callable[..., Any]] = {
        "kafkakit": lambda: asyncio.run(_share_kafkakit(bootstrap, topic, group, members, n)),
        "kafkakit-procs": lambda: _share_kafkakit_procs(bootstrap, topic, group, members, n),
        "confluent": lambda: _share_confluent(bootstrap, topic, group, members, n),
    }
    out = runners[client]()
    out["acked"] = asyncio.run(_acked(bootstrap, group, topic, n))
    return out


def spawn_worker(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(spec)], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )
    if proc.returncode != 0:
        raise RuntimeError(f"worker {spec['client']} x{spec['members']} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


# --------------------------------------------------------------------------- driver


def create_topic(bootstrap: str, name: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])[name].result(30)
    deadline = time.time() + 30
    while name not in admin.list_topics(timeout=10).topics and time.time() < deadline:
        time.sleep(0.1)


def fill(bootstrap: str, topic: str, n: int, size: int) -> None:
    from confluent_kafka import Producer

    value = (b"0123456789abcdef" * (size // 16 + 1))[:size]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "queue.buffering.max.messages": 2_000_000})
    for i in range(n):
        producer.produce(topic, value, partition=0)
        if i & 0xFFFF == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def start_broker(kind: str, workdir: Path) -> Any:
    import tests.brokers as brokers

    server: Any = (
        brokers.BrokerMinProcess(workdir / "broker_min") if kind == "broker_min" else brokers.KafkaServer(workdir / "kafka")
    )
    server.start()
    return server


Row = dict[str, Any]


def measure(args: argparse.Namespace) -> list[Row]:
    rows: list[Row] = []
    clients = args.clients.split(",")
    timeout = max(180.0, args.records / 200)
    with tempfile.TemporaryDirectory(prefix="kafkakit-share-bench-") as tmp:
        for kind in args.brokers.split(","):
            server = start_broker(kind, Path(tmp))
            try:
                bootstrap = server.bootstrap_servers
                topic = f"bench-share-{uuid.uuid4().hex[:8]}"
                create_topic(bootstrap, topic)
                fill(bootstrap, topic, args.records, args.size)
                spec = {"bootstrap": bootstrap, "topic": topic, "records": args.records}
                # Unrecorded warm-up: the first share group creates the share-state topic.
                spawn_worker({**spec, "client": clients[0], "members": 1}, timeout)
                cells = [(m, clients) for m in map(int, args.members.split(","))]
                if args.classic:
                    cells.append((1, [CLASSIC]))
                for members, cell_clients in cells:
                    runs: dict[str, list[Row]] = {c: [] for c in cell_clients}
                    for _ in range(args.rounds):
                        for client in cell_clients:
                            runs[client].append(spawn_worker({**spec, "client": client, "members": members}, timeout))
                    for client, outs in runs.items():
                        row = summarize(kind, client, members, args.records, outs)
                        rows.append(row)
                        print(
                            f"{kind:10s} {client:16s} x{members:<3d} {row['rate']:10,.0f} rec/s "
                            f"(first record {row['first_ms']:.0f} ms, dup {row['duplicates']}, "
                            f"redelivered {row['redelivered']}, acked {row['acked']})",
                            flush=True,
                        )
            finally:
                server.stop()
    return rows


def summarize(kind: str, client: str, members: int, n: int, outs: list[Row]) -> Row:
    return {
        "broker": kind,
        "client": client,
        "members": members,
        "seconds": [o["seconds"] for o in outs],
        "rate": n / statistics.median(o["seconds"] for o in outs),
        "first_ms": statistics.median(o["first_record"] for o in outs) * 1000,
        # Without the time to join and get the first records (a heartbeat interval on Kafka).
        "steady": n / statistics.median(o["seconds"] - o["first_record"] for o in outs),
        "duplicates": sum(o["received"] - o["distinct"] for o in outs),
        "redelivered": sum(o["redelivered"] for o in outs),
        "complete": all(o["distinct"] == n for o in outs),
        "acked": all(o["acked"] for o in outs),
        "spread": statistics.median(sum(1 for c in o["per_member"] if c) for o in outs),
    }


def report(rows: list[Row], n: int, size: int, rounds: int) -> str:
    lines = [
        f"\n### Share-group throughput, one partition, {n:,} records x {size} B, median of {rounds} round(s)\n",
        "| broker | client | consumers | records/s | vs confluent | by round | first record ms "
        "| records/s after first record | vs confluent | members with records "
        "| duplicates | redelivered | all consumed | all acked |",
        "|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    by_cell = {(r["broker"], r["client"], r["members"]): r for r in rows}
    for r in rows:
        peer = by_cell.get((r["broker"], "confluent", r["members"]))
        ratio = by_round = steady_ratio = ""
        if peer is not None and r["client"] not in ("confluent", CLASSIC):
            ratio = f"{r['rate'] / peer['rate']:.2f}x"
            steady_ratio = f"{r['steady'] / peer['steady']:.2f}x"
            by_round = ", ".join(f"{b / a:.2f}x" for a, b in zip(r["seconds"], peer["seconds"], strict=False))
        lines.append(
            f"| {r['broker']} | {r['client']} | {r['members']} | {r['rate']:,.0f} | {ratio} | {by_round} "
            f"| {r['first_ms']:.0f} | {r['steady']:,.0f} | {steady_ratio} | {r['spread']:g} | {r['duplicates']} | {r['redelivered']} "
            f"| {'yes' if r['complete'] else 'NO'} | {'yes' if r['acked'] else 'NO'} |"
        )
    for broker in dict.fromkeys(r["broker"] for r in rows):
        classic, share = by_cell.get((broker, CLASSIC, 1)), by_cell.get((broker, "kafkakit", 1))
        if classic and share:
            lines.append(
                f"\n{broker}: a classic kafkakit Consumer alone in a group reads {classic['rate'] / share['rate']:.2f}x"
                f" as fast as one kafkakit ShareConsumer ({classic['steady'] / share['steady']:.2f}x after the first record)"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--members", default="1,4,16", help="consumer counts, one cell each")
    parser.add_argument("--clients", default=",".join(SHARE_CLIENTS))
    parser.add_argument("--brokers", default="broker_min,kafka")
    parser.add_argument("--no-classic", dest="classic", action="store_false", help="skip the classic Consumer row")
    parser.add_argument("--json", help="write the rows to this file")
    parser.add_argument("--smoke", action="store_true", help="a short CI run: broker_min, 1 and 2 consumers, 2,000 records, kafkakit and confluent")
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(run_worker(json.loads(args.worker))))
        return
    if args.smoke:
        args.records = args.records if "--records" in sys.argv else 2_000
        args.rounds, args.brokers = 1, "broker_min"
        args.members = args.members if "--members" in sys.argv else "1,2"
        args.clients = args.clients if "--clients" in sys.argv else "kafkakit,confluent"
    rows = measure(args)
    print(report(rows, args.records, args.size, args.rounds))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
