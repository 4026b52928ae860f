"""Cost curves: throughput and CPU as the partition count grows, and broker_min's start-up at scale.

Partitions (``--partitions 1,10,100,1000,10000``): for each broker and count, a
fresh topic (or, with ``--layouts 100-topics``, 100 topics sharing the
partitions) gets ``--records`` 100-byte records spread round-robin over every
partition, produced and then consumed by each client in its own interpreter
(kafkakit: per-record ``send`` with 5 ms / 1 MiB batching, then ``getmany``;
confluent-kafka: ``produce`` + ``flush`` with the same batching, then
``consume``). Reported per point: records/s and client CPU per record
(user + system, from the worker's rusage). A cost that grows faster than the
work shows as a rising CPU-per-record curve.

Apache Kafka runs with benchmark settings (``KAFKA_BENCH_CONFIG``, listed by
``--help``; ``--kafka-stock`` drops them): the stock test broker spends its
time, at 1,000 partitions and more, on the first write into the memory-mapped
offset and time index of every partition (each preallocated sparse at 10 MiB). Every topic is
created in requests of at most 5,000 partitions (KRaft refuses a single
operation of more than 10,000 metadata records), and a point starts only once
the broker answers ListOffsets for every partition (Kafka becomes leader of
new partitions asynchronously, a few fsyncs each); that create-and-settle time
is reported too.

Start-up (``--startup``): broker_min with ``--startup-partitions`` partitions
and ``--startup-gb`` of log data; the time until it answers Metadata after a
clean stop and after kill -9 (recovery), and its RSS after each.

    python benchmarks/scale.py --plots docs/img                 # the full curves (both brokers) and plots
    python benchmarks/scale.py --brokers kafka --partitions 1000,10000 --json new.json
    python benchmarks/scale.py --brokers '' --merge old.json --merge new.json --plots docs/img   # redraw
    python benchmarks/scale.py --startup --startup-gb 10        # broker_min with 10,000 partitions and 10 GB
    python benchmarks/scale.py --smoke                          # seconds
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
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

CLIENTS = ("kafkakit", "confluent")
VALUE = b"v" * 100
# KRaft caps one operation at 10,000 metadata records (a topic is one, each partition one more).
PARTITIONS_PER_REQUEST = 5000
KAFKA_BENCH_CONFIG = {
    # Offset and time indexes preallocated at 64 KiB instead of 10 MiB (entries still every 4 KiB).
    # Kafka mmaps both index files of every partition; on this machine the first write into a
    # 10 MiB sparse mapping cost about 2.5 ms of broker CPU, so the Produce that first crossed
    # 4 KiB in each of 10,000 partitions took 74 s (49 s CPU) against 4.6 s with 64 KiB.
    "log.index.size.max.bytes": str(64 << 10),
    # Deleted partitions keep their file descriptors until removed (default 60 s): with the next
    # point's 10,000 partitions the JVM would cross the machine's 20,000 descriptor limit.
    "log.segment.delete.delay.ms": "1000",
}


class _Clock:
    """Wall and CPU time of the measured part only (clients connected, nothing imported inside)."""

    def __enter__(self) -> _Clock:
        self.wall = time.perf_counter()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        self.cpu = usage.ru_utime + usage.ru_stime
        return self

    def __exit__(self, *exc: object) -> None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        self.cpu = usage.ru_utime + usage.ru_stime - self.cpu
        self.wall = time.perf_counter() - self.wall


_clock = _Clock()


def _targets(topics: list[str], partitions_each: int, n: int) -> list[tuple[str, int]]:
    """Round-robin (topic, partition) for record i."""
    everything = [(t, p) for t in topics for p in range(partitions_each)]
    return [everything[i % len(everything)] for i in range(n)]


async def _produce_kafkakit(bootstrap: str, topics: list[str], partitions_each: int, n: int) -> None:
    from kafkakit import Producer

    async with Producer(bootstrap_servers=bootstrap, acks=1, linger_ms=5, max_batch_size=1 << 20) as producer:
        for topic in topics:
            await producer.partitions_for(topic)
        targets = _targets(topics, partitions_each, n)
        with _clock:
            for topic, partition in targets:
                await producer.send(topic, VALUE, partition=partition)
            await producer.flush()


def _produce_confluent(bootstrap: str, topics: list[str], partitions_each: int, n: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, "batch.size": 1 << 20,
                         "queue.buffering.max.messages": 2_000_000, "enable.idempotence": False})  # fmt: skip
    for topic in topics:
        producer.list_topics(topic, timeout=30)
    targets = _targets(topics, partitions_each, n)
    with _clock:
        for topic, partition in targets:
            try:
                producer.produce(topic, VALUE, partition=partition)
            except BufferError:
                producer.poll(0.01)
                producer.produce(topic, VALUE, partition=partition)
            producer.poll(0)
        assert producer.flush(120) == 0


async def _consume_kafkakit(bootstrap: str, topics: list[str], partitions_each: int, n: int) -> None:
    from kafkakit import Consumer, TopicPartition

    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(t, p) for t in topics for p in range(partitions_each)])
        seen = 0
        with _clock:
            while seen < n:
                for records in (await consumer.getmany(timeout_ms=1000)).values():
                    seen += len(records)


def _consume_confluent(bootstrap: str, topics: list[str], partitions_each: int, n: int) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "scale-" + uuid.uuid4().hex, "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t in topics for p in range(partitions_each)])
    seen = 0
    with _clock:
        while seen < n:
            seen += sum(1 for m in consumer.consume(num_messages=10000, timeout=1.0) if m.error() is None)
    consumer.close()


def run_worker(spec: dict[str, Any]) -> dict[str, float]:
    args = (spec["bootstrap"], spec["topics"], spec["partitions_each"], spec["records"])
    if spec["role"] == "produce":
        if spec["client"] == "kafkakit":
            asyncio.run(_produce_kafkakit(*args))
        else:
            _produce_confluent(*args)
    elif spec["client"] == "kafkakit":
        asyncio.run(_consume_kafkakit(*args))
    else:
        _consume_confluent(*args)
    return {"seconds": _clock.wall, "cpu": _clock.cpu}


def _spawn(spec: dict[str, Any], timeout: float) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], capture_output=True, text=True,
                         timeout=timeout, cwd=ROOT)  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"worker {spec['role']}/{spec['client']} failed:\n{out.stderr[-3000:]}")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _create(bootstrap: str, topics: list[str], partitions_each: int, per_request: int | None = None) -> float:
    """Create the topics, wait until the broker leads every partition; return the seconds it took.

    ``per_request`` caps the partitions of one CreateTopics or CreatePartitions
    request (Kafka: ``PARTITIONS_PER_REQUEST``; None: one request, as broker_min,
    which has no CreatePartitions, needs).
    """
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    started = time.perf_counter()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    cap = per_request or partitions_each * len(topics)
    first = min(partitions_each, cap)
    topics_per_request = max(1, cap // first)
    for i in range(0, len(topics), topics_per_request):
        futures = admin.create_topics(
            [NewTopic(t, first, 1) for t in topics[i : i + topics_per_request]], request_timeout=600
        )
        for future in futures.values():
            future.result(600)
    have = first
    while have < partitions_each:
        have = min(partitions_each, have + cap)
        for topic in topics:
            admin.create_partitions([NewPartitions(topic, have)], request_timeout=600)[topic].result(600)
    deadline = time.time() + 600
    while True:
        metadata = admin.list_topics(timeout=30).topics
        if all(t in metadata and len(metadata[t].partitions) == partitions_each for t in topics):
            break
        if time.time() > deadline:
            raise RuntimeError("topics did not appear")
        time.sleep(0.2)
    _settle(admin, topics, partitions_each, deadline)
    return time.perf_counter() - started


def _settle(admin: Any, topics: list[str], partitions_each: int, deadline: float) -> None:
    """Wait until ListOffsets answers for every partition.

    Metadata lists a new partition's leader as soon as the controller has
    decided it; Apache Kafka then creates the log and becomes leader of it in
    the background (two fsynced checkpoint files per partition, about 15 s for
    10,000 partitions here). A point measured before that would time the broker.
    """
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    waiting = [TopicPartition(t, p) for t in topics for p in range(partitions_each)]
    while waiting:
        futures = admin.list_offsets({tp: OffsetSpec.latest() for tp in waiting}, request_timeout=120)
        failed = []
        for tp, future in futures.items():
            try:
                future.result()
            except KafkaException:
                failed.append(tp)
        waiting = failed
        if waiting and time.time() > deadline:
            raise RuntimeError(f"{len(waiting)} partitions still without a leader")
        if waiting:
            time.sleep(0.5)


def _delete(bootstrap: str, topics: list[str]) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics(topics, request_timeout=600).values():
        future.result(600)


def _kafka_config(args: argparse.Namespace) -> dict[str, str]:
    config = {} if args.kafka_stock else dict(KAFKA_BENCH_CONFIG)
    for item in args.kafka_config:
        key, _, value = item.partition("=")
        config[key] = value
    return config


def _start(kind: str, workdir: Path, kafka_config: dict[str, str]) -> Any:
    if kind != "kafka":
        return start_broker(kind, workdir)
    from tests.brokers import KafkaServer

    server = KafkaServer(workdir / "kafka", extra_config=kafka_config)
    server.start()
    return server


def measure_curves(args: argparse.Namespace) -> list[dict[str, Any]]:
    points: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kafkakit-scale-") as tmp:
        for broker_kind in [b for b in args.brokers.split(",") if b]:
            server = _start(broker_kind, Path(tmp), _kafka_config(args))
            try:
                for count in (int(c) for c in args.partitions.split(",")):
                    if broker_kind == "kafka" and count > args.kafka_max_partitions:
                        print(f"skipping kafka/{count}: above --kafka-max-partitions", flush=True)
                        continue
                    for layout in args.layouts.split(","):
                        if layout == "100-topics" and count < 100:
                            continue
                        ntopics = 100 if layout == "100-topics" else 1
                        for _ in range(args.runs):
                            for client in args.clients.split(","):
                                topics = [f"scale-{uuid.uuid4().hex[:8]}-{i}" for i in range(ntopics)]
                                cap = PARTITIONS_PER_REQUEST if broker_kind == "kafka" else None
                                created = _create(server.bootstrap_servers, topics, count // ntopics, cap)
                                print(f"{broker_kind:10s} {count:6d} {layout:10s} {client:9s} created and led in {created:.1f} s",
                                      flush=True)  # fmt: skip
                                base = {"bootstrap": server.bootstrap_servers, "topics": topics,
                                        "partitions_each": count // ntopics, "records": args.records, "client": client}  # fmt: skip
                                for role in ("produce", "consume"):
                                    result = _spawn({**base, "role": role}, timeout=900)
                                    point = {"broker": broker_kind, "partitions": count, "layout": layout,
                                             "client": client, "role": role, "records": args.records,
                                             "create_s": created, **result}  # fmt: skip
                                    points.append(point)
                                    print(f"{broker_kind:10s} {count:6d} {layout:10s} {client:9s} {role:7s} "
                                          f"{args.records / result['seconds']:12,.0f} rec/s "
                                          f"{result['cpu'] / args.records * 1e6:7.2f} us CPU/rec", flush=True)  # fmt: skip
                                _delete(
                                    server.bootstrap_servers, topics
                                )  # each point starts from an empty broker
            finally:
                server.stop()
    return points


def _cell(chosen: list[dict[str, Any]]) -> tuple[float, float]:
    """(records/s, client CPU µs per record): medians over the chosen runs."""
    return (statistics.median(p["records"] / p["seconds"] for p in chosen),
            statistics.median(p["cpu"] / p["records"] for p in chosen) * 1e6)  # fmt: skip


def report_curves(points: list[dict[str, Any]], records: int) -> str:
    """Markdown: the rates and CPU per record with kafkakit / confluent ratios, then the topic creation times."""
    lines = [f"\n{records:,} records x 100 B per point; median over runs; CPU = the client process, user + system\n",
             "| broker | layout | role | partitions | kafkakit rec/s | confluent rec/s | kafkakit / confluent | kafkakit CPU us/rec | confluent CPU us/rec |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    keys = sorted({(p["broker"], p["layout"], p["role"], p["partitions"]) for p in points})
    for broker, layout, role, count in keys:
        cell: dict[str, tuple[float, float]] = {}
        for client in CLIENTS:
            chosen = [
                p
                for p in points
                if (p["broker"], p["layout"], p["role"], p["partitions"], p["client"])
                == (broker, layout, role, count, client)
            ]
            if chosen:
                cell[client] = _cell(chosen)
        k, c = cell.get("kafkakit"), cell.get("confluent")
        ratio = f"{k[0] / c[0]:.2f}x" if k and c else "-"
        lines.append(f"| {broker} | {layout} | {role} | {count:,} | {k[0]:,.0f} | {c[0]:,.0f} | {ratio} | {k[1]:.2f} | {c[1]:.2f} |"
                     if k and c else f"| {broker} | {layout} | {role} | {count:,} | - | - | - | - | - |")  # fmt: skip
    created = sorted({(p["broker"], p["layout"], p["partitions"]) for p in points if "create_s" in p})
    if created:
        lines += ["\nCreating the topics until the broker answers ListOffsets for every partition (median over the points):\n",
                  "| broker | layout | partitions | seconds |", "|---|---|---:|---:|"]  # fmt: skip
        for broker, layout, count in created:
            chosen = [
                p["create_s"]
                for p in points
                if (p["broker"], p["layout"], p["partitions"]) == (broker, layout, count) and "create_s" in p
            ]
            lines.append(f"| {broker} | {layout} | {count:,} | {statistics.median(chosen):.1f} |")
    return "\n".join(lines)


def merge_points(files: list[str], points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Points of earlier ``--json`` files plus this run's.

    A cell (broker, partitions, layout) measured by a later file replaces that
    cell of the earlier files, and this run's cells replace them all.
    """
    cells: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for name in files:
        data = json.loads(Path(name).read_text())
        fresh: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        for point in data.get("points", []):
            key = (point["broker"], point["partitions"], point["layout"])
            fresh.setdefault(key, []).append({"records": data["args"]["records"], **point})
        cells.update(fresh)
    for point in points:
        cells.pop((point["broker"], point["partitions"], point["layout"]), None)
    return [p for group in cells.values() for p in group] + points


def plot_curves(points: list[dict[str, Any]], records: int, directory: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for metric, label, name in (
        ("rate", "records/s", "throughput"),
        ("cpu", "client CPU µs per record", "cpu"),
    ):
        figure, axes = plt.subplots(1, 2, figsize=(11, 4.2))
        for ax, role in zip(axes, ("produce", "consume"), strict=True):
            series = sorted({(p["broker"], p["layout"], p["client"]) for p in points if p["role"] == role})
            for broker, layout, client in series:
                chosen = [
                    p
                    for p in points
                    if (p["broker"], p["layout"], p["client"], p["role"]) == (broker, layout, client, role)
                ]
                counts = sorted({p["partitions"] for p in chosen})
                values = []
                for count in counts:
                    at = [p for p in chosen if p["partitions"] == count]
                    values.append(_cell(at)[0 if metric == "rate" else 1])
                ax.plot(counts, values, marker="o", label=f"{client} / {broker} / {layout}")
            ax.set_xscale("log")
            ax.set_xlabel("partitions")
            ax.set_ylabel(label)
            ax.set_title(role)
            ax.grid(True, alpha=0.3)
        axes[1].legend(fontsize=7)
        figure.tight_layout()
        path = directory / f"scale-{name}.png"
        figure.savefig(path, dpi=110)
        plt.close(figure)
        written.append(path)
    return written


# -- broker_min start-up and recovery at scale -------------------------------------------------


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return -1.0


async def _fill(bootstrap: str, topic: str, partitions: int, gigabytes: float) -> int:
    from kafkakit import Producer

    values = [os.urandom(100) for _ in range(10_000)]  # ~1.1 MB per send_batch
    batches = max(1, int(gigabytes * 1e9 / (len(values) * 100)))
    async with Producer(bootstrap_servers=bootstrap, acks=1) as producer:
        pending = []
        for i in range(batches):
            pending.append(await producer.send_batch(topic, values, partition=i % partitions))
            if len(pending) >= 64:
                await asyncio.gather(*pending)
                pending = []
        await asyncio.gather(*pending)
    return batches * len(values)


def measure_startup(partitions: int, gigabytes: float) -> dict[str, Any]:
    from tests.brokers import BrokerMinProcess

    with tempfile.TemporaryDirectory(
        prefix="kafkakit-startup-", dir=os.environ.get("KAFKAKIT_SCALE_DIR")
    ) as tmp:
        broker = BrokerMinProcess(Path(tmp) / "data")
        broker.start()
        try:
            t = time.perf_counter()
            _create(broker.bootstrap_servers, ["big"], partitions)
            created = time.perf_counter() - t
            t = time.perf_counter()
            records = asyncio.run(_fill(broker.bootstrap_servers, "big", partitions, gigabytes))
            filled = time.perf_counter() - t
            size = sum(f.stat().st_size for f in (Path(tmp) / "data").rglob("*") if f.is_file())
            assert broker.pid is not None
            rss_running = _rss_mb(broker.pid)
            broker.stop()
            t = time.perf_counter()
            broker.start()  # returns once the broker answers
            clean = time.perf_counter() - t
            assert broker.pid is not None
            rss_clean = _rss_mb(broker.pid)
            broker.kill()
            t = time.perf_counter()
            broker.start()
            recovered = time.perf_counter() - t
            assert broker.pid is not None
            rss_recovered = _rss_mb(broker.pid)
        finally:
            broker.stop()
    return {"partitions": partitions, "bytes": size, "records": records, "create_s": created, "fill_s": filled,
            "rss_running_mb": rss_running, "clean_start_s": clean, "rss_after_clean_start_mb": rss_clean,
            "recovery_start_s": recovered, "rss_after_recovery_mb": rss_recovered}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--brokers", default="broker_min,kafka")
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--partitions", default="1,10,100,1000,10000")
    parser.add_argument("--layouts", default="one-topic,100-topics")
    parser.add_argument("--kafka-max-partitions", type=int, default=10_000, help="skip larger Kafka points")
    parser.add_argument(
        "--kafka-stock",
        action="store_true",
        help=f"run Kafka without the benchmark settings {KAFKA_BENCH_CONFIG}",
    )
    parser.add_argument(
        "--kafka-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="another Kafka server property (repeatable)",
    )
    parser.add_argument(
        "--merge",
        action="append",
        default=[],
        metavar="JSON",
        help="points of an earlier --json run to report and plot with this run's (repeatable; "
        "--brokers '' measures nothing)",
    )
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--plots", help="write PNG plots into this directory")
    parser.add_argument(
        "--startup", action="store_true", help="measure broker_min start-up and recovery instead"
    )
    parser.add_argument("--startup-partitions", type=int, default=10_000)
    parser.add_argument("--startup-gb", type=float, default=10.0)
    parser.add_argument("--json")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(run_worker(json.loads(args.worker))))
        return
    if args.smoke:
        args.brokers, args.partitions, args.records, args.layouts = (
            "broker_min",
            "1,100",
            5000,
            "one-topic,100-topics",
        )
        args.startup_partitions, args.startup_gb = 200, 0.01
    output: dict[str, Any] = {"args": vars(args), "kafka_config": _kafka_config(args)}
    if args.startup or args.smoke:
        output["startup"] = measure_startup(args.startup_partitions, args.startup_gb)
        print(json.dumps(output["startup"], indent=1))
    if not args.startup:
        points = merge_points(args.merge, measure_curves(args))
        output["points"] = points
        print(report_curves(points, args.records))
        if args.plots:
            for path in plot_curves(points, args.records, Path(args.plots)):
                print(f"wrote {path}")
    if args.json:
        Path(args.json).write_text(json.dumps(output, indent=1))


if __name__ == "__main__":
    main()
