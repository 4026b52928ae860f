"""The cost of idempotence and of transactions: kafkakit against confluent-kafka.

Each client produces N records of 100 B to a one-partition topic in three modes:

- ``plain``: acks=all, idempotence off;
- ``idempotent``: acks=all, idempotence on;
- ``transactional``: transactions of 1,000 records (begin, send 1,000, commit).

Every client runs in its own subprocess against the same broker (broker_min as a
subprocess, Apache Kafka from tests/brokers.py), so no client shares an
interpreter or a GIL with the broker or with another client. Both clients get
the same batching (linger 5 ms, 1 MiB batches). The clock starts after the
producer is connected and has its producer id (after init_transactions, or
after one untimed record when not transactional) and stops when the last record is acknowledged (the last transaction committed).

    python benchmarks/transactions.py                    # 200,000 records, 3 runs, both brokers
    python benchmarks/transactions.py --smoke            # a few seconds, broker_min only, for CI
    python benchmarks/transactions.py --brokers kafka --records 500000 --runs 5

Prints a markdown table per broker: records/s per client and mode, the cost of
idempotence (idempotent / plain) and of transactions (transactional / plain),
and kafkakit's ratio to confluent-kafka per mode.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
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

CLIENTS = ("kafkakit", "confluent")
MODES = ("plain", "idempotent", "transactional")
CLIENT_NAMES = {"kafkakit": "kafkakit", "confluent": "confluent-kafka"}
LINGER_MS = 5
BATCH_BYTES = 1 << 20


# --------------------------------------------------------------------------- workers
# Each worker runs in a fresh interpreter: `transactions.py --worker JSON`, and
# prints the elapsed seconds on its last line of output.


def _payload(size: int) -> bytes:
    return (b"0123456789abcdef" * (size // 16 + 1))[:size]


def _transaction_sizes(n: int, per_txn: int) -> list[int]:
    """Split n records into transactions of per_txn (the last one may be shorter)."""
    return [min(per_txn, n - i) for i in range(0, n, per_txn)]


async def _produce_kafkakit(bootstrap: str, topic: str, n: int, size: int, mode: str, per_txn: int) -> float:
    from kafkakit import Producer

    value = _payload(size)
    options: dict[str, Any] = {"acks": "all", "linger_ms": LINGER_MS, "max_batch_size": BATCH_BYTES}
    if mode == "transactional":
        options["transactional_id"] = f"bench-{uuid.uuid4().hex}"
    else:
        options["enable_idempotence"] = mode == "idempotent"
    async with Producer(bootstrap_servers=bootstrap, **options) as producer:
        await producer.partitions_for(topic)
        if mode == "transactional":
            await producer.init_transactions()
        else:  # one record first, so the producer id (InitProducerId) and connection are not timed
            await producer.send_and_wait(topic, value, partition=0)
        send = producer.send
        start = time.perf_counter()
        if mode == "transactional":
            for count in _transaction_sizes(n, per_txn):
                producer.begin_transaction()
                for _ in range(count):
                    await send(topic, value, partition=0)
                await producer.commit_transaction()  # flushes; raises if any record failed
        else:
            last = None
            for _ in range(n):
                last = await send(topic, value, partition=0)
            await producer.flush()
            assert last is not None
            await last  # the driver checks the log end, so an earlier failure is caught too
        return time.perf_counter() - start


def _confluent_config(bootstrap: str, mode: str) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "linger.ms": LINGER_MS,
        "batch.size": BATCH_BYTES,
        "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 2_000_000,
        "enable.idempotence": mode != "plain",
    }
    if mode == "transactional":
        config["transactional.id"] = f"bench-{uuid.uuid4().hex}"
    return config


def _produce_confluent(bootstrap: str, topic: str, n: int, size: int, mode: str, per_txn: int) -> float:
    from confluent_kafka import KafkaException, Producer

    value = _payload(size)
    failures: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    producer = Producer({**_confluent_config(bootstrap, mode), "on_delivery": on_delivery})
    producer.list_topics(topic, timeout=10)
    if mode == "transactional":
        producer.init_transactions(30)
    else:  # one record first: librdkafka gets its producer id in the background, so don't time that
        producer.produce(topic, value, partition=0)
        producer.flush(30)
    produce, poll = producer.produce, producer.poll

    def produce_records(count: int) -> None:
        for i in range(count):
            try:
                produce(topic, value, partition=0)
            except BufferError:
                poll(0.01)
                produce(topic, value, partition=0)
            if i & 0x3FF == 0:
                poll(0)

    start = time.perf_counter()
    if mode == "transactional":
        for count in _transaction_sizes(n, per_txn):
            producer.begin_transaction()
            produce_records(count)
            try:
                producer.commit_transaction(60)  # flushes first
            except KafkaException as exc:
                raise SystemExit(f"commit failed: {exc}") from exc
    else:
        produce_records(n)
        remaining = producer.flush(120)
        assert remaining == 0, f"{remaining} messages not delivered"
    elapsed = time.perf_counter() - start
    assert not failures, f"{len(failures)} deliveries failed, first: {failures[0]}"
    return elapsed


def run_worker(spec: dict[str, Any]) -> float:
    args = (
        str(spec["bootstrap"]),
        str(spec["topic"]),
        int(spec["records"]),
        int(spec["size"]),
        str(spec["mode"]),
        int(spec["per_txn"]),
    )
    if spec["client"] == "kafkakit":
        return asyncio.run(_produce_kafkakit(*args))
    if spec["client"] == "confluent":
        return _produce_confluent(*args)
    raise SystemExit(f"unknown client {spec['client']!r}")


def spawn_worker(spec: dict[str, Any], timeout: float) -> float:
    out = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    if out.returncode != 0:
        raise RuntimeError(
            f"worker {spec['client']}/{spec['mode']} failed:\n{out.stdout[-2000:]}{out.stderr[-3000:]}"
        )
    return float(out.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- driver


def create_topic(bootstrap: str, name: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])[name].result(30)
    deadline = time.time() + 30
    while name not in admin.list_topics(timeout=10).topics and time.time() < deadline:
        time.sleep(0.1)


def high_watermark(bootstrap: str, topic: str) -> int:
    """The log end of partition 0 (data plus transaction markers)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-check-" + uuid.uuid4().hex})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        consumer.close()


def start_broker(kind: str, workdir: Path) -> Any:
    import tests.brokers as brokers

    if kind == "broker_min":
        server: Any = brokers.BrokerMinProcess(workdir / "broker_min")
    elif kind == "kafka":
        server = brokers.KafkaServer(workdir / "kafka")
    else:
        raise SystemExit(f"unknown broker {kind!r} (broker_min or kafka)")
    server.start()
    return server


def measure_one(bootstrap: str, client: str, mode: str, args: argparse.Namespace) -> float:
    """One run in a fresh subprocess on a fresh topic; checks every record reached the log."""
    topic = f"bench-txn-{client}-{mode}-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    spec = {
        "client": client,
        "mode": mode,
        "bootstrap": bootstrap,
        "topic": topic,
        "records": args.records,
        "size": args.size,
        "per_txn": args.transaction_size,
    }
    seconds = spawn_worker(spec, timeout=max(180.0, args.records / 1000))
    end = high_watermark(bootstrap, topic)
    if end < args.records:
        raise RuntimeError(f"{client}/{mode}: only {end} of {args.records} records in the log")
    return seconds


def measure(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """records/s (median of runs) keyed by 'broker/client/mode'."""
    rates: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="kafkakit-txn-bench-") as tmp:
        for broker in args.brokers.split(","):
            server = start_broker(broker, Path(tmp))
            try:
                table = rates.setdefault(broker, {})
                for client in args.clients.split(","):
                    for mode in MODES:
                        times = [
                            measure_one(server.bootstrap_servers, client, mode, args)
                            for _ in range(args.runs)
                        ]
                        rate = args.records / statistics.median(times)
                        table[f"{client}/{mode}"] = rate
                        runs = ", ".join(f"{args.records / t:,.0f}" for t in times)
                        print(
                            f"produce {broker}/{client}/{mode} {rate:,.0f} rec/s (runs: {runs})", flush=True
                        )
            finally:
                server.stop()
    return rates


def report(rates: dict[str, dict[str, float]], args: argparse.Namespace, command: str) -> str:
    lines = [
        f"\nCommand: `{command}`",
        f"{args.records:,} records x {args.size} B, one partition, {args.transaction_size:,}-record transactions, median of {args.runs} run(s); records/s",
    ]
    for broker, table in rates.items():
        clients = [c for c in args.clients.split(",") if f"{c}/plain" in table]
        lines.append(f"\n### {broker}\n")
        lines.append(
            "| client | acks=all | idempotent | transactional | idempotent / plain | transactional / plain |"
        )
        lines.append("|---|---:|---:|---:|---:|---:|")
        for client in clients:
            plain, idem, txn = (table[f"{client}/{mode}"] for mode in MODES)
            lines.append(
                f"| {CLIENT_NAMES[client]} | {plain:,.0f} | {idem:,.0f} | {txn:,.0f} | {idem / plain:.2f}x | {txn / plain:.2f}x |"
            )
        if {"kafkakit", "confluent"} <= set(clients):
            ratios = " | ".join(
                f"{table[f'kafkakit/{mode}'] / table[f'confluent/{mode}']:.2f}x" for mode in MODES
            )
            lines.append(f"| kafkakit / confluent-kafka | {ratios} | | |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--transaction-size", type=int, default=1000, help="records per transaction")
    parser.add_argument("--brokers", default="broker_min,kafka", help="comma-separated: broker_min, kafka")
    parser.add_argument("--clients", default=",".join(CLIENTS), help="comma-separated: kafkakit, confluent")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny run for CI: 3,000 records, one run, broker_min only"
    )
    args = parser.parse_args()
    if args.worker:
        print(run_worker(json.loads(args.worker)))
        return
    if args.records <= 0 or args.runs <= 0 or args.transaction_size <= 0:
        parser.error("--records, --runs and --transaction-size must be positive")
    unknown = set(args.clients.split(",")) - set(CLIENTS)
    if unknown:
        parser.error(f"unknown clients {sorted(unknown)} (choose from {', '.join(CLIENTS)})")
    if args.smoke:
        args.records = args.records if "--records" in sys.argv else 3_000
        args.runs, args.brokers = 1, "broker_min"
    command = shlex.join([Path(sys.executable).name, "benchmarks/transactions.py", *sys.argv[1:]])
    print(report(measure(args), args, command))


if __name__ == "__main__":
    main()
